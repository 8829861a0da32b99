"""Every command line the tool prints for a user to paste is shell-quoted: pasted into bash
with hostile paths, it runs nothing of the path and hands the command exactly the path.

Each printed line is pasted into a real bash in which ``python`` and ``sbatch`` are shell
functions that write their arguments to a file (nothing is run for real); any ``$(...)``,
backtick, ``;`` or quote the path smuggled into the command would create a ``MARK_*`` file.
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_module
from vitfsdp import sweep
from vitfsdp.analysis.report import sweep_command
from vitfsdp.launch.local import quote_override
from vitfsdp.launch.resume import SweepLock
from vitfsdp.sweep import report, slurm_jobs

MARK = "MARK_"

#: the two commands the hints name, stubbed: each writes its argv, NUL-separated; sbatch,
#: exported to the bash that runs submit.sh, prints a job id as ``--parsable`` does
STUBS = ('python() { printf "%s\\0" python "$@" > argv; }\n'
         'sbatch() { printf "%s\\0" sbatch "$@" > argv; echo 4242; }\nexport -f sbatch\n')


def hostile_dir(where: Path) -> Path:
    """A directory path with spaces, both quotes, ``$(...)``, backticks, ``;``, ``&&`` and a
    glob: each command in it creates ``MARK_<n>`` in the current directory if run."""
    return where / (f"my sweep $(touch {MARK}1) `touch {MARK}2`;touch {MARK}3"
                    f" && touch {MARK}4 'q' \"d\" * ~ #")


def paste(line: str, cwd: Path) -> list[str]:
    """Run ``line`` in bash in ``cwd`` as a user who pasted it; return the argv the stubbed
    command got. Fails if anything of the line ran or it was not one command."""
    argv_file = cwd / "argv"
    argv_file.unlink(missing_ok=True)
    proc = subprocess.run(["bash", "-c", STUBS + line], cwd=cwd, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, (line, proc.stderr)
    assert not list(cwd.glob(f"{MARK}*")), f"pasting {line!r} ran a command of the path"
    return argv_file.read_text().split("\0")[:-1]


def command_after(marker: str, text: str) -> list[str]:
    """The command lines that follow ``marker`` in the log ``text`` (one per line)."""
    return [line.split(marker, 1)[1] for line in text.splitlines() if marker in line]


def test_scripts_only_hints_paste_safely(tmp_path):
    """A Frontier --scripts-only sweep of one point into a hostile hydra.sweep.dir: the
    printed submit and --status lines, pasted, submit the written script and follow the
    sweep directory. The submit line is submit.sh's, as for many scripts (it was ``sbatch
    <script>``, which recorded no job id: --status showed the point written until its job
    started); pasted, it records the id sbatch gave in the point's submitted_job_ids."""
    sweep_dir = hostile_dir(tmp_path)
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=STF218",
                      "nodes=1", "--scripts-only",
                      f"hydra.sweep.dir={quote_override(str(sweep_dir))}", cwd=tmp_path,
                      timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]  # written, not run
    (script,) = sweep_dir.glob("*/job.sbatch")
    (submit,) = command_after("submit with: ", out)
    assert shlex.split(submit) == ["bash", str(sweep_dir / "submit.sh")]
    assert paste(submit, tmp_path) == ["sbatch", "--parsable", str(script)]
    assert (script.parent / "submitted_job_ids").read_text() == "4242\n"
    follows = command_after("follow with: ", out)  # after the scripts, once
    assert len(follows) == 1
    for line in follows:
        assert paste(line, tmp_path) == ["python", "-m", "vitfsdp.sweep", "--status",
                                         str(sweep_dir), "--watch"]


def test_sweep_end_lines_paste_safely(tmp_path, caplog):
    """The detached, not-ended and done lines of a sweep (figures and tables) name the
    hostile directory so that bash hands it over whole."""
    sweep_dir = hostile_dir(tmp_path)
    with caplog.at_level(logging.INFO, logger=sweep.log.name):
        slurm_jobs._log_detached([], sweep_dir, None)
        report._report_not_ended([], [], sweep_dir)
        report._report([], [], sweep_dir)
    status = ["python", "-m", "vitfsdp.sweep", "--status", str(sweep_dir), "--watch"]
    follows = command_after("follow with: ", caplog.text)
    assert len(follows) == 1  # the not-ended line; the detached line points to it
    for line in follows:
        assert paste(line, tmp_path) == status
    (analysis,) = command_after("figures and tables: ", caplog.text)
    assert paste(analysis, tmp_path) == ["python", "-m", "vitfsdp.analysis", str(sweep_dir)]


