"""sensviz.files' FolderLock across processes (a forked one) and within a thread."""

import multiprocessing
import time

from sensviz.files import FolderLock


def test_a_folder_lock_holds_across_processes_and_is_reentrant_in_a_thread(tmp_path):
    """A process that takes the lock waits while another holds it; nested `with`s of one thread do not."""
    context = multiprocessing.get_context("fork")
    go, done = context.Event(), tmp_path / "done"

    def other() -> None:
        go.wait()
        with FolderLock(tmp_path):
            done.write_text("")

    child = context.Process(target=other)  # forked before the lock is taken: it shares no locked file
    child.start()
    lock = FolderLock(tmp_path)
    with lock, lock:  # reentrant: the inner `with` does not wait for the outer
        go.set()
        time.sleep(1.0)
        assert not done.exists() and child.is_alive()  # waiting for the lock
    child.join(60)
    assert child.exitcode == 0 and done.exists()
