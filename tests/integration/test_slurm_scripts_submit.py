"""``--scripts-only``'s ``submit.sh``: one command submits every script it wrote, in the
order given, from a script's number on, and stops at the first script sbatch refuses with
the command that goes on from it. A DGX user's 90-point sweep printed 90 'submit with:
sbatch ...' lines and 90 'not ended' lines instead. Here bash runs the written file with
``sbatch`` a shell function that records its argv (the virtual cluster's real sbatch:
test_slurm_scripts_queue_cap.py), in a sweep directory whose name holds ``$(...)``, quotes,
``;`` and a glob: nothing of it runs."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_module
from tests.integration.test_paste_safe import MARK, hostile_dir
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster, slurm
from vitfsdp.core.layout import SUBMITTED_FILE
from vitfsdp.launch.slurm import (
    SUBMIT_FILE,
    submit_command,
    write_submit_script,
    written_not_run,
)

#: sbatch, exported to the bash that runs submit.sh: it appends its arguments (one line,
#: NUL-separated) to ``calls``, refuses a script whose path holds REFUSE (as a site
#: refuses the job beyond its cap), and prints a job id as ``--parsable`` does (with the
#: cluster's name after ``;``, as on a multi-cluster site)
STUB = ('sbatch() { printf "%s\\0" "$@" >> calls; echo >> calls; '
        'if [[ "${!#}" == *"$REFUSE"* ]]; then echo "sbatch: error: refused" >&2; return 1; fi; '
        'echo "$((RANDOM + 100));cluster"; }\nexport -f sbatch\n')


def _paste(line: str, cwd: Path, refuse: str = "never") -> tuple[subprocess.CompletedProcess,
                                                               list[list[str]]]:
    """Run ``line`` as a user who pasted it; the process and each sbatch call's argv."""
    calls = cwd / "calls"
    calls.unlink(missing_ok=True)
    proc = subprocess.run(["bash", "-c", STUB + line], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                      "REFUSE": refuse})
    assert not list(cwd.glob(f"{MARK}*")), f"pasting {line!r} ran a command of the path"
    argv = [c.split("\0")[:-1] for c in calls.read_text().splitlines()] \
        if calls.exists() else []
    return proc, argv


def _recorded(run_dir: Path) -> list[str]:
    """The job ids submit.sh recorded in ``run_dir`` (:data:`SUBMITTED_FILE`)."""
    path = run_dir / SUBMITTED_FILE
    return path.read_text().split() if path.exists() else []


