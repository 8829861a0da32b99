"""``python -m vitfsdp.sweep --status DIR``: the points of the sweep's last command with no
job yet, what goes on for the points that did not complete, a quiet Ctrl-C of ``--watch``,
and its flags in any order. Records written by hand, as the sweep writes them; points run
here (no Slurm job id), so no Slurm query is made."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vitfsdp.sweep import EXIT_INTERRUPTED, EXIT_NOT_COMPLETED, EXIT_NOT_ENDED, main_cli
from vitfsdp.sweep.report import NOT_SUBMITTED

TASK = ["model=vit_tiny", "strategy=DDP,FULL_SHARD,HYBRID_2GPU", "cluster.max_jobs=1"]
HASHES = ["aaaa000000000000", "bbbb000000000000", "cccc000000000000"]
NAMES = ["0_strategy=DDP", "1_strategy=FULL_SHARD", "2_strategy=HYBRID_2GPU"]


def _sweep(tmp_path: Path, summaries: dict[int, dict | None], task=TASK) -> Path:
    """A sweep directory of ``task`` whose points ``summaries`` names have a run
    directory (``None``: no summary yet: running), the others none (never submitted)."""
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "multirun.yaml").write_text(json.dumps(
        {"hydra": {"overrides": {"task": task, "hydra": [f"hydra.sweep.dir={sweep_dir}"]}}}))
    (sweep_dir / "commands.jsonl").write_text(json.dumps(
        {"started_at": "2026-01-01T00:00:00+00:00", "task": task,
         "hydra": [f"hydra.sweep.dir={sweep_dir}"], "config_hashes": HASHES}) + "\n")
    for num, summary in summaries.items():
        run_dir = sweep_dir / NAMES[num]
        run_dir.mkdir()
        (run_dir / "job.json").write_text(json.dumps(
            {"launcher": "local", "job_id": None, "config_hash": HASHES[num]}))
        if summary is not None:
            (run_dir / "summary.json").write_text(json.dumps(summary))
    return sweep_dir


def _resume(sweep_dir: Path, *flags: str) -> str:
    return shlex.join(["python", "-m", "vitfsdp.sweep", "-m", *flags, *TASK,
                       f"hydra.sweep.dir={sweep_dir}"])


def test_points_never_submitted_are_listed_counted_and_exit_3(tmp_path, capsys):
    """cluster.max_jobs=1 --detach submitted one point: the other two are in the table as
    not submitted, counted, with the command that submits them; exit 3, not 0."""
    sweep_dir = _sweep(tmp_path, {0: {"status": "completed"}})
    assert main_cli(["--status", str(sweep_dir)]) == EXIT_NOT_ENDED
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:4]}
    assert "completed" in rows["0"]
    for num, name in (("1", "strategy=FULL_SHARD"), ("2", "strategy=HYBRID_2GPU")):
        assert "not submitted" in rows[num] and rows[num].endswith(name), out
        # the sweep recorded nothing that says why: no reason is made up
        assert (" not submitted (the sweep stopped before it; rerun the command to submit "
                "it)  ") in rows[num], out
    assert "3 points: 1 completed, 2 not submitted" in out
    assert (f"2 not submitted points (1 strategy=FULL_SHARD, 2 strategy=HYBRID_2GPU) (no job "
            "yet: waiting for cluster.max_jobs, or the sweep stopped before submitting them): "
            f"once jobs have ended, submit them with: {_resume(sweep_dir)}") in out


def test_a_sweep_working_in_the_directory_submits_them_itself(tmp_path, capsys):
    from vitfsdp.launch.resume import SweepLock

    sweep_dir = _sweep(tmp_path, {0: {"status": "completed"}})
    lock = SweepLock(sweep_dir).acquire()
    try:
        assert main_cli(["--status", str(sweep_dir)]) == EXIT_NOT_ENDED
    finally:
        lock.release()
    out = capsys.readouterr().out
    assert "the sweep working in" in out and "submit them with" not in out


def test_every_point_submitted_says_nothing_more(tmp_path, capsys):
    sweep_dir = _sweep(tmp_path, {n: {"status": "completed"} for n in range(3)})
    assert main_cli(["--status", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "3 points: 3 completed" and "not submitted" not in out


def test_points_that_did_not_complete_get_their_command_and_reason(tmp_path, capsys):
    """cancelled (and any end from outside) → the plain command; failed/oom → once fixed,
    --rerun-failed, and each one's reason on one line."""
    sweep_dir = _sweep(tmp_path, {
        0: {"status": "cancelled", "interrupted": True, "reason": "scancel\nmore"},
        1: {"status": "failed", "reason": "RuntimeError: boom\nTraceback tail"},
        2: {"status": "oom", "reason": "CUDA out of memory"}})
    assert main_cli(["--status", str(sweep_dir)]) == EXIT_NOT_COMPLETED
    lines = capsys.readouterr().out.splitlines()
    after = lines[lines.index("3 points: 1 cancelled, 1 failed, 1 oom") + 1:]
    assert after == [
        "1 cancelled point (0 strategy=DDP) (interrupted from outside): the same command "
        f"runs it again: {_resume(sweep_dir)}",
        "2 failed/oom points (1 strategy=FULL_SHARD, 2 strategy=HYBRID_2GPU): once fixed, "
        f"run them again with: {_resume(sweep_dir, '--rerun-failed')}",
        "  1 strategy=FULL_SHARD failed: RuntimeError: boom",
        "  2 strategy=HYBRID_2GPU oom: CUDA out of memory",
    ]


