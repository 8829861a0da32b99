"""The sweep entry point as a user types it: real Hydra multiruns of real torchrun processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import read, run_module

FAST = ["model=vit_tiny", "device=cpu", "train.steps=3", "train.warmup_steps=1",
        "train.log_every=1", "train.local_batch_size=2"]


def _point_dirs(sweep_dir):
    return sorted(p for p in sweep_dir.iterdir() if (p / "run.json").exists())


def test_readme_sweep_command_runs_and_analyses(tmp_path):
    """The README's sweep up to 2 nodes (CI time; tests/integration/test_slurm_pack.py runs 3-node
    points on the virtual Slurm cluster)."""
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "strategy=FULL_SHARD,HYBRID_2GPU", "nodes=1,2",
                      *FAST, f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[4/4] completed" in proc.stdout and "sweep done: 4 completed" in proc.stdout
    # says at its start what runs where; an ETA from measured wall time after each point
    assert ("runs model=vit_tiny data=synthetic cluster=local: 2-4 ranks a point, all as "
            "processes on this host") in proc.stdout, proc.stdout[:2000]
    assert "sweep: 1/4 points ended, ETA ~" in proc.stdout
    assert "(measured: wall time of 3 points)" in proc.stdout
    points = _point_dirs(sweep_dir)
    assert [p.name for p in points] == [  # the swept keys only: FAST's are in run.json
        "0_nodes=1,strategy=FULL_SHARD", "1_nodes=2,strategy=FULL_SHARD",
        "2_nodes=1,strategy=HYBRID_2GPU", "3_nodes=2,strategy=HYBRID_2GPU"]
    worlds = sorted((read(p / "run.json")["config"]["strategy"]["name"],
                     read(p / "run.json")["world"]["size"]) for p in points)
    assert worlds == [(s, 2 * n) for s in ("FULL_SHARD", "HYBRID_2GPU") for n in (1, 2)]
    for p in points:
        summary = read(p / "summary.json")
        assert summary["status"] == "completed" and summary["ips"] > 0
        windows = read(p / "metrics.jsonl")
        assert [w["warmup"] for w in windows] == [True, False, False]

    proc = run_module("vitfsdp.analysis", str(sweep_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = sweep_dir / "analysis"
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and set(runs["status"]) == {"completed"}
    for png in ("weak_scaling.png", "memory.png"):
        assert (out / png).stat().st_size > 10_000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["strategy=FULL_SHARD,BOGUS"], "strategy=BOGUS is unknown; valid: DDP, FULL_SHARD"),
        (["model=vit_giant"], "model=vit_giant is unknown; did you mean "
         "model=vit_giant_patch14_224? valid: vit_15b, vit_1b"),
        # alone (beside FULL_SHARD it is skipped as a point that cannot run:
        # test_sweep_cannot_run.py)
        (["strategy=HYBRID_2GPU", "cluster.gpus_per_node=3"],
         "strategy=HYBRID_2GPU (strategy.shard_group_size=2): HYBRID_SHARD needs shard groups "
         "of 2 ranks, but a node "
         "has 3 ranks"),
        (["strategy=HYBRID_8GPU", "nodes=1,2"], "shard groups of 8 ranks"),
        (["nodes=0,1"], "nodes=0 must be >= 1"),
        (["train.warmup_steps=3"], "train.warmup_steps=3 must be >= 0 and < train.steps=3"),
        (["nodes=1,2", "hydra.sweep.subdir=same"], "points 0 and 1 would both write into"),
        (["--batch-search", "--detach"], "--batch-search waits for each round's results"),
    ],
)
def test_bad_points_are_refused_before_anything_starts(tmp_path, overrides, message):
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", *FAST, *overrides, f"hydra.sweep.dir={sweep_dir}",
                      cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "nothing was launched" in proc.stderr or proc.stderr.startswith("error: ")
    assert not sweep_dir.exists() or _point_dirs(sweep_dir) == []
    assert "] [1/" not in proc.stdout  # no point was started


def _tree_bytes(run_dir):
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file()}


def test_a_dying_point_is_data_and_a_rerun_runs_only_what_is_missing(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *FAST, "device=cuda,cpu", "cluster.gpus_per_node=1",  # a rank a point
            "hydra.sweep.subdir=${device}", f"hydra.sweep.dir={sweep_dir}"]
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # a point did not complete
    failed = read(sweep_dir / "cuda" / "summary.json")
    assert failed["status"] == "failed" and failed["ips"] is None
    assert "device=cuda but torch sees no GPU" in failed["reason"]
    assert read(sweep_dir / "cpu" / "summary.json")["status"] == "completed"
    assert "sweep done: 1 completed, 1 failed" in proc.stdout
    end = proc.stdout.split("sweep done: ", 1)[1]  # the failed point named, why and where
    assert "  failed device=cuda: " in end and "sees no GPU" in end
    assert f"(records and logs: {sweep_dir / 'cuda'})" in end
    before = {d: _tree_bytes(sweep_dir / d) for d in ("cpu", "cuda")}

    # The same command again: the completed point and the point that failed in its run are
    # settled; nothing runs and nothing is written.
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # a point did not complete
    assert "2 points into" in proc.stdout and ("0 to run; skipped: 1 completed, 1 failed "
                                               "(--rerun-failed runs them again)") in proc.stdout
    assert "skip " in proc.stdout and "completed in cpu" in proc.stdout
    assert "failed in cuda; --rerun-failed runs it again" in proc.stdout
    assert {d: _tree_bytes(sweep_dir / d) for d in ("cpu", "cuda")} == before

    # --rerun-failed runs the failed point again; its first attempt is kept.
    proc = run_module("vitfsdp.sweep", "--rerun-failed", *args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # a point did not complete
    assert "1 to run; skipped: 1 completed" in proc.stdout
    assert _tree_bytes(sweep_dir / "cpu") == before["cpu"]
    first = read(sweep_dir / "cuda" / "attempts" / "0" / "summary.json")
    assert first == failed
    assert read(sweep_dir / "cuda" / "summary.json")["status"] == "failed"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_two_sweeps_cannot_share_a_directory(tmp_path):
    """The loser of the lock writes nothing: the winner's multirun.yaml and every other file
    of its directory stay byte for byte (a refused sweep used to delete the winner's
    multirun.yaml when it read none before Hydra wrote its own)."""
    from vitfsdp.launch.resume import SweepLock

    sweep_dir = tmp_path / "sweep"
    lock = SweepLock(sweep_dir).acquire()
    (sweep_dir / "multirun.yaml").write_text("the winner's\n")
    before = _snapshot(sweep_dir)
    try:
        proc = run_module("vitfsdp.sweep", "-m", *FAST, f"hydra.sweep.dir={sweep_dir}",
                          cwd=tmp_path, timeout=120)
    finally:
        lock.release()
    assert proc.returncode == 2, proc.stderr
    assert "another sweep (host " in proc.stderr and "is working in" in proc.stderr
    assert _snapshot(sweep_dir) == before


def test_two_sweeps_started_together_keep_the_winners_files(tmp_path):
    """Two sweeps into one new directory at the same moment: one is refused before it writes
    anything; the other's multirun.yaml is there at the end, its point completed."""
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "vitfsdp.sweep", "-m", *FAST, "train.steps=2",
           "cluster.gpus_per_node=1", f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    loser = outs[[p.returncode for p in procs].index(2)][1]
    assert loser.startswith("error: another sweep (host "), loser
    assert "sweep:" in (sweep_dir / "multirun.yaml").read_text()
    (point,) = _point_dirs(sweep_dir)
    assert json.loads((point / "summary.json").read_text())["status"] == "completed"


