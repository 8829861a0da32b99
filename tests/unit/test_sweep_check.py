"""The sweep's checks of its points (vitfsdp.sweep.check) that need no Slurm: points that
resolve to the same point (repeated_points) and the warning of a checkpoint the wait after
SIGUSR2 is unlikely to hold (the save window)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from vitfsdp.config import RunConfig, to_run_config
from vitfsdp.launch.resume import config_hash
from vitfsdp.sweep.check import _beyond_time_limit, _warn_of_saves, repeated_points
from vitfsdp.sweep.point import Point


def _point(num: int, *overrides: str) -> Point:
    """Point ``num`` of ``overrides`` as the sweep composes it (its config and identity)."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg: RunConfig = to_run_config(compose("config", overrides=list(overrides)))
    return Point(num, list(overrides), cfg, Path(f"/x/{num}"), config_hash(cfg))


def test_hybrid_shard_on_cuda8_is_named_as_hybrid_8gpu():
    """The reviewer's strategy=FULL_SHARD,HYBRID_8GPU,HYBRID_SHARD on cluster=cuda8: refused
    with 'drop the repeated value (repeat=0,1 runs a point twice)', which never said why.
    HYBRID_SHARD's shard group is cluster.gpus_per_node: the line names that and the fix."""
    points = [_point(i, "cluster=cuda8", f"strategy={s}", "nodes=1")
              for i, s in enumerate(["FULL_SHARD", "HYBRID_8GPU", "HYBRID_SHARD"])]
    assert repeated_points(points) == [
        "point 2 (cluster=cuda8 strategy=HYBRID_SHARD nodes=1) is point 1 (cluster=cuda8 "
        "strategy=HYBRID_8GPU nodes=1) again: strategy=HYBRID_SHARD is HYBRID_8GPU on "
        "cluster=cuda8 (shard groups of cluster.gpus_per_node=8): drop one of them"]
    # on a profile of 2 GPUs a node HYBRID_SHARD is HYBRID_2GPU: no line against HYBRID_4GPU
    assert repeated_points([_point(0, "cluster=virtual", "strategy=HYBRID_4GPU", "nodes=2"),
                            _point(1, "cluster=virtual", "strategy=HYBRID_SHARD",
                                   "nodes=2")]) == []


def test_a_true_repeat_keeps_the_general_words_and_other_causes_are_named():
    """nodes=1,1: the same overrides twice, the general fix; nodes=1 against no nodes at all
    (its default): the overrides that resolve to the same config."""
    same = [_point(i, "cluster=cuda8", "nodes=1") for i in range(2)]
    assert repeated_points(same) == [
        "point 1 (cluster=cuda8 nodes=1) is point 0 (cluster=cuda8 nodes=1) again: drop the "
        "repeated value (repeat=0,1 runs a point twice)"]
    default = [_point(0, "cluster=cuda8"), _point(1, "cluster=cuda8", "nodes=1")]
    assert repeated_points(default) == [
        "point 1 (cluster=cuda8 nodes=1) is point 0 (cluster=cuda8) again: nodes=1 and no "
        "override resolve to the same config: drop one of them"]


def _save_warning(caplog, *overrides: str) -> list[str]:
    """The sweep's save-window warning for one Slurm point of ``overrides`` (none: [])."""
    p = _point(0, *overrides)
    warned: dict = {}
    _beyond_time_limit(p, warned)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _warn_of_saves(warned.get("saves", []), 1)
    return [r.getMessage() for r in caplog.records]


CUDA8_3B = ["cluster=cuda8", "model=vit_3b", "strategy=FULL_SHARD", "precision=bf16",
            "train.activation_checkpointing=true", "train.steps=3000"]


@pytest.mark.parametrize(("model", "nodes", "total_gb", "per_node"),
                         [("vit_3b", 1, 36.8, 36.8), ("vit_5b", 1, 64.2, 64.2),
                          ("vit_15b", 4, 176.6, 44.2)])
