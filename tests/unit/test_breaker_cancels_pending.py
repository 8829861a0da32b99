"""The same-failure breaker of a Slurm sweep (vitfsdp.sweep.slurm_jobs._Submitter) on
captured job states, with a stand-in ``scancel`` on PATH: the sweep's pending jobs are
cancelled in one call and their points recorded ``cancelled``; running jobs (a pack whose
later points wait in it) are left to run and named with their ``scancel``. The real thing on
the virtual cluster: tests/integration/test_slurm_sweep.py and test_slurm_pack.py."""

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
         position: int | None = None, reason: str = "") -> PointState:
    run_dir = sweep / name
    run_dir.mkdir()
    (run_dir / "job.json").write_text(json.dumps({"job_id": job_id}))
    if status:
        (run_dir / "summary.json").write_text(json.dumps({"status": status, "reason": reason}))
    job = SlurmJob(state, reason="JobHeldUser" if state == "PENDING" else "")
    return PointState(run_dir, job_id=job_id, state=state, status=status, position=position,
                      job=job)


def _sweep_rows(sweep: Path) -> list[PointState]:
    """Three jobs failed with one reason (node names aside); array tasks 9_3 and 9_4
    pending; pack 10 running (its second point waits in it); pack 11 pending (two points)."""
    return [*[_row(sweep, f"f{i}", f"9_{i}", "FAILED", "failed", reason=REASON.format(i))
              for i in range(3)],
            _row(sweep, "p3", "9_3", "PENDING"), _row(sweep, "p4", "9_4", "PENDING"),
            _row(sweep, "r0", "10", "RUNNING", position=0),
            _row(sweep, "r1", "10", "RUNNING", position=1),
            _row(sweep, "k0", "11", "PENDING", position=0),
            _row(sweep, "k1", "11", "PENDING", position=1)]


def _units(waiting: int = 0) -> list[pack.Unit]:
    units = [pack.Unit(5, lambda: [], [f"9_{i}" for i in range(5)]),
             pack.Unit(1, lambda: [], ["10"]), pack.Unit(1, lambda: [], ["11"])]
    return units + [pack.Unit(1, lambda: ["12"]) for _ in range(waiting)]


def test_the_breaker_cancels_pending_jobs_in_one_call_and_leaves_running_ones(
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
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert (f"none completed: {REASON.format(0)}; 3 pending jobs cancelled (9_3 9_4 11) and "
            "2 jobs not submitted, as they would fail the same way after the wait in the "
            "queue; 1 job already running left to run (10); stop it with: scancel 10. "
            "Fix it, then go on with: python -m vitfsdp.sweep -m --rerun-failed ") in line
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
            "them with: scancel 9_3 9_4 11; 1 job already running left to run (10)") in line


def test_no_job_waiting_no_line(tmp_path, scancel, caplog):
    """Every job submitted and none pending: nothing to stop, nothing said (as before)."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = [r for r in _sweep_rows(sweep) if r.state != "PENDING"]
    with caplog.at_level(logging.ERROR):
        assert _Submitter(_units(), None, sweep)(rows) is False
    assert not scancel.exists() and not caplog.records