#: ``python -m vitfsdp.sweep ARGS``, counting every composition of a sweep point (Hydra's
#: ``ConfigLoaderImpl.load_sweep_config``, which both Hydra's batch check and ours call).
COUNTED_SWEEP = """
import sys
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from vitfsdp import sweep
calls = []
load = ConfigLoaderImpl.load_sweep_config
def counted(self, master_config, sweep_overrides):
    calls.append(tuple(sweep_overrides))
    return load(self, master_config, sweep_overrides)
ConfigLoaderImpl.load_sweep_config = counted
try:
    sweep.main_cli(sys.argv[1:])
finally:
    print("compositions", len(calls), "points", len(set(calls)))
"""


def test_a_sweep_composes_each_point_once(tmp_path):
    """Hydra's basic sweeper composes each batch's points again before the launcher gets them
    (validate_batch_is_legal); the vitfsdp sweeper has composed and validated them already,
    so each point is composed once. --scripts-only: nothing runs."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED_SWEEP, "-m", "cluster=frontier", "cluster.account=x",
         "repeat=0,1,2,3", "--scripts-only", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert proc.returncode == 3, proc.stderr[-3000:]  # scripts written, nothing queued
    assert len(list((tmp_path / "sweep").glob("*/job.sbatch"))) == 4
    assert "compositions 4 points 4" in proc.stdout, proc.stdout[-2000:]


def test_a_swept_repeat_runs_in_rounds(tmp_path):
    """Hydra's own multirun, through the vitfsdp sweeper: ``repeat`` written last still
    varies slowest, so job 0 and 1 are the first round (every node count once) and 2 and 3
    the second. --scripts-only: nothing runs."""
    proc = subprocess.run(
        [sys.executable, "-m", "vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=x",
         "nodes=1,2", "repeat=0,1", "--scripts-only", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-3000:]
    jobs = sorted(d.name for d in (tmp_path / "sweep").iterdir() if d.is_dir())
    assert jobs == ["0_nodes=1,repeat=0", "1_nodes=2,repeat=0", "2_nodes=1,repeat=1",
                    "3_nodes=2,repeat=1"]


def test_a_refusal_shared_by_points_is_said_once(tmp_path):
    """A profile path missing for every point is one line naming how many points it
    refuses, not one line per point; points refused for different reasons keep a line
    each. Nothing is written."""
    def refuse(*overrides):
        proc = subprocess.run(
            [sys.executable, "-m", "vitfsdp.sweep", "-m", "cluster=frontier",
             "cluster.account=x", *overrides, "--scripts-only",
             f"hydra.sweep.dir={tmp_path / 'sweep'}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr[-3000:]
        return [line for line in proc.stderr.splitlines() if line]

    missing = tmp_path / "no-env"
    (line,) = refuse(f"cluster.conda_env={missing}", "nodes=1,2,4")
    assert line == (f"error: every point (3 of 3): cluster.conda_env={missing} is not a "
                    "directory here; fix the path (or set cluster.check_paths=false if it "
                    "exists on the compute nodes only); nothing was launched")
    assert refuse("train.steps=0", "nodes=1,2") == [  # refused as it composes
        "error: every point (2 of 2): train.steps=0 must be >= 1; nothing was launched"]
    lines = refuse("nodes=0,1,-1")
    assert lines == ["error: 2 of 3 sweep points refused, nothing was launched:",
                     "point 0 (cluster=frontier cluster.account=x nodes=0): nodes=0 must be >= 1",
                     "point 2 (cluster=frontier cluster.account=x nodes=-1): nodes=-1 must be "
                     ">= 1"]
    assert not (tmp_path / "sweep").exists()


def test_the_start_line_names_the_emulated_nodes(tmp_path):
    """experiment=demo (nodes apart, a CPU quota a node): the sweep's first line says so;
    the defaults (loopback, shared cores) say nothing of a network."""
    from types import SimpleNamespace

    from vitfsdp.plan.__main__ import compose_points
    from vitfsdp.sweep import where_line

    def line(overrides):
        points = [SimpleNamespace(cfg=cfg) for _, cfg in compose_points(overrides)]
        return where_line(points)

    demo = line(["experiment=demo"])
    assert demo.startswith("runs model=vit_small_patch16_224 data=digits cluster=local: 2-8 "
                           "ranks a point, all as processes on this host"), demo
    assert "CPUs, nodes apart on an emulated 0.5 Gbit/s link with 0.5 CPUs each)" in demo
    assert "nodes apart" not in line(["strategy=DDP", "nodes=1,2"])
    # a GPU cluster's sweep of the default model is told that it is the CPU test model
    assert line(["cluster=cuda8", "nodes=1"]).endswith(
        "none on this host; model=vit_tiny is the CPU test model (4 blocks of width 64, 16 px): "
        "name the study's (model=vit_huge_patch14_224, ...)")
    assert line(["cluster=cuda8", "model=vit_huge", "nodes=1"]).endswith("none on this host")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is visible here")
def test_a_gpu_profile_without_a_gpu_is_a_failed_run_saying_why(tmp_path):
    """A profile that describes GPUs (cluster.device_memory_gib) under device=auto, where
    torch sees none: the run stops at its start and the sweep records it failed, with the
    reason, instead of training on CPU ranks and recording it completed."""
    from vitfsdp.analysis import collect_runs

    proc = run_module("vitfsdp.sweep", "-m", "cluster.device_memory_gib=80",
                      "cluster.gpus_per_node=1", f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path,
                      timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    row = collect_runs(tmp_path / "s").iloc[0]
    assert row["status"] == "failed"
    assert "device=auto: torch " in row["reason"] and "sees no GPU on " in row["reason"]
    assert "but cluster=local describes GPUs (cluster.device_memory_gib=80)" in row["reason"]


def test_repeats_and_node_counts_added_by_later_commands_get_their_own_directories(tmp_path):
    """A run directory's name leaves out the keys a sweep sets to one value, so `repeat=1`
    after a sweep of repeat 0 names its points as the first sweep's (once refused as "a
    different config"): they take the name with every override, and the first points stay."""
    sweep_dir = tmp_path / "sweep"
    first = ["-m", *FAST, "strategy=DDP,FULL_SHARD", f"hydra.sweep.dir={sweep_dir}"]
    proc = run_module("vitfsdp.sweep", *first, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_module("vitfsdp.sweep", *first, "repeat=1", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0_strategy=DDP holds another point's run" in proc.stdout + proc.stderr
    names = sorted(p.name for p in _point_dirs(sweep_dir))
    assert names == ["0_repeat=1,strategy=DDP", "0_strategy=DDP",
                     "1_repeat=1,strategy=FULL_SHARD", "1_strategy=FULL_SHARD"]
    runs = [read(sweep_dir / n / "run.json")["config"]["repeat"] for n in names]
    assert sorted(runs) == [0, 0, 1, 1]
    assert all(read(sweep_dir / n / "summary.json")["status"] == "completed" for n in names)
    commands = [json.loads(line) for line in (sweep_dir / "commands.jsonl").open()]
    assert [c["task"][-1] for c in commands] == ["strategy=DDP,FULL_SHARD", "repeat=1"]
    hashes = {read(sweep_dir / n / "job.json")["config_hash"] for n in names}
    assert set(commands[0]["config_hashes"]) | set(commands[1]["config_hashes"]) == hashes


def test_a_point_that_drops_an_earlier_override_names_the_default_it_runs_at():
    """After a sweep of repeat=1, a command at the default repeat names its point
    `repeat=0` beside `0_strategy=DDP`, not `0_strategy=DDP-2`."""
    from tests.integration.test_slurm_scripts import compose_cfg
    from vitfsdp.sweep.choose import _differ
    from vitfsdp.sweep.point import Point

    p = Point(0, ["strategy=DDP"], compose_cfg("strategy=DDP"), Path("/x"), "h",
              ["strategy=DDP"])
    assert _differ(p, ["strategy=DDP", "repeat=1"]) == ["repeat=0"]
    assert _differ(p, ["strategy=FULL_SHARD"]) == ["strategy=DDP"]
