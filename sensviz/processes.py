"""Child processes that end with their parent.

A worker process (a sweep's local worker, the explorer's training worker) calls `exit_with_parent`
at its start: when the process that started it is gone, even killed with SIGKILL so that it could
not end its children, the worker ends too instead of running on (and holding CPUs) unseen.
"""

from __future__ import annotations

import os
import threading
import time

WATCH_INTERVAL_S = 0.5
"""How often a worker checks that its parent is still there."""

_watched: set[int] = set()


def exit_with_parent(parent_pid: int) -> None:
    """End this process (exit code 1, at once: `os._exit`) as soon as `parent_pid` is no longer its
    parent, checked every `WATCH_INTERVAL_S` by a daemon thread. Calling it again for the same
    parent does nothing."""
    if parent_pid in _watched:
        return
    _watched.add(parent_pid)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="sensviz-exit-with-parent").start()
