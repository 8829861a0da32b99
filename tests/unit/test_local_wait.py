"""vitfsdp.launch.local waits for a point's processes until one ends, not for a fixed poll."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vitfsdp.launch.local import _stop, _wait_for_one


def test_returns_when_the_first_running_process_ends_not_after_the_poll():
    procs = [subprocess.Popen(["sleep", "0.2"]), subprocess.Popen(["sleep", "60"])]
    try:
        _wait_for_one(procs, poll_s=60)
        assert procs[0].returncode == 0  # ended, and seen when it did
        assert procs[1].poll() is None  # 60 s were not waited out
    finally:
        procs[1].kill()
        procs[1].wait()



#: A stand-in for a torchrun whose rank ignores SIGTERM: the parent starts a child that
#: ignores it, prints the child's pid, and ignores SIGTERM itself.
_STUBBORN = ("import signal, subprocess, sys, time\n"
             "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
             "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
             "print(child.pid, flush=True)\n"
             "time.sleep(60)\n")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended: its parent has not reaped it


def _stubborn() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", _STUBBORN], stdout=subprocess.PIPE,
                            text=True)
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize("second_interrupt", [False, True], ids=["grace over", "^C^C"])
def test_a_stop_kills_the_ranks_below_a_torchrun_that_outlives_it(monkeypatch,
                                                                    second_interrupt):
    """After the grace, or on a second Ctrl-C while waiting it out, the process and the
    process below it (a rank) are killed: neither is left running."""
    proc, child = _stubborn()
    if second_interrupt:
        def interrupted(self, timeout=None):
            if timeout is not None:
                raise KeyboardInterrupt
            return wait(self)
        wait = subprocess.Popen.wait
        monkeypatch.setattr(subprocess.Popen, "wait", interrupted)
    try:
        if second_interrupt:
            with pytest.raises(KeyboardInterrupt):
                _stop([proc], grace_s=30)
        else:
            _stop([proc], grace_s=0.5)
        assert proc.poll() is not None
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        for pid in (proc.pid, child):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
