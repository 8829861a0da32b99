"""``cluster.time=auto`` under a site's queue limits, and the time checks' lines: a Frontier
user's ViT-5B point of 2,000 steps (2.82 h by the plan, auto 5.6 h) was refused for a time
beyond the batch queue's 2 h at 1 node, the fix before suggested auto; the timing-window
warning of a 48-point study came once per point (24 lines)."""

from __future__ import annotations

import pytest

from tests.conftest import run_module
from tests.integration.test_slurm_scripts import compose_cfg
from vitfsdp.launch import time_limit_s

#: The reviewer's point: 4.93 s/step by the plan on one Frontier node.
VIT_5B = ["cluster=frontier", "cluster.account=stf218", "model=vit_5b", "strategy=HYBRID_8GPU",
          "train.activation_checkpointing=true", "nodes=1"]


def test_auto_is_held_to_the_queue_limit_of_its_node_count():
    """auto: the plan's time where the queue allows it (100 steps), else the queue's limit
    for the node count (2 h up to 91 nodes, 6 h up to 183, Frontier's batch queue)."""
    from vitfsdp import plan as planner
    from vitfsdp.sweep.compose import resolve_auto_time

    short = compose_cfg(*VIT_5B, "train.steps=100", "cluster.time=auto")
    assert resolve_auto_time(short)[0] == planner.auto_time_limit(short)
    assert time_limit_s(resolve_auto_time(short)[0]) < 2 * 3600
    long = compose_cfg(*VIT_5B, "train.steps=2000", "cluster.time=auto")
    assert time_limit_s(planner.auto_time_limit(long)) > 2 * 3600  # 0-05:36:00
    assert resolve_auto_time(long)[0] == "0-02:00:00"
    for nodes, cap in ((91, "0-02:00:00"), (92, "0-06:00:00")):
        cfg = compose_cfg(*VIT_5B, "train.steps=200000", f"nodes={nodes}", "cluster.time=auto")
        assert resolve_auto_time(cfg)[0] == cap


def _sweep(tmp_path, *overrides):
    proc = run_module("vitfsdp.sweep", "-m", *VIT_5B, *overrides, "--scripts-only",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path, timeout=300)
    return proc, proc.stdout + proc.stderr


def test_auto_beyond_the_queue_limit_is_written_with_requeues(tmp_path):
    """The reviewer's command with cluster.time=auto: refused before (0-05:36:00 beyond
    02:00:00); now the script asks 2 h, and one line says the point is requeued up to twice
    (auto's 2x margin and each job's start-up: 3 jobs of 2 h for 0-05:36:00)."""
    proc, out = _sweep(tmp_path, "train.steps=2000", "cluster.time=auto")
    assert proc.returncode == 3, out[-3000:]  # scripts written
    [script] = (tmp_path / "s").glob("*/job.sbatch")
    assert "#SBATCH --time=0-02:00:00\n" in script.read_text()
    [line] = [x for x in out.splitlines() if "the plan predicts" in x]
    assert line.endswith(
        "train.steps=2000: the plan predicts 2.82 h (4.93 s/step; 5.48 h of steps with the "
        "2x margin of cluster.time=auto, and each job 390 s of start-up and "
        "cluster.signal_delay_s), beyond cluster.time=0-02:00:00 (the longest a job of 1 node "
        "may ask under cluster.queue_limits, to which cluster.time=auto is held): the point "
        "will be requeued up to 2 time(s) from its checkpoint (cluster.max_requeues=3)"), line


@pytest.mark.parametrize("time,fix", [
    ("auto", "use cluster.max_requeues=11 or train.steps<=2763"),
    ("02:00:00", "use cluster.max_requeues=5 or train.steps<=5781"),
    ("00:30:00", "use cluster.time=0-02:00:00 with cluster.max_requeues=5 or "
                 "train.steps<=5781")])
