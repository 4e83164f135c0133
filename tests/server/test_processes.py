"""sensviz.processes: a worker process ends with its parent."""

import os
import subprocess
import sys
import time

from helpers.server import alive

from sensviz.processes import WATCH_INTERVAL_S

CEILING_S = 120.0
"""Longest wait for a process to end (a busy machine)."""


WATCHED_CHILD = """
import os, threading, time
from sensviz.processes import exit_with_parent
exit_with_parent(os.getppid())
exit_with_parent(os.getppid())  # a second call for the same parent starts no second watcher
watchers = [t for t in threading.enumerate() if t.name == "sensviz-exit-with-parent"]
print(os.getpid(), len(watchers), flush=True)
time.sleep(600)
"""

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


def test_exit_with_parent_ends_a_child_whose_parent_was_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, WATCHED_CHILD], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        child, watchers = map(int, parent.stdout.readline().split())
        assert watchers == 1
        time.sleep(3 * WATCH_INTERVAL_S)
        assert alive(child)  # its parent is there: it runs on
    finally:
        parent.kill()  # SIGKILL: the parent cannot end its child itself
        parent.wait()
    deadline = time.monotonic() + CEILING_S
    while alive(child):
        assert time.monotonic() < deadline, "the child outlived its parent"
        time.sleep(0.1)
