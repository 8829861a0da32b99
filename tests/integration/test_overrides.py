"""The sweep's and the plan's override expansion (:func:`vitfsdp.overrides.expand`) gives
exactly the points of Hydra's own basic sweeper, in its order, but for ``repeat``, the
slowest axis wherever it is written (the vitfsdp sweeper's rounds)."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # the reference
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from vitfsdp.config import CONF_DIR
from vitfsdp.overrides import expand


@pytest.fixture(scope="module")
def config_loader():
    """Hydra's config loader over conf/ (lists a group's options for glob)."""
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        yield GlobalHydra.instance().config_loader()


def hydra_points(overrides: list[str], config_loader, sweeper=BasicSweeper) -> list[list[str]]:
    """What Hydra's BasicSweeper (or ``sweeper``) runs for ``overrides``: its batches,
    flattened."""
    parsed = OverridesParser.create(config_loader=config_loader).parse_overrides(overrides)
    return [point for batch in sweeper.split_arguments(parsed, None) for point in batch]


TABLE = [
    pytest.param([], id="no overrides"),
    pytest.param(["nodes=2"], id="one value"),
    pytest.param(["strategy=FULL_SHARD,DDP", "nodes=1,2,4"], id="product"),
    pytest.param(["nodes=1,2", "model=vit_tiny", "strategy=DDP,FULL_SHARD"], id="fixed between"),
    pytest.param(["nodes=range(1,4)", "train.seed=range(0,6,2)"], id="range"),
    pytest.param(["train.lr=range(0.1,0.4,0.1)"], id="float range"),
    pytest.param(["nodes=range(3,0,-1)"], id="descending range"),
    pytest.param(["model=choice(vit_tiny,vit_base)", "train.steps=choice(10)"], id="choice"),
    pytest.param(["model=glob(vit_*)"], id="glob"),
    pytest.param(["model=glob(*,exclude=[vit_1*,vit_b*])", "nodes=1,2"], id="glob exclude"),
    pytest.param(["cluster.account='a,b'"], id="quoted comma"),
    pytest.param(["cluster.account='a,b',\"c d\",e", "nodes=1,2"], id="quoted sweep"),
    pytest.param(["cluster.account=a\\,b,c"], id="escaped comma"),
    pytest.param(["+cluster.env.NAME=x,y", "++train.seed=3"], id="add and force-add"),
    pytest.param(["~cluster.partition", "nodes=1,2"], id="delete"),
    pytest.param(["~cluster.partition=debug"], id="delete with value"),
    pytest.param(["nodes=1,2", "strategy=DDP", "nodes=4,8"], id="key twice: last value"),
    pytest.param(["cluster.sbatch_args=['--a=1','--b=2']", "nodes=1,2"], id="list value"),
    pytest.param(["cluster.sbatch_args=[a],[b,c]"], id="sweep of lists"),
    pytest.param(["cluster.env={A:1,B:'x,y'}"], id="dict value"),
    pytest.param(["model@hydra.foo=vit_base,vit_tiny"], id="package"),
    pytest.param(["cluster.time=null,'00:10:00'", "precision=bf16,fp32"], id="null and time"),
    pytest.param(["hydra.launcher.detach=true", "nodes=1,2"], id="hydra key"),
    pytest.param(["train.lr=1e-3,2e-3", "kernels.compile=true,false"], id="floats and bools"),
]


@pytest.mark.parametrize("overrides", TABLE)
def test_expand_is_hydras_basic_sweeper(overrides, config_loader):
    want = hydra_points(overrides, config_loader)
    assert expand(overrides, config_loader) == want
    if not any("glob(" in o for o in overrides):  # a glob alone needs the loader
        assert expand(overrides) == want


def test_expand_orders_the_first_axis_slowest():
    assert expand(["model=a,b", "nodes=range(1,3)", "train.seed=0"]) == [
        ["model=a", "nodes=1", "train.seed=0"], ["model=a", "nodes=2", "train.seed=0"],
        ["model=b", "nodes=1", "train.seed=0"], ["model=b", "nodes=2", "train.seed=0"]]


@pytest.mark.parametrize("overrides", [
    ["nodes=1,2", "repeat=0,1"], ["repeat=range(0,3)", "strategy=DDP,FULL_SHARD", "nodes=1,2"],
    ["nodes=1,2", "repeat=0,1", "repeat=5,6"], ["nodes=1,2", "repeat=0"],
])  # fmt: skip
def test_repeats_run_in_rounds_every_point_once_then_again(overrides, config_loader):
    """``repeat`` is the slowest axis wherever it is written: every point runs once before
    any runs twice, so drift over the sweep spreads over repeats; the points are Hydra's."""
    from hydra_plugins.vitfsdp_launcher.vitfsdp_sweeper import VitfsdpSweeper

    points = expand(overrides, config_loader)
    assert points == hydra_points(overrides, config_loader, VitfsdpSweeper)
    assert sorted(map(sorted, points)) == sorted(map(sorted, hydra_points(overrides,
                                                                           config_loader)))
    rounds = [next(o for o in p if o.startswith("repeat=")) for p in points]
    per_round = len(points) // len(set(rounds))
    assert all(len(set(rounds[i:i + per_round])) == 1 for i in range(0, len(points), per_round))


def test_shuffled_sweep_holds_the_same_points(config_loader):
    overrides = ["nodes=shuffle(1,2,4,8)", "model=vit_tiny,vit_base"]
    assert sorted(expand(overrides)) == sorted(hydra_points(overrides, config_loader))


@pytest.mark.parametrize(("overrides", "message"), [
    (["nodes=1,,2"], "nodes=1,,2"),
    (["train.lr=interval(0.1,1)"], "train.lr=interval(0.1,1): an interval has no list"),
    (["model=glob(vit_*)"], "model=glob(vit_*): ConfigLoader is not set"),
])
def test_expand_refuses_in_one_line(overrides, message):
    with pytest.raises(ValueError) as err:
        expand(overrides)
    assert message in str(err.value) and "\n" not in str(err.value)
