"""How a Slurm point's end is recorded: sacct's records parsed, the status Slurm's end settles
(``cancelled`` for scancel, ``timeout`` for a time limit with no requeue left), Slurm's state,
exit code and reason kept in summary.json, and the table's headline ips.

The in-process tests need no cluster; the last one runs a real time limit on the virtual
cluster (skipped unless ``VITFSDP_SLURM=1``).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import read, run_module
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster, slurm
from vitfsdp.launch import status
from vitfsdp.launch.status import SlurmJob
from vitfsdp.records import RunRecords, write_json_atomic

#: sacct -n -P -o JobID,JobName,State,NodeList,Reason,ExitCode,ElapsedRaw,TimelimitRaw, as
#: Slurm 22.05 printed it for a pack (a set-up step, then its points) cancelled during its
#: second point, and an array task.
SACCT = """\
8|pack|CANCELLED by 0|vnode1|None|0:0|7|1
8.batch|batch|CANCELLED|vnode1||0:15|7|
8.extern|extern|COMPLETED|vnode1||0:0|7|
8.0|mkdir|COMPLETED|vnode1||0:0|0|
8.1|vitfsdp-point0|COMPLETED|vnode1||0:0|0|
8.2|vitfsdp-point1|CANCELLED|vnode1||0:15|6|
9_1|vitfsdp|FAILED|vnode[1-2]|NonZeroExitCode|1:0|35|10
10|vitfsdp|PENDING|None assigned|Priority||0|10
"""


def test_sacct_records_parse_with_steps_and_without_batch():
    jobs = status.parse_sacct(SACCT)
    assert set(jobs) == {"8", "8.0", "8.1", "8.2", "9_1", "10"}
    assert jobs["10"].nodelist == ""  # not "None assigned": a job not placed shows "-"
    assert status.parse_squeue("10|PENDING|None assigned|Priority")["10"].nodelist == ""
    assert jobs["8"] == SlurmJob("CANCELLED", "pack", "vnode1", "", "0:0", 7, 60)
    assert jobs["8.2"].state == "CANCELLED" and jobs["8.2"].exit_code == "0:15"
    # a packed point's step is found by its name, whatever steps ran before it
    assert [status.find_step(jobs, "8", k) for k in range(3)] == ["8.1", "8.2", None]
    assert jobs["9_1"].reason == "NonZeroExitCode" and jobs["9_1"].time_limit_s == 600


def _point(tmp_path: Path, summary_status: str | None, position: int | None = None) -> Path:
    """A run directory with job.json (time limit 10 min, signal 20 s before it) and, unless
    None, the summary the training wrote."""
    run_dir = tmp_path / "0_point"
    job = {"job_id": "8", "time_limit": "00:10:00", "signal_delay_s": 20}
    if position is not None:
        job["pack"] = {"position": position}
    run_dir.mkdir()
    write_json_atomic(run_dir / "job.json", job)
    if summary_status:
        records = RunRecords(run_dir)
        records.run_info = {}
        records.finish(summary_status, "SIGTERM received", interrupted=True, last_step=3)
    return run_dir


#: (summary the training wrote, the job as sacct reports it, packed at position) →
#: (status, Slurm state kept in summary.json)
END_CASES = {
    "scancel after the checkpoint": ("preempted", SlurmJob("CANCELLED", exit_code="0:0",
                                                           elapsed_s=30, time_limit_s=600),
                                     None, "cancelled", "CANCELLED"),
    "time limit, no requeue left": ("preempted", SlurmJob("FAILED", exit_code="1:0",
                                                          elapsed_s=560, time_limit_s=600),
                                    None, "timeout", "FAILED"),
    "killed at the limit, no summary": (None, SlurmJob("TIMEOUT", exit_code="0:15",
                                                       elapsed_s=600, time_limit_s=600),
                                        None, "timeout", "TIMEOUT"),
    "stopped early, no requeue": ("preempted", SlurmJob("FAILED", exit_code="1:0",
                                                        elapsed_s=100, time_limit_s=600),
                                  None, "preempted", "FAILED"),
    "a rank killed": ("failed", SlurmJob("FAILED", exit_code="1:0", elapsed_s=50,
                                         time_limit_s=600), None, "failed", "FAILED"),
    "pack cancelled before it": (None, SlurmJob("CANCELLED", exit_code="0:0", elapsed_s=50,
                                                time_limit_s=600), 2, "cancelled", "CANCELLED"),
}


@pytest.mark.parametrize("case", END_CASES)
def test_slurm_end_settles_the_status_and_is_kept(tmp_path, case):
    written, job, position, want_status, want_state = END_CASES[case]
    run_dir = _point(tmp_path, written, position)
    row = status.read_state(run_dir)
    row.job, row.own = job, (job if position is None else None)
    row.state = job.state
    assert status.reconcile(row)
    summary = read(run_dir / "summary.json")
    assert summary["status"] == want_status and row.status == want_status
    assert summary["slurm"]["state"] == want_state
    assert summary["slurm"]["exit_code"] == job.exit_code
    if want_status in ("cancelled", "timeout"):
        assert summary["interrupted"] is True  # a rerun runs it again
    if position is not None:
        assert "before this point started" in summary["reason"]
    assert not status.reconcile(status.read_state(run_dir))  # recorded once


#: The sweep's same-failure stop's reason, as it writes it into packs/stop for its packs.
STOP_WHY = ("3 jobs failed before their first timed window with the same reason "
            "(RuntimeError: Unable to find address for: ib0); fix it and rerun")
#: A pack that ended on the sweep's stop file (exit 4) before its point at position 2, and
#: the same pack cancelled by hand (the breaker line's scancel) while its point 1 ran.
STOPPED_PACK = SlurmJob("FAILED", exit_code="4:0", elapsed_s=50, time_limit_s=600)
CANCELLED_PACK = SlurmJob("CANCELLED", exit_code="0:0", elapsed_s=50, time_limit_s=600)


@pytest.mark.parametrize("pack_job", [STOPPED_PACK, CANCELLED_PACK], ids=["stopped", "scancel"])
def test_a_point_its_pack_did_not_reach_after_the_stop_is_held_back(tmp_path, pack_job):
    """A packed point that never started in a pack the sweep's stop file names is recorded
    as the breaker records the pending jobs it cancels: ``cancelled`` with its reason,
    ``held_back`` (on the ``--rerun-failed`` line with the failed points), whatever the
    pack's end (before: ``preempted``, 'its pack ... ended FAILED before this point
    started', rerun by the plain command as if ended from outside)."""
    from vitfsdp.sweep import report

    run_dir = _point(tmp_path, None, position=2)
    (tmp_path / "packs").mkdir()
    (tmp_path / "packs" / "stop").write_text(f"80 another sweep's pack\n8 {STOP_WHY}\n")
    row = status.read_state(run_dir)
    row.job, row.state = pack_job, pack_job.state  # its step never started: row.own is None
    assert status.reconcile(row)
    summary = read(run_dir / "summary.json")
    assert summary["status"] == "cancelled" and row.status == "cancelled"
    assert summary["reason"] == ("cancelled before it started: its pack, Slurm job 8, ran no "
                                 f"further point: {STOP_WHY}")
    assert summary["held_back"] is True and summary["interrupted"] is True
    assert summary["slurm"]["job_state"] == pack_job.state
    (line, reason) = report.next_steps(tmp_path, [row])
    assert line.startswith("1 cancelled point (0 point): once fixed, run it again with: "
                           "python -m vitfsdp.sweep -m --rerun-failed "), line
    assert reason == f"  0 point cancelled: {summary['reason']}"


