"""One app process of the Ray tests (`test_ray_jobs.py`): a web server's job manager and kept models,
taken as the explorer's server takes them (`server.jobs.job_manager` on `$SENSVIZ_DATA_DIR`, on the
Ray cluster at `$SENSVIZ_RAY_ADDRESS`), driven by one JSON command per line on stdin, answered by
one JSON line on stdout (everything else this process prints goes to stderr).

    python tests/ray_app.py '{"capacity": 2, "threads": 1, "calibration": {"op_s": 1e-6, "flop_s": 1e-12}}'

The argument: the manager's options (`JobManager`'s; used by the server that starts the queue). The
first line out is {"ready": {"capacity": ...}} or, when no manager could be made, {"error": "..."}
(and the process exits). Then each command ["submit", owner, request, address], ["status", job],
["active", owner], ["stop", job, owner], ["records", job], ["open", token] (the kept model's task
label), ["end_queue"] is answered {"ok": value} or {"error": "<exception type>: <message>"}.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sensviz as sv  # noqa: E402
from sensviz.files import data_dir  # noqa: E402
from server import budget, jobs  # noqa: E402
from server.kept import KeptStore, cap_bytes  # noqa: E402
from server.worker import TrainRequest  # noqa: E402


def answer(manager, store: KeptStore, command: str, *args):
    if command == "submit":
        owner, request, address = args
        return manager.submit(owner, TrainRequest.from_dict(request), address)
    if command == "status":
        status = manager.status(*args)
        return dataclasses.asdict(status) if status is not None else None
    if command == "open":
        return sv.load_checkpoint(store.data(*args)).task.label
    if command == "end_queue":
        return manager.end_queue()
    if command in ("active", "stop", "records"):
        return getattr(manager, command)(*args)
    raise ValueError(f"unknown command {command!r}")


ANSWERS = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # the answers alone on stdout: what Ray prints (a lost worker's message) goes to stderr


def say(value) -> None:
    print(json.dumps(value), file=ANSWERS, flush=True)


def main() -> None:
    options = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    if "calibration" in options:
        options["calibration"] = budget.Calibration(**options["calibration"])
    store = KeptStore(data_dir() / "kept", cap_bytes())
    try:
        manager = jobs.job_manager(data_dir() / "jobs", store, **options)
    except Exception as err:  # noqa: BLE001 - reported to the test, which checks it
        say({"error": f"{type(err).__name__}: {err}"})
        return
    say({"ready": {"capacity": manager.capacity, "kind": type(manager).__name__}})
    for line in sys.stdin:
        try:
            say({"ok": answer(manager, store, *json.loads(line))})
        except Exception as err:  # noqa: BLE001 - reported to the test, which checks it
            say({"error": f"{type(err).__name__}: {err}"})
    manager.close()


if __name__ == "__main__":
    main()