def test_submit_sh_submits_in_order_and_goes_on_from_the_script_sbatch_refused(tmp_path):
    sweep_dir = hostile_dir(tmp_path)
    sweep_dir.mkdir()
    scripts = [sweep_dir / f"{n}_nodes={n},x=$(touch {MARK}9)" / "job.sbatch"
               for n in (0, 2, 1)]
    for script in scripts:
        script.parent.mkdir()
    path = write_submit_script(sweep_dir, scripts)
    assert path == sweep_dir / SUBMIT_FILE and path.stat().st_mode & 0o111
    proc, argv = _paste(submit_command(sweep_dir), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert argv == [["--parsable", str(s)] for s in scripts]  # every one, in the order given
    ids = [x.split()[-1] for x in proc.stdout.splitlines() if "Submitted batch job" in x]
    assert len(ids) == 3 and proc.stderr == ""
    # each job id where --status reads it: its point's run directory, the newest last
    assert [_recorded(s.parent) for s in scripts] == [[i] for i in ids]
    # a site's cap refuses the second: it stops there and names the command that goes on,
    # options and all
    proc, argv = _paste(f"{submit_command(sweep_dir)} 1 --hold --qos='a b'", tmp_path,
                        refuse="2_nodes")
    assert proc.returncode == 1 and argv == [["--parsable", "--hold", "--qos=a b", str(s)]
                                             for s in scripts[:2]]
    assert [len(_recorded(s.parent)) for s in scripts] == [2, 1, 1]  # not the refused one
    said = proc.stderr.strip().splitlines()[-1]
    assert said.startswith(f"submit.sh: sbatch refused script 2 of 3 ({scripts[1]}); "), said
    go_on = said.split("go on with: ", 1)[1]
    proc, argv = _paste(go_on, tmp_path)  # once fixed
    assert proc.returncode == 0, proc.stderr
    assert argv == [["--parsable", "--hold", "--qos=a b", str(s)] for s in scripts[1:]]
    assert proc.stdout.strip().endswith("submit.sh: submitted scripts 2-3 of 3")
    assert [len(_recorded(s.parent)) for s in scripts] == [2, 2, 2]
    proc, argv = _paste(f"{submit_command(sweep_dir)} 4", tmp_path)
    assert proc.returncode == 2 and argv == [] and "1-3, not '4'" in proc.stderr


def test_the_command_that_goes_on_without_options_passes_sbatch_none(tmp_path):
    """Refused without sbatch options, submit.sh named `bash submit.sh 2 ''` (bash's printf
    ' %q' with no argument prints ''), which ran `sbatch '' SCRIPT` and was refused again
    (a reviewer, on the virtual cluster's sbatch: 'Unable to open file')."""
    sweep_dir = tmp_path / "sweep"
    scripts = [sweep_dir / f"{n}_nodes={n}" / "job.sbatch" for n in (0, 1)]
    sweep_dir.mkdir()
    write_submit_script(sweep_dir, scripts)
    proc, argv = _paste(submit_command(sweep_dir), tmp_path, refuse="1_nodes")
    assert proc.returncode == 1 and argv == [["--parsable", str(s)] for s in scripts]
    go_on = proc.stderr.strip().splitlines()[-1].split("go on with: ", 1)[1]
    assert go_on.endswith("submit.sh 2"), go_on
    proc, argv = _paste(go_on, tmp_path)
    assert proc.returncode == 0 and argv == [["--parsable", str(scripts[1])]], proc.stderr


def test_a_pack_scripts_job_id_is_recorded_in_each_of_its_points(tmp_path):
    """A pack's script runs several points: its job id goes into each of their run
    directories (--status shows each as waiting in its pack), from FIRST on as well."""
    sweep_dir = tmp_path / "sweep"
    dirs = [[sweep_dir / f"{n}_p" for n in nums] for nums in ((0, 3), (1,), (2, 4, 5))]
    for run_dir in (d for ds in dirs for d in ds):
        run_dir.mkdir(parents=True)
    scripts = [sweep_dir / "packs" / f"pack{i}.sbatch" for i in range(3)]
    write_submit_script(sweep_dir, scripts, dirs)
    proc, argv = _paste(f"{submit_command(sweep_dir)} 2", tmp_path)
    assert proc.returncode == 0 and argv == [["--parsable", str(s)] for s in scripts[1:]]
    ids = [x.split()[-1] for x in proc.stdout.splitlines() if "Submitted batch job" in x]
    assert [[_recorded(d) for d in ds] for ds in dirs] == [
        [[], []], [[ids[0]]], [[ids[1]]] * 3]


def _rows(sweep_dir: Path, *flags: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """``--status`` of the sweep (its process), and its last table's rows by point number."""
    proc = run_module("vitfsdp.sweep", "--status", str(sweep_dir), *flags, cwd=sweep_dir,
                      timeout=300)
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()
            if re.match(r"\d+ +(\d+|-) ", line)}
    return proc, rows


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_status_follows_the_jobs_submit_sh_queued(tmp_path):
    """On the virtual cluster: before, --status showed the jobs submit.sh queued as
    ``written`` (no job id anywhere) until each started. Now each row has its job from
    submit.sh's record, pending with Slurm's reason; one cancelled while held ends
    ``cancelled`` before it started, the other runs to ``completed``, as the points of a
    sweep the tool submitted; the started job keeps its point's record in place (no
    ``attempts/``)."""
    require_cluster()
    sweep_dir = tmp_path / "sweep"
    sweep = ["vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
             "train.steps=2", "train.warmup_steps=1", "train.local_batch_size=4",
             "cluster.gpus_per_node=1", "nodes=1", "train.seed=1,2", "--scripts-only",
             f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
             f"hydra.sweep.dir={sweep_dir}"]
    proc = run_module(*sweep, cwd=tmp_path, timeout=300)
    assert proc.returncode == 3, (proc.stdout + proc.stderr)[-3000:]  # written, not run
    _, rows = _rows(sweep_dir)
    assert [r.split()[1:3] for r in rows.values()] == [["-", "written"]] * 2, rows
    submitted = slurm("bash", "-c", f"{submit_command(sweep_dir)} 1 --hold", cwd=tmp_path)
    ids = [x.split()[-1] for x in submitted.stdout.splitlines() if "Submitted batch" in x]
    try:
        assert submitted.returncode == 0 and len(ids) == 2, submitted.stdout + submitted.stderr
        _, rows = _rows(sweep_dir)
        assert [r.split()[1:4] for r in rows.values()] == [
            [i, "PENDING", "(JobHeldUser)"] for i in ids], rows
        # the same command again leaves them be: it moved their files and wrote new scripts
        proc = run_module(*sweep, cwd=tmp_path, timeout=300)
        out = proc.stdout + proc.stderr
        assert "0 to run; skipped: 2 submitted" in out and "wrote" not in out, out[-3000:]
        assert not list(sweep_dir.glob("*/attempts")), out[-3000:]
        slurm("scancel", ids[0])
        slurm("scontrol", "release", ids[1])
        proc, rows = _rows(sweep_dir, "--watch", "--poll-s", "1")
        assert proc.returncode == 1, proc.stdout + proc.stderr  # a point cancelled
        assert rows["0"].split()[1:3] == [ids[0], "CANCELLED"], rows
        assert rows["1"].split()[1:3] == [ids[1], "COMPLETED"], rows
        points = sorted(d for d in sweep_dir.iterdir() if (d / "job.json").exists())
        cancelled, completed = (json.loads((d / "summary.json").read_text()) for d in points)
        assert cancelled["status"] == "cancelled", cancelled
        assert f"Slurm job {ids[0]} was cancelled before it started" in cancelled["reason"]
        assert completed["status"] == "completed" and completed["slurm"]["job_id"] == ids[1]
        assert not (points[1] / "attempts").exists()
    finally:
        if ids:
            slurm("scancel", *ids)


def test_the_analysis_line_of_submitted_scripts_says_how_to_follow_them(tmp_path):
    """Before any run.json, the analysis said of a directory whose scripts submit.sh had
    queued 'submit them with: bash .../submit.sh': pasted, that queues every job again. Where
    submit.sh recorded job ids it says how many it submitted and the --status command."""
    sweep_dir = hostile_dir(tmp_path)
    scripts = [sweep_dir / f"{n}_nodes={n}" / "job.sbatch" for n in (0, 1)]
    for script in scripts:
        script.parent.mkdir(parents=True)
        script.write_text("#!/bin/bash\n")
    write_submit_script(sweep_dir, scripts)
    assert "submit them with: " in written_not_run(sweep_dir)
    (scripts[0].parent / SUBMITTED_FILE).write_text("12\n")
    line = written_not_run(sweep_dir)
    assert "(--scripts-only), none run yet (no run.json below it): 1 of them submitted by " \
           "submit.sh: follow them with: " in line and "submit them with" not in line, line
    command = line.split("follow them with: ", 1)[1].rsplit(", then analyse it", 1)[0]
    assert shlex.split(command) == ["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir)]