@pytest.mark.parametrize("stop", [None, "80 another sweep's pack\n", "8 " + STOP_WHY + "\n"],
                         ids=["no stop file", "another pack's line", "the point started"])
def test_a_point_not_stopped_by_the_sweep_is_recorded_as_before(tmp_path, stop):
    """Without a line for its pack in the stop file, or where the point's tasks wrote a line
    (it started: no step in the records, as without accounting), a packed point with no
    summary in an ended pack takes the pack's end as before: ``preempted`` after a stop
    short of the time limit, not held back."""
    run_dir = _point(tmp_path, None, position=2)
    if stop is not None:
        (tmp_path / "packs").mkdir()
        (tmp_path / "packs" / "stop").write_text(stop)
    started = stop is not None and stop.startswith("8 ")
    if started:
        (run_dir / "logs").mkdir()
        (run_dir / "logs" / "task0.log").write_text("RuntimeError: Unable to find address\n")
    row = status.read_state(run_dir)
    row.job, row.state = STOPPED_PACK, STOPPED_PACK.state
    assert status.reconcile(row)
    summary = read(run_dir / "summary.json")
    assert summary["status"] == "preempted" and "held_back" not in summary
    assert summary["reason"] == "its pack, Slurm job 8, ended FAILED before this point started"


def test_a_preempted_point_waits_while_its_job_is_alive(tmp_path):
    run_dir = _point(tmp_path, "preempted", position=0)
    row = status.read_state(run_dir)
    row.job, row.own = SlurmJob("RUNNING"), SlurmJob("COMPLETED", exit_code="3:0")
    row.state = "COMPLETED"
    assert not status.reconcile(row) and not row.done
    assert "slurm" not in read(run_dir / "summary.json")


