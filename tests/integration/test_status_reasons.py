"""The status of points whose Slurm job ended without a word of its own: a job that left
Slurm's queue before it started (``GONE``: ``scancel`` of a pending array task, of which Slurm
keeps no record) is ``cancelled``, not ``failed``; a job that reached its time limit with
no requeue left says its limit in minutes, its attempts and its step; the table's overrides
come from the point's records, not its shortened directory name. No cluster needed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import read
from vitfsdp.launch import status
from vitfsdp.launch.status import SlurmJob
from vitfsdp.records import RunRecords, write_json_atomic
from vitfsdp.rundir import run_dirname
from vitfsdp.sweep import report, slurm_jobs

#: What the reviewer's scancel of a pending array task left: the task's id in no record.
GONE_REASON = ("Slurm job 1840_1 left Slurm's queue before it started (scancel of a pending "
               "task?); Slurm kept no record")


def _submitted(sweep_dir: Path, num: int, job_id: str, **job) -> Path:
    """A point submitted through submitit (job.json only: nothing ran yet)."""
    run_dir = sweep_dir / f"{num}_strategy=NO_SHARD"
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "job.json", {
        "launcher": "slurm", "submitted_with": "submitit", "job_id": job_id,
        "time_limit": "2", "overrides": ["cluster=virtual", "strategy=NO_SHARD"],
        "config": {"cluster": {"time": "2", "max_requeues": 1}}, **job})
    return run_dir


def _gone_rows(sweep_dir: Path, monkeypatch) -> list[status.PointState]:
    """The rows as :func:`status.collect` makes them where Slurm (squeue and sacct)
    answered without a record of the jobs."""
    monkeypatch.setattr(status, "queue_states", lambda ids: {})
    return status.collect(sweep_dir)


def test_a_pending_task_cancelled_out_of_slurms_records_is_cancelled(tmp_path, monkeypatch):
    """scancel of a pending array task: no node, no step, no log; Slurm keeps no record of
    the task (GONE). Recorded ``cancelled`` with a reason that says so, ended from outside
    (the same command runs it again); before: ``failed``, 'ended GONE before the first step
    without a summary: no log line'."""
    run_dir = _submitted(tmp_path, 1, "1840_1")
    (row,) = _gone_rows(tmp_path, monkeypatch)
    assert row.state == "GONE"
    assert status.reconcile(row)
    summary = read(run_dir / "summary.json")
    assert summary["status"] == "cancelled" and row.status == "cancelled"
    assert summary["reason"] == GONE_REASON
    assert summary["interrupted"] is True and "held_back" not in summary
    assert summary["slurm"]["state"] == "GONE" and summary["slurm"]["job_id"] == "1840_1"
    (line,) = report.next_steps(tmp_path, [row])
    assert line.startswith("1 cancelled point (1 cluster=virtual strategy=NO_SHARD) "
                           "(interrupted from outside): the same command runs it again"), line
    # three of them are no same failure of the sweep's jobs to stop it
    assert slurm_jobs.same_early_failure([row, row, row]) is None


def test_the_plain_job_is_said_a_job(tmp_path, monkeypatch):
    _submitted(tmp_path, 0, "77")
    (row,) = _gone_rows(tmp_path, monkeypatch)
    assert status.reconcile(row)
    assert read(row.run_dir / "summary.json")["reason"] == (
        "Slurm job 77 left Slurm's queue before it started (scancel of a pending job?); "
        "Slurm kept no record")


#: Something in the run directory that says the job had started.
STARTS = {
    "a task log line": ("logs/task0.log", "RuntimeError: Unable to find address for: ib0\n"),
    "a step reached": ("metrics.jsonl", json.dumps({"step_end": 20, "ips": 10.0}) + "\n"),
    "run.json": ("run.json", json.dumps({"config": {"train": {"steps": 100}}})),
    "the job's output, empty": ("../.submitit/1840_1_0_log.out", ""),
}