@pytest.mark.parametrize("argv", [
    ["--watch", "--status", "{d}"], ["--poll-s", "2", "--status", "{d}"], ["--status={d}"],
    ["--status", "{d}", "--watch", "--poll-s", "0.1"], ["--watch", "--status={d}"]])
def test_status_flags_in_any_order(tmp_path, capsys, argv):
    sweep_dir = _sweep(tmp_path, {n: {"status": "completed"} for n in range(3)})
    assert main_cli([a.format(d=sweep_dir) for a in argv]) == 0
    assert "3 points: 3 completed" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--status"], ["--status", "{d}", "extra"],
                                  ["--watch", "{d}"], ["--poll-s", "2"]])
def test_a_wrong_status_line_is_refused_in_one_line_with_the_form(tmp_path, capsys, argv):
    sweep_dir = _sweep(tmp_path, {0: {"status": "completed"}})
    with pytest.raises(SystemExit) as e:
        code = main_cli([a.format(d=sweep_dir) for a in argv])
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and err.rstrip().endswith(
        "the form is: python -m vitfsdp.sweep --status SWEEP_DIR [--watch] [--poll-s S]"), err


def test_ctrl_c_of_watch_is_one_line_and_130(tmp_path):
    """A point still running: --watch polls on; SIGINT ends it with one line (no
    traceback) saying the jobs keep running and how to follow them again."""
    sweep_dir = _sweep(tmp_path, {0: None, 1: {"status": "completed"}, 2: {"status":
                                                                          "completed"}})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "vitfsdp.sweep", "--status", str(sweep_dir),
                             "--watch", "--poll-s", "0.2"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # the table's header: it watches
        assert first.startswith("point"), first + proc.stderr.read()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    follow = shlex.join(["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir),
                         "--watch"])
    assert err == ("interrupted: only the watch stopped; the sweep's jobs keep running; follow "
                   f"them again with: {follow}\n")


def _why_rows(sweep_dir: Path, capsys) -> list[str]:
    """The status column of --status's not submitted rows."""
    main_cli(["--status", str(sweep_dir)])
    out = capsys.readouterr().out
    return [line.split("not submitted ", 1)[1].rsplit("  ", 1)[0].strip()
            for line in out.splitlines()[1:] if " not submitted (" in line]


