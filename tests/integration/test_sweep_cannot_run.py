"""A sweep's cross product holding points that cannot run (HYBRID_16GPU at one node of 8
ranks: shard groups larger than the world) skips them as data, as the plan lists them n/a
(vitfsdp/plan/impossible.py), and runs the others; where no point can run (the one point
asked for, or every point) the sweep is refused in one line, exit 2. With --scripts-only on
cluster=cuda8: nothing is queued, and the jobs' interpreter is this one."""

from __future__ import annotations

import json

from tests.conftest import run_module
from vitfsdp.sweep import EXIT_NOT_COMPLETED, EXIT_REFUSED

CUDA8 = ["model=vit_5b", "cluster=cuda8", "cluster.partition=gpu", "--scripts-only"]
REFUSAL = ("strategy=HYBRID_16GPU (strategy.shard_group_size=16): HYBRID_SHARD needs shard "
           "groups of 16 ranks, but a node has 8 ranks (world 8)")
LINE = ("skipped 1 point that cannot run: HYBRID_16GPU at 1 node (shard groups of 16 ranks > "
        "8 ranks at 1 node)")


def test_a_point_that_cannot_run_is_skipped_and_recorded(tmp_path):
    sweep_dir = tmp_path / "s"
    args = ["-m", *CUDA8, "strategy=FULL_SHARD,HYBRID_16GPU", "nodes=1,2",
            f"hydra.sweep.dir={sweep_dir}"]
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    # a point skipped as data ends the sweep as a skipped_infeasible point does
    assert proc.returncode == EXIT_NOT_COMPLETED, out[-3000:]
    assert out.count(LINE) == 1, out[-3000:]
    # said before anything is written
    assert out.index(LINE) < out.index("wrote 3 job scripts (a point each)")
    dirs = sorted(d.name for d in sweep_dir.iterdir() if d.is_dir() and d.name[0].isdigit())
    assert dirs == ["0_nodes=1,strategy=FULL_SHARD", "1_nodes=2,strategy=FULL_SHARD",
                    "2_nodes=1,strategy=HYBRID_16GPU", "3_nodes=2,strategy=HYBRID_16GPU"]
    skipped = sweep_dir / dirs[2]
    scripts = [d for d in dirs if (sweep_dir / d / "job.sbatch").is_file()]
    assert scripts == [dirs[0], dirs[1], dirs[3]]
    summary = json.loads((skipped / "summary.json").read_text())
    assert summary["status"] == "skipped_infeasible"
    assert summary["reason"].startswith(f"cannot run: {REFUSAL}"), summary["reason"]
    run = json.loads((skipped / "run.json").read_text())
    assert run["status"] == "skipped_infeasible" and run["config"]["nodes"] == 1
    assert run["config"]["strategy"]["name"] == "HYBRID_16GPU"
    job = json.loads((skipped / "job.json").read_text())
    assert "config_hash" not in job  # no rerun takes it for a run of its own
    assert f"skipped_infeasible strategy=HYBRID_16GPU nodes=1: cannot run: {REFUSAL}" in out
    # --status names it with its reason, and says no flag runs it
    status = run_module("vitfsdp.sweep", "--status", str(sweep_dir), cwd=tmp_path, timeout=120)
    assert "1 skipped_infeasible point (2 nodes=1 strategy=HYBRID_16GPU) cannot run" \
        in status.stdout, status.stdout + status.stderr
    assert f"2 nodes=1 strategy=HYBRID_16GPU: cannot run: {REFUSAL}" in status.stdout
    # a rerun skips it again, as data: no script for it, its records written anew
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=300)
    assert proc.returncode == EXIT_NOT_COMPLETED, proc.stderr[-3000:]
    assert (proc.stdout + proc.stderr).count(LINE) == 1
    assert not (skipped / "job.sbatch").exists()
    assert json.loads((skipped / "summary.json").read_text())["status"] == "skipped_infeasible"


def refused(tmp_path, *overrides) -> str:
    """The one line of a refused sweep (exit 2, no sweep directory)."""
    proc = run_module("vitfsdp.sweep", "-m", *CUDA8, *overrides,
                      f"hydra.sweep.dir={tmp_path / 's'}", cwd=tmp_path, timeout=300)
    assert proc.returncode == EXIT_REFUSED, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "s").exists()
    return lines[0]


def test_no_point_that_can_run_is_refused_in_one_line(tmp_path):
    # every point of the cross product cannot run: named with the first one's reason
    line = refused(tmp_path, "model=vit_5b,vit_tiny", "strategy=HYBRID_16GPU", "nodes=1")
    assert line.startswith("error: none of the 2 points can run; point 0 (model=vit_5b "
                           f"cluster=cuda8 cluster.partition=gpu strategy=HYBRID_16GPU "
                           f"nodes=1): {REFUSAL}"), line
    assert line.endswith("; nothing was launched"), line
    # the one point asked for: refused as it always was
    line = refused(tmp_path, "strategy=HYBRID_16GPU", "nodes=1")
    assert line.startswith(f"error: {REFUSAL}"), line
    # a value out of range among points that can run is still refused (not skipped)
    line = refused(tmp_path, "strategy=FULL_SHARD", "nodes=0,1")
    assert "nodes=0 must be >= 1" in line and "cannot run" not in line, line