def test_a_checkpoint_the_save_window_is_unlikely_to_hold_is_warned_of(caplog, model, nodes,
                                                                     total_gb, per_node):
    """ViT-3B's 36.8 GB and ViT-5B's 64.2 GB (fp32 weights and AdamW's moments) in the 75 s
    after SIGUSR2 of the default cluster.signal_delay_s=90: no word before. Now one line with
    the checkpoint's bytes, in all and per node, the assumed rate, and the
    cluster.signal_delay_s that covers it, which then quiets it."""
    overrides = [*CUDA8_3B, f"model={model}", f"nodes={nodes}"]
    [line] = _save_warning(caplog, *overrides)
    assert line.startswith(f"the checkpoint of model={model} is {total_gb:.1f} GB (fp32 "
                           f"weights and AdamW's two moments), {per_node:.1f} GB per node on "
                           f"nodes={nodes}: at an assumed 1 GB/s per node "), line
    assert "the 75 s the training gets after SIGUSR2 (cluster.signal_delay_s=90" in line
    delay = int(re.search(r"set cluster.signal_delay_s=(\d+)$", line)[1])
    assert delay > 90
    assert _save_warning(caplog, *overrides, f"cluster.signal_delay_s={delay}") == []


def test_the_save_rate_is_the_profiles_where_it_gives_one(caplog):
    """The rate was vitfsdp.sweep.check.CHECKPOINT_WRITE_GBPS for every profile (a 10 Gb
    link to NFS, said on every Frontier ViT-5B sweep whose checkpoints go to Lustre), and
    no field could set it. Now cluster.checkpoint_write_gbps: at 20 GB/s a node ViT-5B's
    64.2 GB save fits the wait; at 1.5 GB/s the warning names the field as the rate's source.
    Unset, the line still says the rate is assumed, and how to set it."""
    vit_5b = [*CUDA8_3B, "model=vit_5b", "nodes=1"]
    assert _save_warning(caplog, *vit_5b, "cluster.checkpoint_write_gbps=20") == []
    [line] = _save_warning(caplog, *vit_5b, "cluster.checkpoint_write_gbps=1.5")
    assert ("64.2 GB per node on nodes=1: at 1.5 GB/s per node (cluster.checkpoint_write_gbps "
            "of cluster=cuda8) its save takes 43 s") in line, line
    [line] = _save_warning(caplog, *vit_5b)
    assert ("at an assumed 1 GB/s per node (vitfsdp.sweep.check.CHECKPOINT_WRITE_GBPS: a 10 "
            "Gb Ethernet link to NFS; your file system may differ: cluster=cuda8 gives no "
            "cluster.checkpoint_write_gbps, which a run's logs/task0.log measures, "
            "'checkpoint of step N saved in X s') its save takes 64 s") in line, line
    with pytest.raises(ValueError, match=r"checkpoint_write_gbps=0.0 must be > 0 \(or null"):
        _point(0, *vit_5b, "cluster.checkpoint_write_gbps=0")


@pytest.mark.parametrize("overrides", [
    ["cluster=cuda8", "model=vit_1b", "nodes=1"],  # 11 GB: saved well within the wait
    ["cluster=cuda8", "model=vit_3b", "nodes=4", "strategy=FULL_SHARD"],  # 9.2 GB a node
    *[["cluster=virtual", f"model={m}", "nodes=1"]  # the tests' and CPU presets' models
      for m in ("vit_tiny", "vit_small_patch16_224", "vit_base")]])
def test_small_checkpoints_are_not_warned_of(caplog, overrides):
    assert _save_warning(caplog, *overrides) == []


def test_every_message_names_a_point_by_its_overrides_as_typed():
    """Hydra's sweeper escapes ':' in a value: the 'not ended:' and 'skip' lines said
    cluster.time=03\\:00\\:00 (3b13561 fixed only the queue-limit messages); one label now,
    redacting secrets as before; an escape that changes the value stays."""
    from vitfsdp.sweep.point import _label

    assert _label(["cluster.time=03\\:00\\:00", "nodes=2"]) == "cluster.time=03:00:00 nodes=2"
    assert _label(["x=a\\,b"]) == "x=a\\,b"  # one value; x=a,b would be a sweep
    assert "hunter2" not in _label(["+cluster.env.WANDB_API_KEY=hunter2"])