def test_not_submitted_rows_say_why_the_sweep_recorded(tmp_path, capsys):
    """What the sweep recorded (status.record_not_submitted) is the rows' why: a limit
    the sweep waits on while it runs, the same once its process is gone, a refusal; a
    record of an earlier command of the directory is not taken for this one's."""
    from vitfsdp.launch import status

    sweep_dir = _sweep(tmp_path, {0: {"status": "completed"}})
    status.record_not_submitted(sweep_dir, "cluster.max_jobs=1 reached", waiting=True)
    assert _why_rows(sweep_dir, capsys) == [
        "(cluster.max_jobs=1 reached; the sweep submits it as jobs end)"] * 2
    record = json.loads((sweep_dir / status.NOT_SUBMITTED_FILE).read_text())
    gone = subprocess.Popen(["true"])
    gone.wait()
    (sweep_dir / status.NOT_SUBMITTED_FILE).write_text(json.dumps({**record, "pid": gone.pid}))
    assert _why_rows(sweep_dir, capsys) == [
        "(cluster.max_jobs=1 reached, then the sweep stopped; rerun the command to submit "
        "it)"] * 2
    status.record_not_submitted(sweep_dir, "sbatch refused it (sbatch: error: "
                                "QOSMaxSubmitJobPerUserLimit)")
    assert _why_rows(sweep_dir, capsys) == [
        "(sbatch refused it (sbatch: error: QOSMaxSubmitJobPerUserLimit); rerun the command "
        "to submit it)"] * 2
    with open(sweep_dir / "commands.jsonl", "a") as f:  # the same command, run again since
        f.write(json.dumps({"started_at": "2026-01-02T00:00:00+00:00", "task": TASK,
                            "config_hashes": HASHES}) + "\n")
    assert _why_rows(sweep_dir, capsys) == [
        "(the sweep stopped before it; rerun the command to submit it)"] * 2


