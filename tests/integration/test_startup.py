"""Commands that answer at once: ``--help`` of bench, plan and sweep and a training dry run
import neither torch nor timm (seconds to import: ``bench --help`` took 8-10 s when it did),
and a dry run leaves no run directory behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Modules a command that answers at once must not import.
HEAVY = ("torch", "timm", "jax", "matplotlib")


def imported(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime args`` in ``cwd``: the process and the top-level modules
    it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    names = {m.group(1).split(".")[0]
             for m in re.finditer(r"^import time:.*\|\s*(\S+)$", proc.stderr, re.M)}
    return proc, names


@pytest.mark.parametrize(("args", "says"), [
    (["-m", "vitfsdp.bench", "--help"], "python -m vitfsdp.bench overhead"),
    (["-m", "vitfsdp.plan", "--help"], "usage"),
    (["-m", "vitfsdp.sweep", "--help"], "Config groups"),
])
def test_help_imports_no_framework(args, says, tmp_path):
    proc, names = imported(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert says in " ".join(proc.stdout.split())
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


def test_dry_run_imports_no_framework_and_leaves_no_directory(tmp_path):
    proc, names = imported(["-m", "vitfsdp.train", "dry_run=true", "nodes=2"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "vit_tiny FULL_SHARD on 4 ranks" in proc.stdout
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
    assert list(tmp_path.iterdir()) == []  # no runs/train/<time>/.hydra/


def test_sweep_help_shows_the_defaults_and_plan_help_no_markup(tmp_path):
    """``sweep --help`` says what a sweep of no group runs (vit_tiny, synthetic data, the local
    cluster: processes here); ``plan --help`` prints its description as text, not Sphinx
    markup."""
    sweep_help = imported(["-m", "vitfsdp.sweep", "--help"], tmp_path)[0].stdout
    assert ("runs model=vit_tiny strategy=FULL_SHARD data=synthetic cluster=local"
            in " ".join(sweep_help.split()))
    for group, default in (("model", "vit_tiny"), ("data", "synthetic"), ("cluster", "local")):
        assert f"  {group} (default {default}): " in sweep_help
    plan_help = imported(["-m", "vitfsdp.plan", "--help"], tmp_path)[0].stdout
    assert "vitfsdp.overrides.expand" in plan_help  # the role's target, as text
    assert not re.search(r":\w+:`|``", plan_help), plan_help


def test_the_command_that_starts_ranks_imports_no_framework(tmp_path):
    """``python -m vitfsdp.train`` run plainly for 2 ranks starts them with torchrun and
    waits: it needs neither torch nor timm (each rank imports its own; the launcher imported
    torch too, 4 s of CPU a run on 2 cores)."""
    run_dir = tmp_path / "run"
    proc, names = imported(["-m", "vitfsdp.train", "model=vit_tiny", "device=cpu",
                            "train.steps=2", "train.warmup_steps=1", "train.log_every=1",
                            "train.local_batch_size=2", f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert json.loads((run_dir / "run.json").read_text())["world"]["size"] == 2
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


#: Python code that counts the collections that start from here on, in ``starts``.
COUNT_COLLECTIONS = ("import gc, sys\n"
                     "starts = []\n"
                     "gc.callbacks.append(lambda phase, info: starts.append(info['generation'])"
                     " if phase == 'start' else None)\n")


def imports_paused(body: str, cwd: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run :data:`COUNT_COLLECTIONS` then ``body`` in a new interpreter; ``body`` prints
    ``before during enabled [more ...]`` to stderr: the collections before its imports,
    during them, and whether the collector is on after. Checks that it ran, that the
    callback saw collections before (the collector ran there), at most one during (the one
    the imports' allocations start as the collector comes back on) and the collector on
    again; returns the process and the more fields."""
    proc = subprocess.run([sys.executable, "-c", COUNT_COLLECTIONS + body], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
    before, during, enabled, *more = line.split()
    assert int(before) > 0
    assert int(during) <= 1, during
    assert enabled == "True"
    return proc, more


def test_a_rank_imports_its_trainer_torch_and_timm_without_a_collection(tmp_path):
    """``vitfsdp.train.trainer_main`` imports the torch trainer, torch and timm with the
    collector paused (vitfsdp.startup_gc; 23% of a rank's import CPU here): no collection runs
    during the imports but the one the allocations counted meanwhile start as the collector
    comes back on, and it is on again after them. (Without the pause: hundreds.)"""
    _, (imported_both,) = imports_paused(
        "from vitfsdp.train import trainer_main\n"
        "before = len(starts)\n"
        "trainer_main('torch')\n"
        "print(before, len(starts) - before, gc.isenabled(),"
        " 'timm' in sys.modules and 'torch' in sys.modules, file=sys.stderr)\n", tmp_path)
    assert imported_both == "True"


def test_the_local_launchers_torchrun_is_torchs_with_its_imports_paused(tmp_path):
    """The local launcher starts torchrun's agent as ``python -m vitfsdp.launch.agent``:
    torch's own ``torch.distributed.run.main`` (its ``--help`` here), with torch imported
    under the paused collector: at most the one collection the imports' allocations start
    as the collector comes back on (without the pause: hundreds)."""
    from vitfsdp.launch.agent import AGENT
    from vitfsdp.launch.local import torchrun_command

    assert torchrun_command([], tmp_path, 2)[1:1 + len(AGENT)] == list(AGENT)
    proc, _ = imports_paused("from vitfsdp.launch import agent\n"
                             "before = len(starts)\n"
                             "agent.load()\n"
                             "print(before, len(starts) - before, gc.isenabled(), "
                             "file=sys.stderr)\n"
                             "sys.argv = ['agent', '--help']\n"
                             "agent.main()\n", tmp_path)
    assert "--nproc-per-node" in proc.stdout, proc.stdout[:500]  # torchrun's own options


def test_the_local_launchers_torchrun_leaves_no_folder_in_the_temporary_directory(tmp_path):
    """torchrun makes a ``torchelastic_*`` tree in the temporary directory for each launch
    and never removes it, unless told ``--log-dir=/dev/null`` (the agent's head, AGENT)."""
    from vitfsdp.launch.agent import AGENT

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.run([sys.executable, *AGENT, "--standalone", "--nproc_per_node=1",
                           "--no-python", "true"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(tmp.iterdir()) == []
