"""vitfsdp.launch.local waits for a point's processes until one ends, not for a fixed poll."""

from __future__ import annotations

import subprocess

from vitfsdp.launch.local import _wait_for_one


def test_returns_when_the_first_running_process_ends_not_after_the_poll():
    procs = [subprocess.Popen(["sleep", "0.2"]), subprocess.Popen(["sleep", "60"])]
    try:
        _wait_for_one(procs, poll_s=60)
        assert procs[0].returncode == 0  # ended, and seen when it did
        assert procs[1].poll() is None  # 60 s were not waited out
    finally:
        procs[1].kill()
        procs[1].wait()