def test_the_slurm_sweep_records_why_it_did_not_submit(tmp_path, monkeypatch):
    """launch_slurm records why points have no job: cluster.max_jobs while it watches (it
    submits them itself), with --detach, a Ctrl-C during the watch, sbatch's refusal."""
    from types import SimpleNamespace

    from vitfsdp.launch import LaunchOptions, pack, status
    from vitfsdp.sweep import Point, slurm_jobs

    sweep_dir = _sweep(tmp_path, {})
    cfg = SimpleNamespace(cluster=SimpleNamespace(qos=None, max_jobs=1, poll_s=0.01))
    points = [Point(n, [], cfg, sweep_dir / NAMES[n], HASHES[n]) for n in range(3)]

    def unit(p: Point) -> pack.Unit:
        def submit() -> list[str]:
            p.run_dir.mkdir(exist_ok=True)
            (p.run_dir / "job.json").write_text(json.dumps({"config_hash": p.config_hash}))
            return [f"9{p.num}"]
        return pack.Unit(1, submit)

    monkeypatch.setattr(slurm_jobs, "_submission_units", lambda pts, *a: [unit(p) for p in pts])
    slurm_jobs.launch_slurm(points, sweep_dir, LaunchOptions(detach=True))
    assert status.not_submitted_why(sweep_dir) == (
        "cluster.max_jobs=1 reached and the sweep was detached; rerun the command to submit "
        "it")
    seen = []
    monkeypatch.setattr(status, "watch", lambda *a, **k: seen.append(
        status.not_submitted_why(sweep_dir)))
    slurm_jobs.launch_slurm(points[1:], sweep_dir, LaunchOptions(), queued=1)
    assert seen == ["cluster.max_jobs=1 reached; the sweep submits it as jobs end"]

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(status, "watch", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        slurm_jobs.launch_slurm(points[1:], sweep_dir, LaunchOptions(), queued=1)
    assert status.not_submitted_why(sweep_dir) == (
        "the sweep was interrupted before it; rerun the command to submit it")
    slurm_jobs._Submitter([unit(points[2])], 1, sweep_dir).hold(
        pack.SubmitRefused("sbatch: error: QOSMaxSubmitJobPerUserLimit", 1))
    assert status.not_submitted_why(sweep_dir) == (  # the fix first, then the rerun
        "sbatch refused it (sbatch: error: QOSMaxSubmitJobPerUserLimit); wait for your other "
        "jobs in the queue to end (squeue --me), or choose another cluster.qos, then run the "
        "sweep again")


def test_counts_of_one_are_singular(tmp_path):
    from vitfsdp.launch import status

    row = status.PointState(tmp_path / "0_a", status="completed")
    assert status.summary_line([row]) == "1 point: 1 completed"
    assert status.summary_line([row, row]) == "2 points: 2 completed"
    held = status.PointState(tmp_path / "0_a", job_id="5", state="PENDING",
                             pending_reason="JobHeldUser")
    assert status.pending_lines([held])[0].startswith("1 job pending (JobHeldUser): ")
    assert status.NOT_SUBMITTED == NOT_SUBMITTED


#: The reviewer's broken environment: every point fails at start-up.
BROKEN = [*TASK, "+cluster.env.GLOO_SOCKET_IFNAME=ib0", "cluster.venv=/opt/old"]
#: The fix: the same command with another environment (the override dropped, another
#: venv, a module): new points (the environment is hashed), run with --rerun-failed.
FIXED = [*TASK, "cluster.venv=/opt/new", "cluster.modules=[cuda/12.4]"]
FIXED_HASHES = ["aaaa111111111111", "bbbb111111111111", "cccc111111111111"]
RUN_AGAIN = ["hydra.launcher.rerun_failed=true"]


def _then(sweep_dir: Path, summaries: dict[int, dict], task=FIXED, hashes=FIXED_HASHES,
          names=None) -> None:
    """Run ``task`` (with --rerun-failed) into ``sweep_dir`` as the sweep records it: its
    multirun.yaml, a commands.jsonl record, and a run directory of each of ``summaries``'s
    points (``names``: by default named as a point whose earlier name is taken)."""
    hydra = [f"hydra.sweep.dir={sweep_dir}", *RUN_AGAIN]
    (sweep_dir / "multirun.yaml").write_text(json.dumps(
        {"hydra": {"overrides": {"task": task, "hydra": hydra}}}))
    with open(sweep_dir / "commands.jsonl", "a") as f:
        f.write(json.dumps({"started_at": "2026-01-02T00:00:00+00:00", "task": task,
                            "hydra": hydra, "config_hashes": hashes}) + "\n")
    for num, summary in summaries.items():
        names = names or [f"{n}_{h[:8]}" for n, h in zip(NAMES, hashes, strict=True)]
        run_dir = sweep_dir / names[num]
        run_dir.mkdir()
        (run_dir / "job.json").write_text(json.dumps(
            {"launcher": "local", "job_id": None, "config_hash": hashes[num]}))
        (run_dir / "summary.json").write_text(json.dumps(summary))


BROKEN_END = {"status": "failed", "reason": "RuntimeError: Unable to find address for: ib0"}


def test_points_run_again_in_another_environment_are_superseded(tmp_path, capsys):
    """Every point failed of a broken environment; the fix (the command with another
    environment, whose points are new) completed them: --status shows the old rows as
    superseded, counts them on a line of their own, suggests no rerun (it would run
    nothing), and exits 0."""
    sweep_dir = _sweep(tmp_path, {n: BROKEN_END for n in range(3)}, task=BROKEN)
    _then(sweep_dir, {n: {"status": "completed"} for n in range(3)})
    assert main_cli(["--status", str(sweep_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = lines[1:7]
    assert sum(line.split()[6:8] == ["failed", "(superseded)"] for line in rows) == 3, lines
    assert sum(line.split()[6] == "completed" and "superseded" not in line
               for line in rows) == 3, lines
    assert lines[7:] == ["3 points: 3 completed",
                         "3 earlier points superseded by the last command (the same points "
                         "with other environment settings): 3 failed"]


def test_the_last_commands_failures_alone_are_judged_and_rerun(tmp_path, capsys):
    """One point of the fix failed too: exit 1, and the rerun line names that point alone
    (not the superseded ones), with the fixed command and --rerun-failed once."""
    sweep_dir = _sweep(tmp_path, {n: BROKEN_END for n in range(3)}, task=BROKEN)
    _then(sweep_dir, {0: {"status": "completed"}, 1: {"status": "completed"},
                      2: {"status": "oom", "reason": "CUDA out of memory"}})
    assert main_cli(["--status", str(sweep_dir)]) == EXIT_NOT_COMPLETED
    lines = capsys.readouterr().out.splitlines()
    after = lines[lines.index("3 points: 2 completed, 1 oom") + 1:]
    rerun = shlex.join(["python", "-m", "vitfsdp.sweep", "-m", "--rerun-failed", *FIXED,
                        f"hydra.sweep.dir={sweep_dir}"])
    assert after == [
        "3 earlier points superseded by the last command (the same points with other "
        "environment settings): 3 failed",
        "1 oom point (2 strategy=HYBRID_2GPU_cccc1111): once fixed, run it again with: "
        f"{rerun}",
        "  2 strategy=HYBRID_2GPU_cccc1111 oom: CUDA out of memory"]


def test_points_of_another_command_still_count(tmp_path, capsys):
    """A directory that gathers the points of several commands: an earlier command's points
    that the last one does not run again (another train.steps is another measurement, a
    point of its own) are not superseded; their failures count."""
    sweep_dir = _sweep(tmp_path, {0: {"status": "completed"}, 1: BROKEN_END, 2: BROKEN_END})
    _then(sweep_dir, {0: {"status": "completed"}},
          task=["model=vit_tiny", "strategy=DDP", "cluster.max_jobs=1", "train.steps=7"],
          hashes=["dddd000000000000"], names=["3_train.steps=7"])
    assert main_cli(["--status", str(sweep_dir)]) == EXIT_NOT_COMPLETED
    out = capsys.readouterr().out
    assert "4 points: 2 completed, 2 failed" in out and "superseded" not in out


def test_without_a_record_of_commands_every_point_is_judged(tmp_path, capsys):
    """An older sweep directory (no commands.jsonl): every point counts, as before."""
    sweep_dir = _sweep(tmp_path, {n: BROKEN_END for n in range(3)}, task=BROKEN)
    _then(sweep_dir, {n: {"status": "completed"} for n in range(3)})
    (sweep_dir / "commands.jsonl").unlink()
    assert main_cli(["--status", str(sweep_dir)]) == EXIT_NOT_COMPLETED
    out = capsys.readouterr().out
    assert "6 points: 3 completed, 3 failed" in out and "superseded" not in out
    assert "3 failed points (0 strategy=DDP, " in out and "--rerun-failed" in out


def test_the_sweeps_end_says_the_command_that_goes_on(tmp_path, caplog):
    """The sweep's last lines: the counts, each failed point's reason and records, then the
    lines --status gives (the reasons not again), then the analysis command; each command
    shell-quoted (a directory with a space and $(...) comes back whole)."""
    import logging

    from vitfsdp.sweep import Point, log, report

    (tmp_path / "a dir $(x)").mkdir()
    sweep_dir = _sweep(tmp_path / "a dir $(x)", {})
    points = [Point(n, [f"strategy={s}"], None, sweep_dir / NAMES[n], HASHES[n],
                    [f"strategy={s}"])
              for n, s in enumerate(("DDP", "FULL_SHARD", "HYBRID_2GPU"))]
    summaries = [{"status": "cancelled", "interrupted": True, "reason": "scancel"},
                 {"status": "failed", "reason": "RuntimeError: boom\nmore"},
                 {"status": "completed"}]
    with caplog.at_level(logging.INFO, logger=log.name):
        report._report(points, summaries, sweep_dir)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "sweep done: 1 cancelled, 1 completed, 1 failed"
    assert lines[1].startswith("  cancelled strategy=DDP: scancel (records and logs: ")
    assert lines[2].startswith("  failed strategy=FULL_SHARD: RuntimeError: boom (records ")
    again = report.resume_command(sweep_dir)
    rerun = report.resume_command(sweep_dir, "--rerun-failed")
    assert lines[3:] == [
        "1 cancelled point (strategy=DDP) (interrupted from outside): the same command runs "
        f"it again: {again}",
        f"1 failed point (strategy=FULL_SHARD): once fixed, run it again with: {rerun}",
        f"figures and tables: {report.analysis_command(sweep_dir)}"]
    assert shlex.split(rerun)[:5] == ["python", "-m", "vitfsdp.sweep", "-m", "--rerun-failed"]
    assert shlex.split(rerun)[-1] == f'hydra.sweep.dir="{sweep_dir}"'  # Hydra's quotes


def test_the_rerun_command_gives_rerun_failed_once(tmp_path):
    """The last command ran with --rerun-failed: its hydra.launcher.rerun_failed=true is
    not repeated beside the flag."""
    from vitfsdp.sweep import report

    sweep_dir = _sweep(tmp_path, {})
    _then(sweep_dir, {})
    assert report.resume_command(sweep_dir, "--rerun-failed") == shlex.join(
        ["python", "-m", "vitfsdp.sweep", "-m", "--rerun-failed", *FIXED,
         f"hydra.sweep.dir={sweep_dir}"])


def test_counts_in_the_next_steps_are_singular_for_one(tmp_path):
    from vitfsdp.sweep import report

    assert report._kinds([("0 a", "cancelled", None)]) == "1 cancelled point (0 a)"
    assert report._kinds([("0 a", "failed", None), ("1 b", "oom", None)]) == (
        "2 failed/oom points (0 a, 1 b)")


def test_points_the_breaker_cancelled_are_rerun_once_fixed(tmp_path):
    """Points cancelled while pending by the same-failure stop (``held_back``) share the
    failed points' fix: they are named on the ``once fixed, ... --rerun-failed`` line, not
    told that the same command simply runs them again."""
    from vitfsdp.sweep import report

    why = ("cancelled before it started: 3 jobs failed before their first timed window "
           "with the same reason (gloo: Unable to find address for: ib0); fix it and rerun")
    lines = report._steps(tmp_path, [
        ("0 a", "failed", {"reason": "gloo: Unable to find address for: ib0"}),
        ("1 b", "cancelled", {"reason": why, "interrupted": True, "held_back": True}),
        ("2 c", "cancelled", {"reason": "scancel", "interrupted": True})])
    assert lines[0].startswith("1 cancelled point (2 c) (interrupted from outside): the same "
                               "command runs it again")
    assert lines[1].startswith("2 failed/cancelled points (0 a, 1 b): once fixed, run them "
                               "again with:"), lines
    assert "--rerun-failed" in lines[1]
    assert lines[3] == f"  1 b cancelled: {why}"


def _record(sweep_dir: Path, task: list[str], points: list[tuple[str, str, list[str]]],
            when: str) -> None:
    """A commands.jsonl record as the sweep writes it since it records each point:
    ``points`` of ``(config hash, run directory name, overrides)``."""
    with open(sweep_dir / "commands.jsonl", "a") as f:
        f.write(json.dumps({"started_at": when, "task": task, "hydra": [],
                            "config_hashes": [h for h, _, _ in points],
                            "points": [{"config_hash": h, "run_dir": d, "overrides": o}
                                       for h, d, o in points]}) + "\n")


def test_a_presets_points_are_read_from_the_record_not_expanded(tmp_path, capsys):
    """``experiment=<preset>`` sweeps its preset's params: the command's overrides expand
    to one point, not its three. The recorded points still mark the broken environment's
    failures superseded by the fix, and a point of the fix not yet submitted is named by
    its run directory (before, superseded was never marked and the row was named ``2``)."""
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    task, env = ["experiment=mine"], "+cluster.env.GLOO_SOCKET_IFNAME=ib0"
    names = ["0_strategy=DDP", "1_strategy=FULL_SHARD", "2_strategy=HYBRID_2GPU"]
    strategies = ["strategy=DDP", "strategy=FULL_SHARD", "strategy=HYBRID_2GPU"]
    _record(sweep_dir, [*task, env], [(f"{n}" * 16, d, [*task, env, s]) for n, d, s
                                      in zip("abc", names, strategies, strict=True)], "1")
    fixed = [(f"{n}" * 16, d, [*task, s]) for n, d, s in zip("def", names, strategies,
                                                                strict=True)]
    _record(sweep_dir, task, fixed, "2")
    (sweep_dir / "multirun.yaml").write_text(json.dumps(
        {"hydra": {"overrides": {"task": task, "hydra": []}}}))
    for n, name in zip("abc", names, strict=True):
        old = sweep_dir / f"{name}_old"
        old.mkdir()
        (old / "job.json").write_text(json.dumps({"config_hash": n * 16}))
        (old / "summary.json").write_text(json.dumps(BROKEN_END))
    for h, d, _ in fixed[:2]:
        (sweep_dir / d).mkdir()
        (sweep_dir / d / "job.json").write_text(json.dumps({"config_hash": h}))
        (sweep_dir / d / "summary.json").write_text(json.dumps({"status": "completed"}))
    main_cli(["--status", str(sweep_dir)])
    out = capsys.readouterr().out
    assert "3 earlier points superseded by the last command" in out, out
    (row,) = [line for line in out.splitlines() if line.startswith("2 ") and "not submitted"
              in line]
    assert row.split()[-1] == "strategy=HYBRID_2GPU", out


def test_a_local_point_that_runs_now_says_so_with_its_last_record(tmp_path):
    """A local point with no summary whose sweep process (job.json's ``sweep``: host, pid and
    its start) runs: RUNNING with this host and when its last record came, where the table
    showed ``-`` in every column; one whose sweep process is gone: STOPPED; a job.json from
    before the sweep process was recorded: ``-`` as before."""
    from vitfsdp.launch import local, status

    run_dir = tmp_path / "sweep" / "0_strategy=DDP"
    run_dir.mkdir(parents=True)
    job = {"launcher": "local", "job_id": None, "config_hash": HASHES[0]}
    (run_dir / "job.json").write_text(json.dumps({**job, "sweep": local.sweep_process()}))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step_end": 12, "ips": 8.0}) + "\n")
    written = (run_dir / "metrics.jsonl").stat().st_mtime
    row = status.read_state(run_dir)
    assert (row.state, row.step, row.nodelist) == ("RUNNING", 12, os.uname().nodename)
    at = time.strftime("%H:%M:%S", time.localtime(written))
    assert status._state_cell(row, now=written + 185) == f"RUNNING (last record {at}, 3 min ago)"
    assert status.summary_line([row]) == "1 point: 1 RUNNING"

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid now names no process (or, reused, another start)
    (run_dir / "job.json").write_text(json.dumps(
        {**job, "sweep": {**local.sweep_process(), "pid": gone.pid}}))
    assert status.read_state(run_dir).state == "STOPPED"
    shown: list[str] = []  # --status --watch waited forever on it: nothing writes its summary
    (stopped,) = status.watch(run_dir.parent, [run_dir], poll_s=0.01, show=shown.append,
                              timeout_s=5)
    assert stopped.done and stopped.status is None and "1 point: 1 STOPPED" in shown[-1]
    (run_dir / "job.json").write_text(json.dumps(job))
    assert status.read_state(run_dir).state == "-"
    (run_dir / "summary.json").write_text(json.dumps({"status": "completed", "ips": 8.0}))
    (run_dir / "job.json").write_text(json.dumps({**job, "sweep": local.sweep_process()}))
    assert status.read_state(run_dir).state == "-"  # ended: its status says it


def test_ranks_left_by_a_killed_local_sweep_keep_the_point_running(tmp_path):
    """A local sweep killed with SIGKILL leaves its torchrun and ranks running (nothing can
    stop them then): --status said STOPPED, --watch ended and the README's rerun moved the
    point's files while those ranks still wrote them. Now a process whose argv names the
    run directory (as torchrun's and the ranks' do) keeps it RUNNING, and a rerun skips it
    naming the pids and their kill."""
    from vitfsdp.launch import local, status
    from vitfsdp.launch.resume import Existing
    from vitfsdp.sweep.choose import _job_alive

    run_dir = tmp_path / "sweep" / "0_strategy=DDP"
    run_dir.mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (run_dir / "job.json").write_text(json.dumps(
        {"launcher": "local", "job_id": None, "config_hash": HASHES[0],
         "sweep": {**local.sweep_process(), "pid": gone.pid}}))
    assert status.read_state(run_dir).state == "STOPPED"
    word = local.torchrun_command([], run_dir, 1)[-2]  # hydra.run.dir="<run_dir>"
    assert word.startswith("hydra.run.dir=")
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", word])
    try:
        deadline = time.monotonic() + 10
        while rank.pid not in local.point_processes(run_dir):
            assert time.monotonic() < deadline, "the rank's argv was never seen"
            time.sleep(0.05)
        assert status.read_state(run_dir).state == "RUNNING"
        relative = Path(os.path.relpath(run_dir))  # --status sweep: the path as typed
        assert local.point_processes(relative) == [rank.pid]
        why, summary = _job_alive([Existing(run_dir, None, False, None)], {}, tmp_path)
        assert f"(pids {rank.pid}) still run here" in why, why
        assert why.endswith(f"stop them with: kill {rank.pid}; then run this command again")
        assert summary["status"] == "running"
    finally:
        rank.kill()
        rank.wait()
    assert status.read_state(run_dir).state == "STOPPED"
    assert _job_alive([Existing(run_dir, None, False, None)], {}, tmp_path) == (None, {})


def test_an_interrupted_sweep_waits_for_squeue_seconds_not_a_minute(tmp_path, monkeypatch):
    """^C or a full disk: the sweep's last line asks squeue whether jobs whose points
    recorded an end still run. A slow slurmctld held the user's ^C for 60 s (a reviewer's
    fake squeue); now QUICK_QUERY_S, then "cannot say"."""
    from types import SimpleNamespace

    from vitfsdp.launch import status
    from vitfsdp.sweep import run

    (tmp_path / "squeue").write_text("#!/bin/sh\nsleep 30\n")
    (tmp_path / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(status, "QUICK_QUERY_S", 0.5)
    point = tmp_path / "0_a"
    point.mkdir()
    (point / "job.json").write_text(json.dumps({"job_id": "12"}))
    (point / "summary.json").write_text(json.dumps({"status": "failed"}))
    t0 = time.monotonic()
    assert run._running_jobs([SimpleNamespace(run_dir=point)]) == ([], ["12"])
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("status, said", [
    ("cancelled", "cancelled (last window 812.5 ips before it was cancelled)"),
    ("timeout", "timeout (last window 812.5 ips before it timed out)"),
    ("oom", "oom (last window 812.5 ips before it failed)")])
def test_a_point_that_ended_otherwise_shows_its_last_window_as_such(tmp_path, status, said):
    """The ips column holds completed and running points' figures; a point that ended
    otherwise says its last measured window in its status cell (the warm-up's is none)."""
    from vitfsdp.launch.status import format_table, read_state

    sweep_dir = _sweep(tmp_path, {0: {"status": status, "reason": "r", "ips": None},
                                  1: {"status": status, "reason": "r"}})
    windows = [{"step_end": 1, "warmup": True, "ips": 90.0},
               {"step_end": 2, "ips": 900.0}, {"step_end": 3, "ips": 812.5}]
    (sweep_dir / NAMES[0] / "metrics.jsonl").write_text(
        "".join(json.dumps(w) + "\n" for w in windows))
    (sweep_dir / NAMES[1] / "metrics.jsonl").write_text(json.dumps(windows[0]) + "\n")
    rows = [read_state(sweep_dir / name) for name in NAMES[:2]]
    assert [(r.ips, r.last_window_ips) for r in rows] == [(None, 812.5), (None, None)]
    table = format_table(rows).splitlines()
    assert table[1].split()[5] == "-" and f"  {said}  " in table[1], table
    assert table[2].split()[5:7] == ["-", status], table