def test_a_run_beyond_the_limit_and_its_requeues_names_what_would_cover_it(tmp_path, time,
                                                                          fix):
    """8,000 steps (11 h) do not fit 4 jobs of 2 h: the refusal names the limit and the
    requeues or steps that fit, and no longer suggests cluster.time=auto. Auto's jobs are
    counted with its own margin (0-22:01:00 uncapped: 12 jobs of 2 h), a time typed by hand
    without it (the user chose it: 6 jobs)."""
    proc, out = _sweep(tmp_path, "train.steps=8000", f"cluster.time={time}")
    assert proc.returncode == 2, out[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.endswith(f"allows with cluster.max_requeues=3; {fix}; nothing was launched"), line
    assert "or cluster.time=auto" not in line
    if time != "00:30:00":
        assert "(the longest a job of 1 node may ask under cluster.queue_limits" in line


@pytest.mark.parametrize("steps,time,fix", [
    (2000, "00:30:00", "use a longer cluster.time (at most 0-02:00:00), cluster.time=auto, or "
                       "fewer train.steps"),
    (3000, "01:00:00", "use a longer cluster.time (at most 0-02:00:00), or fewer train.steps")])
def test_a_shorter_time_that_the_limit_covers_suggests_auto_where_auto_covers_it(
        tmp_path, steps, time, fix):
    """2,000 steps (2.8 h) in 4 jobs of 30 min: a longer time or auto (3 jobs of 2 h with its
    margin) covers it. 3,000 steps (4.2 h) in 4 jobs of 1 h: 2 h covers it, auto (8.2 h of
    steps with its margin, 5 jobs) would be refused, so it is not suggested."""
    proc, out = _sweep(tmp_path, f"train.steps={steps}", f"cluster.time={time}")
    assert proc.returncode == 2, out[-3000:]
    assert proc.stderr.strip().endswith(f"{fix}; nothing was launched"), proc.stderr[-2000:]


def _checked(*overrides):
    """The reviewer's point as the sweep checks it (``cluster.time=auto`` resolved as
    :func:`vitfsdp.sweep.compose._compose_point` does): its refusal, or None and its lines."""
    from pathlib import Path

    from vitfsdp.sweep.check import _beyond_time_limit
    from vitfsdp.sweep.compose import resolve_auto_time
    from vitfsdp.sweep.point import Point

    cfg = compose_cfg(*VIT_5B, *overrides)
    held = False
    if cfg.cluster.time == "auto":
        cfg.cluster.time, held = resolve_auto_time(cfg)
    warned: dict = {}
    return _beyond_time_limit(Point(0, [], cfg, Path("/x"), auto_held=held), warned), cfg


@pytest.mark.parametrize("steps,requeues,accepted", [
    (8000, 11, True), (8000, 10, False), (8000, 5, False),  # 5: what the refusal said before
    (2763, 3, True), (2764, 3, False)])
def test_auto_held_to_the_limit_keeps_its_margin(steps, requeues, accepted):
    """The reviewer's 8,000 steps with auto: refused with 'use cluster.max_requeues=5', which
    was then accepted, 6 jobs of 2 h where auto's own time is 0-22:01:00. Now the jobs are
    counted on the steps × the 2x margin with each job's start-up and signal delay, the
    suggestion by the same rule: what it names is accepted, one requeue or step less is not,
    and the jobs it allows cover auto's uncapped time."""
    from vitfsdp import plan as planner

    refusal, cfg = _checked(f"train.steps={steps}", f"cluster.max_requeues={requeues}",
                            "cluster.time=auto")
    assert (refusal is None) == accepted, refusal
    if accepted:
        uncapped = time_limit_s(planner.auto_time_limit(cfg))
        assert (requeues + 1) * cfg.cluster.time_limit_s >= uncapped


def test_a_time_typed_by_hand_keeps_the_plain_rule():
    """cluster.time=02:00:00 typed by hand (the queue's limit too) is the user's choice: the
    plan's time without auto's margin, start-up once (6 jobs for 8,000 steps)."""
    assert _checked("train.steps=8000", "cluster.max_requeues=5",
                    "cluster.time=02:00:00")[0] is None
    # typed as auto writes the cap: still the user's time (before, recognised by its text
    # as auto's, it was held to auto's margin and refused)
    assert _checked("train.steps=8000", "cluster.max_requeues=5",
                    "cluster.time=0-02:00:00")[0] is None


def test_a_long_timing_window_is_warned_of_once_for_the_sweep(tmp_path):
    """The reviewer's study (48 points, cluster.time=auto): 24 points' windows of 5 steps
    outlast the 75 s after SIGUSR2 with auto's margin. One line before was printed per point
    (66 s and 67 s told apart); now one line gives the longest window, the signal_delay_s
    that covers them all, and how many points it concerns."""
    import re

    proc = run_module("vitfsdp.sweep", "experiment=ornl_frontier_weak_large", "cluster=frontier",
                      "cluster.account=stf218", "--scripts-only", f"hydra.sweep.dir={tmp_path}/s",
                      cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]  # scripts written
    [line] = [x for x in out.splitlines() if "a timing window" in x]
    found = re.search(r"a timing window \(train.log_every=5 steps\) takes up to (\d+) s by the "
                      r"plan \(point \d+: .* at (\d+) of the 48 points: a run the time limit "
                      r"stops may end without a checkpoint \(and not be requeued\); set "
                      r"cluster.signal_delay_s above (\d+) s plus the save \(it covers all "
                      r"(\d+)\), or a smaller train.log_every$", line)
    assert found, line
    window, points, delay, covered = map(int, found.groups())
    assert 1 < points == covered < 48 and delay >= 2 * window + 15 - 1, line


def test_auto_under_a_qos_that_forbids_chaining_is_not_held_to_its_limit(tmp_path):
    """Frontier's debug QOS forbids chaining jobs, and a requeue is a second job: the
    reviewer's 2,000 steps with cluster.time=auto and cluster.qos=debug were written asking
    2 h, 'the point will be requeued 1 time(s)'. Now auto keeps the plan's time there and the
    point is refused with the words a time typed beyond the limit gets; 100 steps (one job)
    are written as before."""
    from vitfsdp.sweep.compose import resolve_auto_time

    cfg = compose_cfg(*VIT_5B, "cluster.qos=debug", "train.steps=2000", "cluster.time=auto")
    assert resolve_auto_time(cfg)[0] == "0-05:36:00"
    proc, out = _sweep(tmp_path, "cluster.qos=debug", "train.steps=2000", "cluster.time=auto")
    assert proc.returncode == 2, out[-3000:]
    assert proc.stderr.strip().endswith(
        "cluster.time=0-05:36:00 is longer than 02:00:00, the limit of QOS debug "
        "(cluster.queue_limits[4]); use cluster.time<=02:00:00, or another partition/QOS; "
        "nothing was launched"), proc.stderr[-2000:]
    assert "requeued" not in out
    proc, out = _sweep(tmp_path, "cluster.qos=debug", "train.steps=100", "cluster.time=auto")
    assert proc.returncode == 3, out[-3000:]  # scripts written


def test_the_requeued_points_of_a_sweep_are_said_once_by_the_longest(tmp_path):
    """The reviewer's sweep of vit_3b and vit_5b (FULL_SHARD, 3,000 steps, cluster.time=auto)
    printed one line, the first point's ('the plan predicts 2.42 h ... requeued 1 time(s)'):
    keyed by the time, which every capped point shares, it spoke for vit_5b's 4.19 h too.
    Now one line for the sweep: how many points, the most requeues, and the point that needs
    them."""
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=stf218",
                      "model=vit_3b,vit_5b", "strategy=FULL_SHARD", "nodes=1",
                      "train.steps=3000", "train.activation_checkpointing=true",
                      "cluster.time=auto", "cluster.max_requeues=4", "--scripts-only",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]  # scripts written
    [line] = [x for x in out.splitlines() if "will be requeued" in x]
    assert "] 2 of the 2 points will be requeued up to 4 time(s) from their checkpoints " \
           "(longest: point 1, model=vit_5b: train.steps=3000: the plan predicts 4.19 h " in line
    assert line.endswith("to which cluster.time=auto is held); cluster.max_requeues=4)"), line