def test_table_shows_the_median_of_measured_windows(tmp_path):
    ips = [500.0, 100.0, 120.0, 300.0, 90.0]  # warm-up first, then four measured windows
    windows = [{"step_end": i + 1, "ips": v, "warmup": i == 0} for i, v in enumerate(ips)]
    (tmp_path / "0_point").mkdir()
    (tmp_path / "0_point" / "metrics.jsonl").write_text(
        "".join(json.dumps(w) + "\n" for w in windows))
    row = status.read_state(tmp_path / "0_point")
    assert row.ips == statistics.median(ips[1:])
    assert f"{statistics.median(ips[1:]):.1f}" in status.format_table([row])


needs_cluster = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)


@needs_cluster
def test_time_limit_without_requeue_is_timeout_and_a_rerun_runs_it(tmp_path):
    """cluster.time=1 (minute), SIGUSR2 20 s before it, no requeue: the training saves its
    checkpoint and stops (preempted); Slurm's end makes it timeout, interrupted."""
    require_cluster()
    sweep_dir = tmp_path / "sweep"
    args = ["-m", "cluster=virtual", "model=vit_tiny", "device=cpu", "train.steps=100000",
            "train.log_every=1", "train.local_batch_size=4", "cluster.time=1",
            "cluster.max_requeues=0", "cluster.poll_s=1", f"hydra.sweep.dir={sweep_dir}",
            f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}", "--detach"]
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # queued
    proc = run_module("vitfsdp.sweep", "--status", str(sweep_dir), "--watch", "--poll-s", "1",
                      cwd=tmp_path, timeout=240)
    assert proc.returncode == 1, proc.stderr  # ended without completing
    (point,) = [p for p in sweep_dir.iterdir() if (p / "job.json").exists()]
    summary = read(point / "summary.json")
    assert summary["status"] == "timeout", summary
    assert summary["interrupted"] is True and "time limit" in summary["reason"]
    assert summary["slurm"]["state"] in ("FAILED", "COMPLETED", "TIMEOUT")
    assert summary["slurm"]["exit_code"] is not None  # from sacct
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 3 and "1 to run" in proc.stdout, proc.stdout[-3000:]
    job_id = read(point / "job.json")["job_id"]
    assert job_id != summary["slurm"]["job_id"]  # a new job
    # the same command (--detach) while that job is queued or running: nothing to run, and
    # not 0 (without --detach it waits for the job: tests/integration/test_ctrl_c.py)
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=120)
    slurm("scancel", job_id)
    assert proc.returncode == 3 and f"Slurm job {job_id} is " in proc.stdout, proc.stdout[-3000:]
    assert "not ended: " in proc.stdout and "0 to run" in proc.stdout


@pytest.mark.parametrize("log", [".submitit/8_0_log.out", "0_point/slurm-8.out",
                                 "packs/pack0-8.out"])
