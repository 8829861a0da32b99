"""The local launcher's wait (:func:`vitfsdp.launch.local.run_until_done`): the first failure
stops the other nodes' processes, and a timeout stops them all with its own result."""

from __future__ import annotations

import json
import os
import re
import sys
import time

from vitfsdp.launch.local import run_until_done, tail

#: A process that writes its pid to the file argv[1], then sleeps argv[2] seconds and exits
#: with status argv[3].
SLEEPER = ("import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
           "time.sleep(float(sys.argv[2])); sys.exit(int(sys.argv[3]))")


def _sleeper(pid_file, seconds: float, status: int = 0) -> list[str]:
    return [sys.executable, "-c", SLEEPER, str(pid_file), str(seconds), str(status)]


def _gone(pid_file) -> bool:
    """Whether the process whose pid ``pid_file`` holds has ended and been reaped."""
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return True
    return False


def test_a_timeout_stops_every_process_and_returns_none(tmp_path):
    pids = [tmp_path / f"pid{k}" for k in range(2)]
    start = time.monotonic()
    code = run_until_done([_sleeper(p, 60) for p in pids], [dict(os.environ)] * 2, None,
                          poll_s=0.1, timeout_s=2)
    assert code is None  # not 0: the sleepers would have exited 0 after 60 s
    assert time.monotonic() - start < 30  # stopped by SIGTERM, not waited for
    assert all(_gone(p) for p in pids)


def test_within_the_timeout_the_first_failure_stops_the_others_and_is_returned(tmp_path):
    pids = [tmp_path / f"pid{k}" for k in range(3)]
    cmds = [_sleeper(pids[0], 60), _sleeper(pids[1], 0.5, 3), _sleeper(pids[2], 60)]
    start = time.monotonic()
    assert run_until_done(cmds, [dict(os.environ)] * 3, None, poll_s=0.1, timeout_s=120) == 3
    assert time.monotonic() - start < 30 and all(_gone(p) for p in pids)
    assert run_until_done([_sleeper(pids[0], 0)], [dict(os.environ)], None, poll_s=0.1,
                          timeout_s=120) == 0


def test_a_stopped_sweep_stops_its_points_processes(tmp_path):
    """The sweep's SIGTERM or SIGHUP (a SystemExit, vitfsdp.core.hangup.exit_on_hangup) or a ^C
    while a point runs: its processes are stopped before the exception goes on."""
    import signal
    import threading

    import pytest

    from vitfsdp.core.hangup import exit_on_hangup

    pids = [tmp_path / f"pid{k}" for k in range(2)]
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for sig in old:
            signal.signal(sig, signal.SIG_DFL)
        exit_on_hangup()

        def hang_up():
            while not all(p.exists() and p.read_text() for p in pids):  # both started
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGHUP)  # handled in the main thread, in its wait

        threading.Thread(target=hang_up, daemon=True).start()
        start = time.monotonic()
        with pytest.raises(SystemExit) as stopped:
            run_until_done([_sleeper(p, 60) for p in pids], [dict(os.environ)] * 2, None,
                           poll_s=0.1)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    assert stopped.value.code == 128 + signal.SIGHUP
    assert time.monotonic() - start < 30 and all(_gone(p) for p in pids)


def test_the_log_tail_ends_with_the_error_not_the_launchers_lines(tmp_path):
    """A rank's traceback, Hydra's closing hint and torchrun's failure report (the log of a
    point whose every rank failed to import torchvision): the tail keeps the traceback up
    to its exception and leaves out the hint and the report."""
    log = tmp_path / "train.log"
    log.write_text(
        "Error executing job with overrides: ['strategy=DDP', 'nodes=1']\n"
        "Traceback (most recent call last):\n"
        '  File "torchvision/_meta_registrations.py", line 163, in <module>\n'
        "RuntimeError: operator torchvision::nms does not exist\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
        "E1126 10:33:18.123 12345 torch/distributed/elastic/multiprocessing/api.py:874] "
        "failed (exitcode: 1) local_rank: 1 (pid: 15860) of binary: python\n"
        "Traceback (most recent call last):\n  File \"torchrun\", line 8\n", encoding="utf-8")
    lines = tail(log).splitlines()
    assert lines[0].startswith("Error executing job")
    assert lines[-1] == "RuntimeError: operator torchvision::nms does not exist"
    assert tail(tmp_path / "missing.log") == ""


def test_a_hung_point_gets_stall_lines_and_status_says_it_runs(tmp_path, monkeypatch, caplog):
    """A real point whose rank 1 hangs at step 3 (``VITFSDP_TEST_FAULT=hang:1:3``) until
    rank 0's collective times out: while it hangs the sweep's progress says, once per quiet
    interval, that no progress came since step 2 (before: nothing between the last step
    line and the point's end), and ``--status``'s row says RUNNING with its last record
    (before: ``-``). The floor is lowered to 2 s for the test (180 s in a sweep)."""
    import io
    import logging

    from rich.console import Console

    from tests.conftest import TINY
    from vitfsdp import failures
    from vitfsdp.launch import local, status
    from vitfsdp.progress import SweepProgress
    from vitfsdp.records import write_json_atomic

    monkeypatch.setenv(failures.FAULT_ENV, "hang:1:3")
    run_dir = tmp_path / "0_point"
    run_dir.mkdir()
    write_json_atomic(run_dir / "job.json", {"launcher": "local", "job_id": None,
                                             "sweep": local.sweep_process()})
    overrides = [*TINY, "train.steps=6", "train.log_every=1", "cluster.gpus_per_node=2",
                 "train.timeout_s=6"]
    bars = SweepProgress([6], console=Console(file=io.StringIO()), stall_floor_s=2)
    cells = []

    def poll():
        if bars.tick("[1/1]") and not cells:
            cells.append(status._state_cell(status.read_state(run_dir)))

    bars.start_point(0, "[1/1]", "[1/1] hang:1:3")
    with caplog.at_level(logging.INFO, logger="vitfsdp.progress"):
        local.run_point(overrides, run_dir, 2, log_path=run_dir / "train.log",
                        on_window=lambda w: bars.window("[1/1]", w), poll_s=0.2,
                        on_poll=poll)
    said = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
    print("\n".join(said), cells, sep="\n")
    lines = [line for line in said if "no step yet" not in line]  # start-up over 2 s: said
    assert lines and all(re.fullmatch(r"\[1/1\] no progress for \d+ s \(last step 2/6 at "
                                      r"\d\d:\d\d:\d\d; windows so far came "
                                      r"(at most [\d.]+|less than 1) s apart\)", line)
                             for line in lines), lines
    quiet = [int(line.split("for ")[1].split(" s")[0]) for line in lines]
    interval = bars.stall_interval_s()
    assert all(b - a >= interval - 1 for a, b in zip(quiet, quiet[1:], strict=False)), quiet
    assert re.fullmatch(r"RUNNING \(last record \d\d:\d\d:\d\d, \d+ s ago\)", cells[0]), cells
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "timeout"
