"""The analysis of a ``--scripts-only`` sweep directory before its scripts ran: it stopped
with ``error: sweep dir ... holds no run.json`` (exit 2), which left a user who had written
the scripts wondering what went wrong. It now says the directory holds the job scripts of
that many points, none run yet, and the command that submits them (``bash
<dir>/submit.sh``, as the sweep printed it), still exit 2; a directory without scripts
keeps the old line."""

from __future__ import annotations

import shlex
import subprocess

from tests.conftest import run_module
from tests.integration.test_paste_safe import MARK, hostile_dir
from vitfsdp.launch.local import quote_override


def test_a_scripts_only_dir_names_its_scripts_and_how_to_submit_them(tmp_path):
    sweep_dir = hostile_dir(tmp_path)
    sweep = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=STF218",
                       "nodes=1,2", "repeat=0,1", "--scripts-only",
                       f"hydra.sweep.dir={quote_override(str(sweep_dir))}", cwd=tmp_path,
                       timeout=300)
    assert sweep.returncode == 3, sweep.stderr[-3000:]  # written, not run
    proc = run_module("vitfsdp.analysis", str(sweep_dir), "--out", str(tmp_path / "out"),
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: sweep dir {sweep_dir} holds the job scripts of 4 points "
                           "(--scripts-only), none run yet (no run.json below it): submit "
                           "them with: "), line
    command = line.split("submit them with: ", 1)[1].split(" (unless submitted already", 1)[0]
    # the command the sweep printed, pasted as it is
    (printed,) = [x.split("submit them round by round with: ", 1)[1] for x in
                  (sweep.stdout + sweep.stderr).splitlines() if "round by round with: " in x]
    assert command == printed and shlex.split(command) == ["bash", str(sweep_dir / "submit.sh")]
    # pasted into bash (itself a function that records its argv): the path runs nothing
    proc = subprocess.run(["bash", "-c", 'bash() { printf "%s\\0" bash "$@" > argv; }\n'
                           + command], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and not list(tmp_path.glob(f"{MARK}*")), proc.stderr
    assert (tmp_path / "argv").read_text().split("\0")[:-1] == [
        "bash", str(sweep_dir / "submit.sh")]
    # a directory written before submit.sh: each point's script, by sbatch
    (sweep_dir / "submit.sh").unlink()
    proc = run_module("vitfsdp.analysis", str(sweep_dir), "--out", str(tmp_path / "out"),
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().endswith(
        f"none run yet (no run.json below it): sbatch each point's job.sbatch "
        f"({sweep_dir}/*/job.sbatch) (unless submitted already: squeue --me lists them), "
        "then analyse it once they have run"), proc.stderr


def test_a_dir_without_scripts_or_runs_keeps_its_line(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_module("vitfsdp.analysis", str(tmp_path / "empty"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: sweep dir {tmp_path / 'empty'} holds no run.json "
                                   "(no runs below it)")