def test_a_job_that_ended_before_its_tasks_says_why(tmp_path, log):
    """A job script that failed in its setup (before any task wrote a line): the reason's
    first line is the last non-empty line of the job's own output (submitit's log, the
    script's slurm-<id>.out, or its pack's), whichever launch path ran it."""
    run_dir = _point(tmp_path, None)
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "task0.log").write_text("\n\n")  # made, never written
    path = tmp_path / log
    path.parent.mkdir(exist_ok=True)
    path.write_text("module: loading rocm\nvitfsdp: cluster.venv=/opt/no/such/venv has no "
                    "bin/activate on vnode1\n\n")
    row = status.read_state(run_dir)
    row.job = row.own = SlurmJob("FAILED", exit_code="1:0", elapsed_s=0, time_limit_s=600)
    row.state = "FAILED"
    assert status.reconcile(row)
    first, *rest = read(run_dir / "summary.json")["reason"].splitlines()
    assert first == ("Slurm job 8 ended FAILED before the first step without a summary: "
                     "vitfsdp: cluster.venv=/opt/no/such/venv has no bin/activate on vnode1")
    assert rest[-2:] == ["module: loading rocm", first.split(": ", 1)[1]]


#: squeue -h -r -t all -o %i|%T|%N|%r as Slurm prints it for jobs waiting for different
#: reasons (a per-user QOS limit, the queue's order, nodes in a maintenance, a dependency
#: that failed, a pack), and sacct's lagging record of one of them (its reason None).
SQUEUE_PENDING = """\
21|PENDING||QOSMaxJobsPerUserLimit
22|PENDING||QOSMaxJobsPerUserLimit
23|PENDING||Priority
24_1|PENDING||ReqNodeNotAvail, UnavailableNodes:nid[001234-001300]
25|PENDING||DependencyNeverSatisfied
26|PENDING||QOSGrpNodeLimit
27|RUNNING|vnode1|None
"""
SACCT_PENDING = "21|vitfsdp|PENDING|None assigned|None||0|10\n"


def test_pending_jobs_show_slurms_reason_and_what_to_do(tmp_path, monkeypatch):
    """The state column says why a job waits (squeue's reason: current, where sacct's lags),
    a packed point its pack's; below the table, one line per reason a user acts on, with
    the jobs' ids in the command; the queue's own order (Priority) gets none. One squeue
    call for every job."""
    jobs = {"0_a": "21", "1_b": "22", "2_c": "23", "3_d": "24_1", "4_e": "25", "5_f": "26",
            "6_g": "26", "7_h": "27"}
    for name, job_id in jobs.items():
        (tmp_path / name).mkdir()
        job = {"job_id": job_id, **({"pack": {"position": int(name[0]) - 5}}
                                    if job_id == "26" else {})}
        write_json_atomic(tmp_path / name / "job.json", job)
    calls = []

    def query(argv):
        calls.append(argv[0])
        return {"squeue": SQUEUE_PENDING, "sacct": SACCT_PENDING}[argv[0]]

    monkeypatch.setattr(status, "_run_query", query)
    rows = status.collect(tmp_path)
    assert sorted(calls) == ["sacct", "squeue"]
    lines = status.format_table(rows).splitlines()
    states = {line.split()[0]: line.split("  ")[2:4] for line in lines[1:9]}
    assert "PENDING (QOSMaxJobsPerUserLimit)" in lines[1] and lines[1].startswith("0 ")
    assert "PENDING (Priority)" in lines[3]
    assert "PENDING (ReqNodeNotAvail, UnavailableNodes:nid[001234-001300])" in lines[4]
    assert "PENDING (QOSGrpNodeLimit)" in lines[6] and "PENDING (QOSGrpNodeLimit)" in lines[7]
    assert "RUNNING " in lines[8] and "(None)" not in lines[8], states
    assert lines[9] == "8 points: 7 PENDING, 1 RUNNING"
    advice = lines[10:]
    assert len(advice) == 4, advice
    assert advice[0].startswith("2 jobs pending (QOSMaxJobsPerUserLimit): a QOS or "
                                "association limit") and "wait" in advice[0]
    assert "scancel 21 22 and set cluster.max_jobs to the limit" in advice[0]
    assert advice[1].startswith("1 job pending (ReqNodeNotAvail): nodes it needs are down")
    assert advice[1].endswith("cancel with: scancel 24_1")
    assert advice[2].startswith("1 job pending (DependencyNeverSatisfied): ") and (
        "never starts: cancel with: scancel 25, then run the sweep's command again" in advice[2])
    assert advice[3].startswith("1 job pending (QOSGrpNodeLimit): ")  # a pack: one job
    assert "scancel 26 " in advice[3]
    assert status.pending_advice("Resources") is None
    assert "scontrol release 7" in status.pending_lines(
        [status.PointState(tmp_path, job_id="7", state="PENDING",
                           pending_reason="JobHeldUser")])[0]


