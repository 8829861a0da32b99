"""Ctrl-C during a sweep, as a terminal sends it (SIGINT to the sweep's process group, its
torchrun and ranks included): no traceback, one line saying what was recorded and what runs
on, exit status 130; the interrupted point runs again on a plain rerun (locally), and on Slurm
the jobs run on and the rerun waits for them. A sweep stopped by SIGTERM (``kill``) or SIGHUP
(its login session closed) ends the same way, local or Slurm, with exit status 128 + the
signal and the line in its log too; a local point it stops is recorded ``cancelled`` with the
signal as its reason.
"""

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

from tests.conftest import read
from tests.integration.test_sweep import FAST
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster

needs_slurm = pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)


def _as_a_terminal_job() -> None:
    """In the child: SIGINT back to its default, as a terminal's foreground job has it. A
    suite started in the background of a non-interactive shell (``make test &``) inherits
    SIGINT ignored, and Python keeps an ignored SIGINT ignored, as it should for ``nohup``:
    the Ctrl-C under test would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sweep(args: list[str], cwd: Path, stdout=subprocess.PIPE) -> subprocess.Popen:
    """``python -m vitfsdp.sweep -m ARGS`` in a session of its own (a terminal's job);
    ``stdout``: where its log goes (a file: a sweep left running, redirected)."""
    return subprocess.Popen([sys.executable, "-m", "vitfsdp.sweep", "-m", *args], cwd=cwd,
                            start_new_session=True, stdout=stdout,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_a_terminal_job,
                            env={**os.environ, "HYDRA_FULL_ERROR": "0"})


def wait_for(found, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not found():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def ctrl_c(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGINT to the whole process group, as ^C; the sweep's output once it has ended."""
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "Traceback" not in out + err
    return out, err


def _pasted(line: str, sweep_dir: Path) -> list[str]:
    """The overrides of the command ``line`` says to go on with, as a shell reads it: the
    sweep's own, and its directory named (the default one is new at every start)."""
    argv = shlex.split(line.split("go on with: ", 1)[1].split(" (it ", 1)[0])
    assert argv[:4] == ["python", "-m", "vitfsdp.sweep", "-m"], argv
    assert argv[-1] == f"hydra.sweep.dir={sweep_dir}", argv
    sweep_dir.parent.joinpath("elsewhere").mkdir(exist_ok=True)
    return argv[4:]


def test_local_point_interrupted_is_recorded_and_runs_again(tmp_path):
    args = [*FAST, "train.steps=40", f"hydra.sweep.dir={tmp_path}/s"]
    proc = sweep(args, tmp_path)
    wait_for(lambda: list(tmp_path.glob("s/*/metrics.jsonl")))  # the ranks train
    _, err = ctrl_c(proc)
    line = err.strip().splitlines()[-1]  # the sweep's last word (a library may warn before)
    assert line.startswith("interrupted: the point running here was stopped and recorded "
                           "cancelled"), err[-3000:]
    (run_dir,) = (tmp_path / "s").glob("0_*")
    summary = read(run_dir / "summary.json")
    assert summary["status"] == "cancelled" and summary["interrupted"] is True
    wait_for(lambda: not subprocess.run(["pgrep", "-f", str(run_dir)],  # none outlives it
                                        capture_output=True).stdout, 30)
    proc = sweep(_pasted(line, tmp_path / "s"), tmp_path / "elsewhere")  # the printed command
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert read(run_dir / "summary.json")["status"] == "completed"
    assert (run_dir / "attempts" / "0" / "summary.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_local_point_stopped_by_sigterm_or_sighup_is_recorded(tmp_path, sig):
    """A ``kill`` (SIGTERM to the sweep's process alone) or a closed login session (SIGHUP
    to its process group) ends a local sweep as Ctrl-C does: the running point's ranks are
    stopped and it is recorded ``cancelled`` with the signal as its reason, the point not
    started stays so, one line on stderr and in the log says so with the command that goes
    on; exit 128 + the signal."""
    args = [*FAST, "train.steps=100000", "train.seed=0,1", f"hydra.sweep.dir={tmp_path}/s"]
    log_path = tmp_path / "sweep.log"
    with log_path.open("w") as out:
        proc = sweep(args, tmp_path, stdout=out)
    try:
        wait_for(lambda: list(tmp_path.glob("s/0_*/metrics.jsonl")))  # the ranks train
        (run_dir,) = (tmp_path / "s").glob("0_*")
        (os.kill if sig == signal.SIGTERM else os.killpg)(proc.pid, sig)
        _, err = proc.communicate(timeout=120)
        left = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True,
                              text=True).stdout  # none outlives the sweep
    finally:
        subprocess.run(["pkill", "-KILL", "-f", str(tmp_path)], capture_output=True)
    logged = log_path.read_text()
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig, logged[-2000:] + err[-2000:]
    assert "Traceback" not in logged + err
    line = (err.strip().splitlines() or [""])[-1]
    assert line.startswith(f"interrupted by {name}: the point running here was stopped and "
                           "recorded cancelled"), err[-3000:]
    assert _pasted(line, tmp_path / "s")[-1] == f"hydra.sweep.dir={tmp_path}/s"
    assert line in logged
    summary = read(run_dir / "summary.json")
    assert summary["status"] == "cancelled" and summary["interrupted"] is True
    assert summary["reason"].startswith(f"{name}: ") and "\n" not in summary["reason"]
    assert not list(tmp_path.glob("s/1_*/summary.json"))  # not started: nothing recorded
    assert not left, left


@needs_slurm
def test_slurm_jobs_run_on_after_ctrl_c_and_the_rerun_waits(tmp_path):
    require_cluster()
    args = ["cluster=virtual", *FAST, "train.steps=20", f"hydra.sweep.dir={tmp_path}/s"]
    proc = sweep(args, tmp_path)
    wait_for(lambda: any(json.loads(p.read_text()).get("job_id")
                         for p in tmp_path.glob("s/*/job.json")))
    _, err = ctrl_c(proc)
    line = err.strip().splitlines()[-1]
    (run_dir,) = (tmp_path / "s").glob("0_*")
    job_id = read(run_dir / "job.json")["job_id"]
    assert line.startswith("interrupted: 1 Slurm job(s) keep running; follow with: "), line
    assert f"cancel them with: scancel {job_id};" in line
    proc = sweep(_pasted(line, tmp_path / "s"), tmp_path / "elsewhere")  # waits for the job
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert "waiting also for 1 point(s) an earlier sweep left" in out + err
    assert read(run_dir / "summary.json")["status"] == "completed"
    assert read(run_dir / "job.json")["job_id"] == job_id  # not submitted twice


@needs_slurm
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_slurm_jobs_run_on_after_sigterm_or_sighup_and_the_log_says_so(tmp_path, sig):
    """A ``kill`` (SIGTERM to the sweep's process) or a closed login session (SIGHUP to its
    process group) ends a sweep watching its Slurm jobs as Ctrl-C does: the jobs run on, the
    line says so and how to go on, on stderr and in the log its stdout is redirected into;
    exit 128 + the signal."""
    require_cluster()
    args = ["cluster=virtual", *FAST, "train.steps=20", f"hydra.sweep.dir={tmp_path}/s"]
    log_path = tmp_path / "sweep.log"
    with log_path.open("w") as out:
        proc = sweep(args, tmp_path, stdout=out)
    wait_for(lambda: any(json.loads(p.read_text()).get("job_id")
                         for p in tmp_path.glob("s/*/job.json")))
    (run_dir,) = (tmp_path / "s").glob("0_*")
    job_id = read(run_dir / "job.json")["job_id"]
    try:
        (os.kill if sig == signal.SIGTERM else os.killpg)(proc.pid, sig)
        _, err = proc.communicate(timeout=300)
        logged = log_path.read_text()
        assert proc.returncode == 128 + sig, logged[-2000:] + err[-2000:]
        assert "Traceback" not in logged + err
        line = err.strip().splitlines()[-1]
        name = signal.Signals(sig).name
        assert line.startswith(f"interrupted by {name}: 1 Slurm job(s) keep running; "
                               "follow with: "), line
        assert f"cancel them with: scancel {job_id};" in line
        assert logged.rstrip().endswith(line)  # in the log too, its last line
        proc = sweep(_pasted(line, tmp_path / "s"), tmp_path / "elsewhere")  # waits for it
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-2000:] + err[-2000:]
        assert "waiting also for 1 point(s) an earlier sweep left" in out + err
        assert read(run_dir / "summary.json")["status"] == "completed"
        assert read(run_dir / "job.json")["job_id"] == job_id  # not submitted twice
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_before_any_point_ran_says_so_once(monkeypatch, capsys, sig):
    """SIGTERM/SIGHUP while the points are composed and checked (before any runs): one
    line, as Ctrl-C there prints, and the exit status 128 + the signal; where the sweep
    already printed its interrupted line (:class:`SweepStopped`), nothing more."""
    import vitfsdp.sweep as sweep

    def killed(*_args, **_kwargs):
        raise SystemExit(128 + sig)

    monkeypatch.setattr(sweep, "cli", killed)
    with pytest.raises(SystemExit) as stopped:
        sweep.main_cli(["-m", "model=vit_tiny"])
    assert stopped.value.code == 128 + sig
    assert capsys.readouterr().err == (f"interrupted by {sig.name}: nothing was run or "
                                       "queued\n")

    def said(*_args, **_kwargs):
        raise sweep.SweepStopped(128 + sig)

    monkeypatch.setattr(sweep, "cli", said)
    with pytest.raises(SystemExit) as stopped:
        sweep.main_cli(["-m", "model=vit_tiny"])
    assert stopped.value.code == 128 + sig
    assert capsys.readouterr().err == ""
