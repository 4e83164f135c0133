"""Waiting on the class server's jobs and on processes (Linux /proc), and the signal handlers a test
must leave as it found them."""

import time

from server.jobs import JobManager

CEILING_S = 300  # a job in the tests: generous, the machine is shared


def wait_for(manager: JobManager, job_id: str, condition, ceiling: float = CEILING_S):
    deadline = time.monotonic() + ceiling
    while True:
        status = manager.status(job_id)
        if condition(status):
            return status
        assert time.monotonic() < deadline, f"gave up waiting; last status {status}"
        time.sleep(0.2)


def children_of(pid: int) -> set[int]:
    """Processes whose parent is `pid` (Linux /proc)."""
    from pathlib import Path

    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its exit status waits to be read
