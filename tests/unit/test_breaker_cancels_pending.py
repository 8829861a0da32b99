"""The same-failure breaker of a Slurm sweep (vitfsdp.sweep.slurm_jobs._Submitter) on
captured job states, with a stand-in ``scancel`` on PATH: the sweep's pending jobs are
cancelled in one call and their points recorded ``cancelled``; a running pack whose later
points wait in it is named in the sweep's stop file (its script then runs no further point)
and the point it runs now with its ``scancel``; other running jobs are left to run and named
with their ``scancel``. The real thing on the virtual cluster:
tests/integration/test_slurm_sweep.py and test_slurm_pack.py."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from vitfsdp.launch import pack
from vitfsdp.launch.status import PointState, SlurmJob
from vitfsdp.sweep.slurm_jobs import _Submitter

REASON = "RuntimeError: Unable to find address for: ib0 on node{}"


@pytest.fixture
def scancel(tmp_path, monkeypatch):
    """A ``scancel`` that writes its arguments to a file (and exits with $SCANCEL_RC)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scancel_calls"
    script = bin_dir / "scancel"
    script.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n'
                      'if [ -n "$SCANCEL_RC" ]; then echo "scancel: error: boom" >&2; '
                      'exit "$SCANCEL_RC"; fi\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def _row(sweep: Path, name: str, job_id: str, state: str, status: str | None = None,
         position: int | None = None, reason: str = "", started: bool = False) -> PointState:
    run_dir = sweep / name
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps({"job_id": job_id}))
    if status:
        (run_dir / "summary.json").write_text(json.dumps({"status": status, "reason": reason}))
    job = SlurmJob(state, reason="JobHeldUser" if state == "PENDING" else "")
    own = SlurmJob(state) if started or position is None else None  # a packed point: its step
    return PointState(run_dir, job_id=job_id, state=state, status=status, position=position,
                      job=job, own=own)


def _sweep_rows(sweep: Path) -> list[PointState]:
    """Three jobs failed with one reason (node names aside); array tasks 9_3 and 9_4
    pending; pack 10 running (its second point waits in it); pack 11 pending (two points);
    job 12, a point's own, running."""
    return [*[_row(sweep, f"f{i}", f"9_{i}", "FAILED", "failed", reason=REASON.format(i))
              for i in range(3)],
            _row(sweep, "p3", "9_3", "PENDING"), _row(sweep, "p4", "9_4", "PENDING"),
            _row(sweep, "r0", "10", "RUNNING", position=0, started=True),
            _row(sweep, "r1", "10", "RUNNING", position=1),
            _row(sweep, "k0", "11", "PENDING", position=0),
            _row(sweep, "k1", "11", "PENDING", position=1),
            _row(sweep, "j12", "12", "RUNNING")]


def _units(waiting: int = 0) -> list[pack.Unit]:
    units = [pack.Unit(5, lambda: [], [f"9_{i}" for i in range(5)]),
             pack.Unit(1, lambda: [], ["10"]), pack.Unit(1, lambda: [], ["11"]),
             pack.Unit(1, lambda: [], ["12"])]
    return units + [pack.Unit(1, lambda: ["13"]) for _ in range(waiting)]


WHY = (f"3 jobs failed before their first timed window with the same reason "
       f"({REASON.format(0)}); fix it and rerun")