def test_busy_sweep_refusal_names_a_paste_safe_status_command(tmp_path):
    """A second sweep into a directory another sweep holds is refused with the --status
    command of that directory, quoted."""
    sweep_dir = hostile_dir(tmp_path)
    held = SweepLock(sweep_dir).acquire()
    try:
        with pytest.raises(RuntimeError) as e:
            SweepLock(sweep_dir).acquire()
    finally:
        held.release()
    (line,) = re.findall(r"wait for it \((.*)\) or use", str(e.value))
    assert paste(line, tmp_path) == ["python", "-m", "vitfsdp.sweep", "--status",
                                     str(sweep_dir), "--watch"]


def test_report_sweep_command_pastes_back_the_overrides(tmp_path):
    """The report's "the command that ran it", rebuilt from multirun.yaml: hostile override
    values come back to the sweep as the same arguments."""
    overrides = [f"hydra.sweep.dir={hostile_dir(tmp_path)}", "nodes=1,2",
                 f"data.path=$(touch {MARK}5)", "cluster.modules=[a/1, `touch MARK_6`]"]
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump(
        {"hydra": {"overrides": {"task": overrides[1:], "hydra": overrides[:1]}}}))
    line = sweep_command(tmp_path)
    assert paste(line, tmp_path) == ["python", "-m", "vitfsdp.sweep", "-m",
                                     *overrides[1:], *overrides[:1]]


def test_the_resume_command_pastes_back_the_overrides_and_the_directory(tmp_path):
    """The command a Ctrl-C (or a disk error, or max_jobs) says to go on with: the sweep's
    overrides and its directory, which Hydra reads back whole (a default sweep directory is
    new at every start: without it, the same command starts another sweep)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    where = hostile_dir(tmp_path)
    where.mkdir()
    task = ["nodes=1,2", f"data.path=$(touch {MARK}5)", "cluster.modules=[a/1, `touch MARK_6`]"]
    (where / "multirun.yaml").write_text(yaml.safe_dump(
        {"hydra": {"overrides": {"task": task, "hydra": ["hydra.sweep.dir=runs/sweep/x"]}}}))
    argv = paste(report.resume_command(where), tmp_path)
    assert argv[:4 + len(task)] == ["python", "-m", "vitfsdp.sweep", "-m", *task]
    (last,) = argv[4 + len(task):]  # the directory, once: the recorded one replaced
    assert OverridesParser.create().parse_override(last).value() == str(where)
    assert report.resume_command(tmp_path / "none").endswith(
        f"-m '<your overrides>' hydra.sweep.dir={tmp_path}/none")


def test_the_report_names_every_command_that_ran_in_the_directory(tmp_path):
    """multirun.yaml holds a directory's last command only; a later command that added
    repeats left the report naming that one alone. commands.jsonl keeps each, once."""
    from vitfsdp.analysis.report import provenance_table, sweep_commands
    from vitfsdp.core.layout import COMMANDS_FILE
    from vitfsdp.records import append_jsonl

    first = {"task": ["strategy=DDP,FULL_SHARD", "nodes=1,2"], "hydra": []}
    later = {"task": ["strategy=DDP,FULL_SHARD", "nodes=1,2", "repeat=1"], "hydra": []}
    for record in (first, later, later):  # the later one resumed once: named once
        append_jsonl(tmp_path / COMMANDS_FILE, {"started_at": "x", **record})
    commands = sweep_commands(tmp_path)
    assert [paste(c, tmp_path)[4:] for c in commands] == [first["task"], later["task"]]
    import pandas as pd

    table = provenance_table(pd.DataFrame({c: [] for c in (
        "started_at", "git_commit", "versions", "device_name", "cluster", "network",
        "shared_cores", "ranks_per_host", "host_cpus")}), [tmp_path])
    assert table["what"].tolist()[-2:] == [f"sweep command 1 ({tmp_path.name})",
                                           f"sweep command 2 ({tmp_path.name})"]