def test_a_job_cancelled_while_pending_has_a_one_line_reason(tmp_path):
    """scancel of a job that never started: the reason is one line that says so, with the
    reason it waited for; Slurm's record stays whole in the summary's slurm object. A job
    cancelled while it ran keeps the log tail below its first line."""
    run_dir = _point(tmp_path, None)
    row = status.read_state(run_dir)
    row.job = row.own = SlurmJob("CANCELLED", "vitfsdp", "", "JobHeldUser", "0:0", 0, 600)
    row.state = "CANCELLED"
    assert status.reconcile(row)
    summary = read(run_dir / "summary.json")
    assert summary["reason"] == ("Slurm job 8 was cancelled before it started (scancel; it "
                                 "was pending: JobHeldUser)")
    assert summary["status"] == "cancelled" and summary["interrupted"] is True
    assert summary["slurm"] == {"job_id": "8", "state": "CANCELLED", "exit_code": "0:0",
                                "reason": "JobHeldUser", "elapsed_s": 0}
    (tmp_path / "ran").mkdir()
    ran = _point(tmp_path / "ran", None)
    (ran / "logs").mkdir()
    (ran / "logs" / "task0.log").write_text("step 1\n")
    row = status.read_state(ran)
    row.job = row.own = SlurmJob("CANCELLED", "vitfsdp", "vnode1", "", "0:15", 30, 600)
    row.state = "CANCELLED"
    assert status.reconcile(row)
    first, *rest = read(ran / "summary.json")["reason"].splitlines()
    assert first.startswith("Slurm job 8 ended CANCELLED before the first step") and rest


@needs_cluster
def test_status_says_why_real_jobs_wait(tmp_path, monkeypatch, capsys):
    """On the virtual cluster: a held job, a job whose dependency was cancelled
    (DependencyNeverSatisfied) and that dependency, cancelled while pending; --status shows
    each reason in its row with one squeue call, a line each for the two that wait with the
    command that acts, the cancelled one's one-line reason, and the point of the sweep's
    last command with no job as not submitted, with why."""
    from tests.unit.test_sweep_status import HASHES, TASK
    from vitfsdp.sweep import main_cli

    require_cluster()
    name = f"vitfsdp-test-{uuid.uuid4().hex[:8]}"

    def sbatch(*args: str) -> str:
        proc = slurm("sbatch", "--parsable", f"--job-name={name}", "-o", "/dev/null", *args,
                     "--wrap", "true")
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().split(";")[0]

    held = sbatch("--hold")
    first = sbatch("--hold")
    orphan = sbatch(f"--dependency=afterok:{first}")
    try:
        slurm("scancel", first)
        sweep_dir = tmp_path / "sweep"
        sweep_dir.mkdir()
        (sweep_dir / "commands.jsonl").write_text(json.dumps(
            {"started_at": "2026-01-01T00:00:00+00:00", "task": TASK,
             "hydra": [f"hydra.sweep.dir={sweep_dir}"],
             "config_hashes": [*HASHES, "dddd000000000000"]}) + "\n")
        names = ["0_strategy=DDP", "1_strategy=FULL_SHARD", "2_strategy=HYBRID_2GPU"]
        for run, job_id, h in zip(names, [first, orphan, held], HASHES, strict=True):
            (sweep_dir / run).mkdir()
            write_json_atomic(sweep_dir / run / "job.json",
                              {"job_id": job_id, "config_hash": h, "time_limit": "00:10:00"})
        conf = os.environ.get("SLURM_CONF") or "/tmp/vitfsdp-slurm/etc/slurm.conf"
        monkeypatch.setenv("SLURM_CONF", conf)
        calls = []
        real = status._run_query
        monkeypatch.setattr(status, "_run_query", lambda argv: calls.append(argv[0])
                            or real(argv))
        deadline = time.monotonic() + 30
        while "DependencyNeverSatisfied" not in slurm("squeue", "-h", "-j", orphan, "-o",
                                                      "%r").stdout:
            assert time.monotonic() < deadline, "the dependency was never marked unmet"
            time.sleep(0.5)
        code = main_cli(["--status", str(sweep_dir)])
    finally:
        slurm("scancel", held, orphan)
    out = capsys.readouterr().out
    print(out)
    assert code == 1, out  # the cancelled point ended without completing
    assert calls.count("squeue") == 1, calls
    lines = out.splitlines()
    words = [" ".join(line.split()) for line in lines]
    assert words[1].startswith(f"0 {first} CANCELLED - - - cancelled "), out
    assert words[2].startswith(f"1 {orphan} PENDING (DependencyNeverSatisfied) - "), out
    assert words[3].startswith(f"2 {held} PENDING (JobHeldUser) - "), out
    assert "- not submitted (the sweep stopped before it; rerun the command to submit it) "\
        in words[4], out
    assert lines[5] == "4 points: 2 PENDING, 1 cancelled, 1 not submitted", out
    assert lines[6].startswith("1 job pending (DependencyNeverSatisfied): ") and \
        lines[6].endswith(f"cancel with: scancel {orphan}, then run the sweep's command again")
    assert lines[7] == (f"1 job pending (JobHeldUser): held: release with: scontrol release "
                        f"{held}; or cancel with: scancel {held}"), out
    reason = read(sweep_dir / names[0] / "summary.json")["reason"]
    assert reason.startswith(f"Slurm job {first} was cancelled before it started (scancel"), \
        reason
    assert "\n" not in reason