@pytest.mark.parametrize("start", STARTS)
def test_a_job_gone_after_it_started_stays_failed(tmp_path, monkeypatch, start):
    """GONE after a start (a step, a log, run.json, the job's output file) is kept as it
    was: ``failed``, the reason naming Slurm's GONE."""
    run_dir = _submitted(tmp_path, 1, "1840_1")
    name, text = STARTS[start]
    path = (run_dir / name).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    (row,) = _gone_rows(tmp_path, monkeypatch)
    assert status.reconcile(row)
    summary = read(run_dir / "summary.json")
    assert summary["status"] == "failed", summary
    assert summary["reason"].startswith("Slurm job 1840_1 ended GONE "), summary["reason"]


def _preempted(tmp_path: Path, cluster: dict, attempts: int | None, position: int | None = None,
               time_limit: str | None = "2") -> Path:
    """A point whose training saved its checkpoint on the time limit's signal and stopped
    (``preempted``) at step 2380 of 100000, after ``attempts`` attempts."""
    run_dir = tmp_path / "0_point"
    run_dir.mkdir()
    job = {"job_id": "1842", "signal_delay_s": 20, "config": {"cluster": cluster},
           **({"time_limit": time_limit} if time_limit is not None else {})}
    if position is not None:
        job["pack"] = {"position": position}
    write_json_atomic(run_dir / "job.json", job)
    records = RunRecords(run_dir)
    records.run_info = {"config": {"train": {"steps": 100000}, "cluster": cluster}}
    extra = {"num_attempts": attempts} if attempts is not None else {}
    records.finish("preempted", "SIGUSR2 received: checkpoint saved at step 2380",
                   interrupted=True, last_step=2380, checkpoint_step=2380, **extra)
    return run_dir


#: (cluster config, attempts, packed at) → the reason
LIMIT_CASES = {
    "requeues used up": (
        {"time": "2", "max_requeues": 1}, 2, None,
        "Slurm job 1842 reached its time limit (cluster.time=2: 2 min) after 2 attempts "
        "(cluster.max_requeues=1 used up) at step 2380 of 100000: raise cluster.time or "
        "cluster.max_requeues"),
    "no requeue asked": (
        {"time": "00:30:00", "max_requeues": 0}, 1, None,
        "Slurm job 1842 reached its time limit (cluster.time=00:30:00: 2 min) after 1 attempt "
        "(cluster.max_requeues=0: no requeue) at step 2380 of 100000: raise cluster.time or "
        "cluster.max_requeues"),
    "attempts not recorded": (
        {"time": "2", "max_requeues": 1}, None, None,
        "Slurm job 1842 reached its time limit (cluster.time=2: 2 min) "
        "(cluster.max_requeues=1) at step 2380 of 100000: raise cluster.time or "
        "cluster.max_requeues"),
    "packed": (
        {"time": "2", "max_requeues": 3}, 1, 1,
        "Slurm job 1842, its pack, reached the pack's time limit (2 min) after 1 attempt "
        "(a pack is not requeued) at step 2380 of 100000: the sweep's command runs it again "
        "from its checkpoint; raise cluster.time if it needs longer"),
}


@pytest.mark.parametrize("case", LIMIT_CASES)
def test_a_time_limit_with_no_requeue_left_says_how_far_it_got(tmp_path, case):
    """cluster.time=2 cluster.max_requeues=1: the second attempt saved at the limit's signal
    and Slurm recorded the job's exit FAILED. The reason gives the limit in minutes, the
    attempts against cluster.max_requeues and the step (before: 'timeout: Slurm job 1842
    ended FAILED (time limit 2) and was not requeued ...'); the status stays ``timeout``.
    Slurm's own record of the limit (sacct: 2 min) wins over a cluster.time given in
    another form."""
    cluster, attempts, position, want = LIMIT_CASES[case]
    run_dir = _preempted(tmp_path, cluster, attempts, position)
    row = status.read_state(run_dir)
    job = SlurmJob("FAILED", exit_code="1:0", elapsed_s=100, time_limit_s=120)
    row.job, row.own = job, (job if position is None else SlurmJob("COMPLETED", "x", "vnode1"))
    row.state = "FAILED"
    assert status.reconcile(row)
    summary = read(run_dir / "summary.json")
    assert summary["status"] == "timeout" and summary["interrupted"] is True
    assert summary["reason"] == want
    assert summary.get("num_attempts") == attempts and summary["last_step"] == 2380