def test_the_breaker_cancels_pending_jobs_in_one_call_and_stops_running_packs(
        tmp_path, scancel, caplog):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = _sweep_rows(sweep)
    submitter = _Submitter(_units(waiting=2), None, sweep)
    with caplog.at_level(logging.ERROR):
        assert submitter(rows) is True
    assert scancel.read_text().splitlines() == ["9_3 9_4 11"]  # one call, pending only
    for name, job_id in [("p3", "9_3"), ("p4", "9_4"), ("k0", "11"), ("k1", "11")]:
        summary = json.loads((sweep / name / "summary.json").read_text())
        assert summary["status"] == "cancelled" and summary["interrupted"] is True
        assert summary["reason"] == (
            "cancelled before it started: 3 jobs failed before their first timed window with "
            f"the same reason ({REASON.format(0)}); fix it and rerun")
        assert summary["slurm"]["job_id"] == job_id
        assert summary["slurm"]["state"] == "CANCELLED"
        assert summary["slurm"]["reason"] == "JobHeldUser"
    assert json.loads((sweep / "k1" / "summary.json").read_text())["slurm"]["job_state"] \
        == "CANCELLED"
    assert not (sweep / "r0" / "summary.json").exists()  # a running pack, and its waiting point
    assert not (sweep / "r1" / "summary.json").exists()
    # pack 10 runs no further point: its script reads its line before point 2
    assert (sweep / "packs" / "stop").read_text() == f"10 {WHY}\n"
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert (f"none completed: {REASON.format(0)}; 3 pending jobs cancelled (9_3 9_4 11) and "
            "2 jobs not submitted, as they would fail the same way after the wait in the "
            "queue; 1 running pack (10) runs no further point; stop the point it runs now "
            "with: scancel 10; 1 job already running left to run (12); stop it with: "
            "scancel 12. Fix it, then go on with: python -m vitfsdp.sweep -m --rerun-failed "
            ) in line
    assert submitter(rows) is True  # once: no second scancel, no second line
    assert len(scancel.read_text().splitlines()) == 1
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1


def test_a_failed_scancel_records_nothing_and_says_how_to_cancel(tmp_path, scancel,
                                                                monkeypatch, caplog):
    monkeypatch.setenv("SCANCEL_RC", "1")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = _sweep_rows(sweep)
    with caplog.at_level(logging.ERROR):
        assert _Submitter(_units(), None, sweep)(rows) is True
    assert not (sweep / "p3" / "summary.json").exists()
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert ("; 3 pending jobs not cancelled (scancel failed: scancel: error: boom): cancel "
            "them with: scancel 9_3 9_4 11; 1 running pack (10) runs no further point") in line


def test_no_job_waiting_no_line(tmp_path, scancel, caplog):
    """Every job submitted, none pending and no point waiting in a running pack (pack 10
    runs its last point): nothing to stop, nothing said, no stop file (as before)."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = [r for r in _sweep_rows(sweep) if r.state != "PENDING" and r.run_dir.name != "r1"]
    with caplog.at_level(logging.ERROR):
        assert _Submitter(_units(), None, sweep)(rows) is False
    assert not scancel.exists() and not caplog.records
    assert not (sweep / "packs").exists()


def test_a_running_pack_alone_is_stopped_before_its_next_point(tmp_path, scancel, caplog):
    """Every job submitted and none pending, but pack 10 has a point still to run: the
    breaker names pack 10 in the stop file (before: nothing, and the pack ran each of its
    points into the same failure) and says so with the scancel of the point it runs now;
    nothing is cancelled."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = [r for r in _sweep_rows(sweep) if r.state != "PENDING" and r.run_dir.name != "j12"]
    with caplog.at_level(logging.ERROR):
        assert _Submitter(_units(), None, sweep)(rows) is True
    assert not scancel.exists()
    assert (sweep / "packs" / "stop").read_text() == f"10 {WHY}\n"
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert (f"none completed: {REASON.format(0)}; 1 running pack (10) runs no further "
            "point; stop the point it runs now with: scancel 10. Fix it, then go on") in line


def test_a_stop_file_not_written_says_how_to_stop_the_packs(tmp_path, scancel, caplog):
    """Where the stop file cannot be written (here ``packs`` is a file), the line says the
    running pack was not stopped and gives its scancel; the pending jobs are cancelled."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "packs").write_text("")
    rows = _sweep_rows(sweep)
    with caplog.at_level(logging.ERROR):
        assert _Submitter(_units(), None, sweep)(rows) is True
    assert scancel.read_text().splitlines() == ["9_3 9_4 11"]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "; 1 running pack (10) not stopped (the stop file could not be written: " in line
    assert "): stop it with: scancel 10; 1 job already running left to run (12)" in line
