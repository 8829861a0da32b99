"""``cluster.time=auto`` under a site's queue limits, and the time checks' lines: a Frontier
user's ViT-5B point of 2,000 steps (2.82 h by the plan, auto 5.6 h) was refused for a time
beyond the batch queue's 2 h at 1 node, the fix before suggested auto; the timing-window
warning of a 48-point study came once per point (24 lines). Since a Frontier day-one review
(128-node FULL_SHARD jobs sized 11-26 min by the plan where ORNL's published speed needs
18-29 min, recorded timeout), a step time published for a point's settings is the floor of
auto and of the checks: this ViT-5B point's is ORNL's 48 images/s at 1 node, 5.33 s/step
against the plan's 4.93 (auto 0-06:03:00)."""

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
    assert time_limit_s(planner.auto_time_limit(long)) > 2 * 3600  # 0-06:03:00
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
    02:00:00); now the script asks 2 h, and one line says the point is requeued up to 3
    times (auto's 2x margin and each job's start-up: 4 jobs of 2 h for 0-06:03:00, at ORNL's
    published 5.33 s/step, slower than the plan's 4.93: 3 jobs at the plan's)."""
    proc, out = _sweep(tmp_path, "train.steps=2000", "cluster.time=auto")
    assert proc.returncode == 3, out[-3000:]  # scripts written
    [script] = (tmp_path / "s").glob("*/job.sbatch")
    assert "#SBATCH --time=0-02:00:00\n" in script.read_text()
    [line] = [x for x in out.splitlines() if "will be requeued" in x]
    assert line.endswith(
        "train.steps=2000: the step time published for its settings (ornl_vit_fsdp) gives "
        "3.05 h (5.33 s/step; the plan 4.93; 5.93 h of steps with the 2x margin of "
        "cluster.time=auto, and each job 390 s of start-up and "
        "cluster.signal_delay_s), beyond cluster.time=0-02:00:00 (the longest a job of 1 node "
        "may ask under cluster.queue_limits, to which cluster.time=auto is held): the point "
        "will be requeued up to 3 time(s) from its checkpoint (cluster.max_requeues=3)"), line


@pytest.mark.parametrize("time,fix", [
    ("auto", "use cluster.max_requeues=12 or train.steps<=2553"),
    ("02:00:00", "use cluster.max_requeues=5 or train.steps<=5343"),
    ("00:30:00", "use cluster.time=0-02:00:00 with cluster.max_requeues=5 or "
                 "train.steps<=5343")])
def test_a_run_beyond_the_limit_and_its_requeues_names_what_would_cover_it(tmp_path, time,
                                                                          fix):
    """8,000 steps (11.9 h at ORNL's published 5.33 s/step) do not fit 4 jobs of 2 h: the
    refusal names the limit and the requeues or steps that fit, and no longer suggests
    cluster.time=auto. Auto's jobs are counted with its own margin (13 jobs of 2 h), a time
    typed by hand without it (the user chose it: 6 jobs)."""
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
    (8000, 12, True), (8000, 11, False), (8000, 5, False),  # 5: what the refusal said before
    (2553, 3, True), (2554, 3, False)])
def test_auto_held_to_the_limit_keeps_its_margin(steps, requeues, accepted):
    """The reviewer's 8,000 steps with auto: refused with 'use cluster.max_requeues=5', which
    was then accepted, 6 jobs of 2 h where auto's own time was 0-22:01:00. Now the jobs are
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
    found = re.search(r"a timing window \(train.log_every=5 steps\) takes up to (\d+) s by "
                      r"(?:the plan|the step time published for its settings "
                      r"\(ornl_vit_fsdp\)) \(point \d+: .* at (\d+) of the 48 points: a run "
                      r"the time limit stops may end without a checkpoint \(and not be "
                      r"requeued\); set "
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
    assert resolve_auto_time(cfg)[0] == "0-06:03:00"
    proc, out = _sweep(tmp_path, "cluster.qos=debug", "train.steps=2000", "cluster.time=auto")
    assert proc.returncode == 2, out[-3000:]
    assert proc.stderr.strip().endswith(
        "cluster.time=0-06:03:00 is longer than 02:00:00, the limit of QOS debug "
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
           "(longest: point 1, model=vit_5b: train.steps=3000: the step time published for " \
           "its settings (ornl_vit_fsdp) gives 4.35 h (5.12 s/step; the plan 4.93; " in line
    assert line.endswith("to which cluster.time=auto is held); cluster.max_requeues=4)"), line


def test_auto_in_a_pack_beyond_the_limit_is_refused_saying_packs_are_not_requeued(tmp_path):
    """hydra.launcher.pack=by_nodes: a pack is one job that is not requeued, so auto is not
    held to the limit there and the reviewer's 2,000 steps (0-06:03:00) are refused. Before,
    the refusal said only 'use fewer train.steps', not why the same point runs unpacked; now
    it says a pack is not requeued and to drop hydra.launcher.pack or use fewer steps."""
    proc, out = _sweep(tmp_path, "train.steps=2000", "cluster.time=auto",
                       "hydra.launcher.pack=by_nodes")
    assert proc.returncode == 2, out[-3000:]
    assert proc.stderr.strip().endswith(
        "error: the pack of nodes=1 (1 point of vit_5b) needs 0-06:05:00 (120 s to start and its "
        "points' times), beyond 0-02:00:00, the limit of a job of 1 node(s) "
        "(cluster.queue_limits), and a pack is not requeued (cluster.time=auto is not held to "
        "the limit in one): run its points unpacked (drop hydra.launcher.pack: each is then "
        "held to the limit and requeued from its checkpoint) or with fewer train.steps, or, "
        "where the plan has no time for the point, a shorter cluster.time; nothing was "
        "launched"), proc.stderr[-2000:]


#: The day-one review: 100 steps at 128 nodes, ORNL's study settings.
DAY_ONE = ["cluster=frontier", "cluster.account=stf218", "precision=bf16",
           "train.activation_checkpointing=true", "train.steps=100", "nodes=128",
           "cluster.time=auto"]


def _ornl_ips(model: str, strategy: str, nodes: int) -> float | None:
    """ORNL's published images/s, read here from the CSV (the first row of a node count)."""
    import csv

    from tests.conftest import REPO

    path = REPO / "vitfsdp" / "reference" / "ornl_frontier_2023.csv"
    for r in csv.DictReader(path.open()):
        if (r["metric"], r["model"], r["strategy"], r["nodes"]) == ("ips", model, strategy,
                                                                    str(nodes)):
            return float(r["value"])
    return None


@pytest.mark.parametrize("model", ["vit_1b", "vit_3b", "vit_5b", "vit_15b"])
def test_auto_is_sized_from_the_published_step_where_it_is_slower(model):
    """FULL_SHARD at 128 nodes: the plan's 1.33-13.9 s/step sized vit_1b/3b/5b 11/18/26 min,
    where ORNL's measured images/s with start-up need 18/20/29 min: the jobs hit the limit
    (recorded timeout, 64 node-hours an attempt). Now the published step (the global batch over
    ORNL's images/s, read from the CSV here) is the floor, with auto's usual margin; a point of
    no published row (HYBRID_8GPU of vit_1b) keeps the plan's."""
    from vitfsdp import plan as planner

    cfg = compose_cfg(*DAY_ONE, f"model={model}", "strategy=FULL_SHARD")
    published = 32 * 1024 / _ornl_ips(model, "FULL_SHARD", 128)
    sized = planner.sizing_step(cfg)
    assert sized.published_s == pytest.approx(published) and sized.by_published
    assert sized.step_s == pytest.approx(published)
    assert sized.step_s > sized.predicted_s
    seconds = time_limit_s(planner.auto_time_limit(cfg))
    ornl = 100 * published + planner.STARTUP_S  # ORNL's speed plus start-up
    assert seconds >= ornl + cfg.cluster.signal_delay_s
    low = 100 * published * planner.TIME_SAFETY_FACTOR + planner.STARTUP_S + 90
    assert low <= seconds < low + 60
    other = compose_cfg(*DAY_ONE, "model=vit_1b", "strategy=HYBRID_8GPU")
    assert _ornl_ips("vit_1b", "HYBRID_8GPU", 128) is None
    plain = planner.sizing_step(other)
    assert plain.published_s is None and plain.step_s == plain.predicted_s


def test_the_sweep_says_which_times_are_sized_from_a_published_step(tmp_path):
    """The review's sweep: the script of vit_1b FULL_SHARD at 128 nodes asked 0-00:11:00
    and nothing said why; now it asks for ORNL's 7.99 s/step with auto's margin
    (0-00:34:00), and one line says how many points are sized so and names the largest gap."""
    proc = run_module("vitfsdp.sweep", "-m", *DAY_ONE, "model=vit_1b",
                      "strategy=FULL_SHARD,HYBRID_8GPU", "--scripts-only",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]  # scripts written
    times = {d.name.split("strategy=")[1]: d.joinpath("job.sbatch").read_text()
             for d in (tmp_path / "s").iterdir() if (d / "job.sbatch").exists()}
    assert "#SBATCH --time=0-00:34:00\n" in times["FULL_SHARD"]
    assert "#SBATCH --time=0-00:10:00\n" in times["HYBRID_8GPU"]  # the plan's, no row
    [line] = [x for x in out.splitlines() if "time limits:" in x]
    assert line.endswith(
        "time limits: 1 of the 2 points are sized by the step time published for their "
        "settings on this machine (ornl_vit_fsdp: vitfsdp/reference, the global batch over its "
        "measured images/s), slower than the plan's: cluster.time=auto and the time checks "
        "use it (most, point 0, strategy=FULL_SHARD: 7.99 s/step published, 1.33 s "
        "predicted; cluster.time=0-00:34:00)"), line