@pytest.mark.parametrize("time_limit", ["1:30:00", None], ids=["job.json", "cluster.time"])
def test_time_limit_without_a_slurm_record_of_it_reads_cluster_time(tmp_path, time_limit):
    """Where sacct gave no limit (squeue alone) the job's own limit in minutes comes from
    job.json's time_limit, else from cluster.time."""
    run_dir = _preempted(tmp_path, {"time": "1:30:00", "max_requeues": 1}, 2,
                         time_limit=time_limit)
    row = status.read_state(run_dir)
    row.job = row.own = SlurmJob("TIMEOUT")
    row.state = "TIMEOUT"
    assert status.reconcile(row)
    assert read(run_dir / "summary.json")["reason"].startswith(
        "Slurm job 1842 reached its time limit (cluster.time=1:30:00: 90 min) after 2 "
        "attempts (cluster.max_requeues=1 used up) at step 2380 of 100000")


def test_the_no_summary_timeout_gives_minutes(tmp_path):
    """A job killed at its time limit without a summary: the limit with its unit."""
    run_dir = tmp_path / "0_point"
    run_dir.mkdir()
    write_json_atomic(run_dir / "job.json", {"job_id": "9", "time_limit": "2"})
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "task0.log").write_text("step 40\n")
    row = status.read_state(run_dir)
    row.job = row.own = SlurmJob("TIMEOUT", "vitfsdp", "vnode1", elapsed_s=130)
    row.state = "TIMEOUT"
    assert status.reconcile(row)
    reason = read(run_dir / "summary.json")["reason"]
    assert reason.startswith("Slurm job 9 ended TIMEOUT before the first step without a "
                             "summary (time limit 2 min): step 40"), reason


def test_the_table_takes_a_points_overrides_from_its_records(tmp_path):
    """A long run directory name is shortened with a hash (vitfsdp.rundir.run_dirname):
    the table's overrides column and the next steps' names come from job.json's
    ``overrides`` (else run.json's), whole and without the hash; a directory with neither
    keeps its name's."""
    long_value = "/very/long/path/" + "x" * 150
    points = [["cluster=virtual", "strategy=DDP", f"cluster.setup_script={long_value}"],
              ["cluster=virtual", "strategy=NO_SHARD", f"cluster.setup_script={long_value}"]]
    for num, overrides in enumerate(points):
        run_dir = tmp_path / f"{num}_{run_dirname(overrides, ['cluster'])}"
        assert re.search(r"_[0-9a-f]{8}$", run_dir.name)  # shortened, with a hash
        run_dir.mkdir()
        record = {"job_id": None, "overrides": overrides}
        write_json_atomic(run_dir / ("job.json" if num == 0 else "run.json"), record)
    (tmp_path / "2_strategy=FULL_SHARD").mkdir()
    write_json_atomic(tmp_path / "2_strategy=FULL_SHARD" / "run.json", {"config": {}})
    rows = [status.read_state(d) for d in status.point_dirs(tmp_path)]
    assert status.labels(rows) == [
        ("0", f"cluster.setup_script={long_value} cluster=virtual strategy=DDP"),
        ("1", f"cluster.setup_script={long_value} cluster=virtual strategy=NO_SHARD"),
        ("2", "strategy=FULL_SHARD")]
    assert status.labels(rows[:2]) == [("0", "strategy=DDP"), ("1", "strategy=NO_SHARD")]
    table = status.format_table(rows[:2])
    assert table.splitlines()[1].endswith("strategy=DDP"), table
