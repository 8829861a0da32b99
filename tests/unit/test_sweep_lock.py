"""vitfsdp.launch.resume.SweepLock: a refused sweep names the holder, also one that took the
lock a moment ago and has not written its name yet (the file is empty in between)."""

from __future__ import annotations

import threading

import pytest

from vitfsdp.core.layout import LOCK_FILE
from vitfsdp.launch.resume import SweepLock


def test_the_refusal_waits_for_a_new_holder_to_write_its_name(tmp_path):
    winner = SweepLock(tmp_path).acquire()
    path = tmp_path / LOCK_FILE
    path.write_text("")  # as filelock leaves it between taking the lock and our write
    writer = threading.Timer(0.3, path.write_text, ["host node7 pid 42"])
    writer.start()
    try:
        with pytest.raises(RuntimeError, match=r"another sweep \(host node7 pid 42\)"):
            SweepLock(tmp_path).acquire()
    finally:
        writer.join()
        winner.release()


def test_a_holder_that_never_names_itself_is_another_process(tmp_path):
    winner = SweepLock(tmp_path).acquire()
    (tmp_path / LOCK_FILE).write_text("")
    try:
        with pytest.raises(RuntimeError, match=r"another sweep \(another process\) is working"):
            SweepLock(tmp_path).acquire()
    finally:
        winner.release()