def test_auto_in_a_pack_beyond_the_limit_is_refused_saying_packs_are_not_requeued(tmp_path):
    """hydra.launcher.pack=by_nodes: a pack is one job that is not requeued, so auto is not
    held to the limit there and the reviewer's 2,000 steps (0-05:36:00) are refused. Before,
    the refusal said only 'use fewer train.steps', not why the same point runs unpacked; now
    it says a pack is not requeued and to drop hydra.launcher.pack or use fewer steps."""
    proc, out = _sweep(tmp_path, "train.steps=2000", "cluster.time=auto",
                       "hydra.launcher.pack=by_nodes")
    assert proc.returncode == 2, out[-3000:]
    assert proc.stderr.strip().endswith(
        "error: the pack of nodes=1 (1 point of vit_5b) needs 0-05:38:00 (120 s to start and its "
        "points' times), beyond 0-02:00:00, the limit of a job of 1 node(s) "
        "(cluster.queue_limits), and a pack is not requeued (cluster.time=auto is not held to "
        "the limit in one): run its points unpacked (drop hydra.launcher.pack: each is then "
        "held to the limit and requeued from its checkpoint) or with fewer train.steps, or, "
        "where the plan has no time for the point, a shorter cluster.time; nothing was "
        "launched"), proc.stderr[-2000:]