@needs_cluster
def test_rerun_failed_skips_a_failed_point_whose_job_still_runs(tmp_path):
    """A point recorded ``failed`` (a rank's failure, written by rank 0) while its Slurm job
    is still RUNNING (the other ranks, the epilog: R or CG; or a requeued job): --rerun-failed
    must not run it again into the directory that job still writes into. Before: "1 to run",
    its files moved to attempts/0 and a new script written. Now one line names the job, how
    to follow it and the scancel that ends it; nothing of the point's is touched."""
    from vitfsdp.records import mark_failed

    require_cluster()
    sweep_dir = tmp_path / "sweep"
    args = ["-m", "cluster=virtual", "model=vit_tiny", "device=cpu", "train.steps=4",
            "train.warmup_steps=1", f"hydra.sweep.dir={sweep_dir}", "--scripts-only"]
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode in (0, 3), proc.stdout[-2000:] + proc.stderr[-2000:]
    (point,) = [d for d in sweep_dir.iterdir() if (d / "job.json").exists()]
    live = slurm("sbatch", "--parsable", f"--job-name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
                 "-o", "/dev/null", "--wrap", "sleep 120")
    assert live.returncode == 0, live.stderr
    job_id = live.stdout.strip().split(";")[0]
    try:
        write_json_atomic(point / "job.json", {**read(point / "job.json"), "job_id": job_id})
        mark_failed(point, "failed", "rank 1 was killed (SIGKILL) at step 3")
        proc = run_module("vitfsdp.sweep", *args, "--rerun-failed", cwd=tmp_path, timeout=120)
        state = slurm("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip()
    finally:
        slurm("scancel", job_id)
    out = proc.stdout + proc.stderr
    print(out)
    assert state in ("PENDING", "RUNNING"), state  # alive while the sweep looked
    assert "0 to run" in out and not (point / "attempts").exists(), out
    line = next(x for x in out.splitlines() if "skip" in x and job_id in x)
    said = f"recorded failed in {point.name}, but its Slurm job {job_id} is still "
    assert f"{said}RUNNING:" in line or f"{said}PENDING:" in line, line  # it may start meanwhile
    assert line.endswith(f"cancel it with: scancel {job_id}; then run this command again"), line
    assert "python -m vitfsdp.sweep --status" in line
    assert read(point / "summary.json")["status"] == "failed"


def test_squeue_that_cannot_answer_is_said_not_guessed(tmp_path, monkeypatch):
    """Where squeue cannot answer (here: no Slurm configuration), whether an earlier attempt's
    job still runs is unknown: None, and the point is not run again, saying so."""
    from vitfsdp.launch.resume import Existing
    from vitfsdp.sweep.choose import _job_alive

    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-such-slurm.conf"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue at all
    assert status.alive_in_queue(["12"]) is None and status.alive_in_queue([]) == {}
    why, summary = _job_alive([Existing(tmp_path / "0_a", "failed", False, "12")], None,
                              tmp_path)
    assert why.startswith("recorded failed in 0_a, and squeue cannot say whether its Slurm "
                          "job 12 still runs: not run again"), why
    assert summary["status"] == "failed"


def test_a_failed_packed_point_whose_pack_runs_on_is_not_told_to_scancel_it(tmp_path):
    """A packed point (hydra.launcher.pack) recorded failed while its pack job still runs
    the pack's other points: the line said "cancel it with: scancel N", which would end
    those points too. Now it names the pack job and says so; a point's own job keeps its
    scancel."""
    from vitfsdp.launch.resume import Existing
    from vitfsdp.sweep.choose import _job_alive

    alive = {"12": "RUNNING"}
    why, summary = _job_alive([Existing(tmp_path / "0_a", "failed", False, "12", packed=True)],
                              alive, tmp_path)
    assert "but its pack job 12 is still RUNNING: wait for it to end" in why, why
    assert why.endswith("(scancel 12 would end the pack's other points too); then run this "
                        "command again"), why
    assert "cancel it with" not in why and summary["status"] == "submitted"
    why, _ = _job_alive([Existing(tmp_path / "0_a", "failed", False, "12")], alive, tmp_path)
    assert why.endswith("or cancel it with: scancel 12; then run this command again"), why


@needs_cluster
def test_the_interrupted_line_names_a_job_that_runs_past_its_failed_record(tmp_path,
                                                                          monkeypatch):
    """Ctrl-C of a Slurm sweep whose one point is recorded ``failed`` while its job still
    runs (R, CG): before, "no Slurm job of the sweep is queued or running"; now the job is
    named with its scancel. Where squeue cannot answer, the line says so, not "no job"."""
    from types import SimpleNamespace

    from vitfsdp.records import mark_failed
    from vitfsdp.sweep.run import _interrupted_line

    require_cluster()
    live = slurm("sbatch", "--parsable", f"--job-name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
                 "-o", "/dev/null", "--wrap", "sleep 120")
    assert live.returncode == 0, live.stderr
    job_id = live.stdout.strip().split(";")[0]
    run_dir = tmp_path / "0_strategy=DDP"
    run_dir.mkdir()
    write_json_atomic(run_dir / "job.json", {"job_id": job_id, "config_hash": "aaaa"})
    mark_failed(run_dir, "failed", "rank 1 was killed (SIGKILL) at step 3")
    point = SimpleNamespace(run_dir=run_dir, cfg=SimpleNamespace(
        cluster=SimpleNamespace(launcher="slurm")))
    monkeypatch.setenv("SLURM_CONF", os.environ.get("SLURM_CONF")
                       or "/tmp/vitfsdp-slurm/etc/slurm.conf")
    path = os.environ["PATH"]
    try:
        line = _interrupted_line([point], tmp_path)
        os.environ["PATH"] = str(tmp_path)  # squeue cannot answer
        unknown = _interrupted_line([point], tmp_path)
    finally:
        os.environ["PATH"] = path
        slurm("scancel", job_id)
    assert "no Slurm job" not in line and "no Slurm job" not in unknown, (line, unknown)
    assert line.startswith("interrupted: 1 Slurm job(s) keep running"), line
    assert f"cancel them with: scancel {job_id};" in line, line
    assert unknown.startswith("interrupted: squeue cannot say whether 1 more Slurm job(s) "
                              f"run (their points recorded an end): check with: squeue -j "
                              f"{job_id}; go on with: "), unknown
