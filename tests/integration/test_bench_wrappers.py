"""``python -m vitfsdp.bench wrappers`` (the host cost of DDP, FSDP1 and FSDP2 per step),
FSDP1's ``use_orig_params`` choice (:func:`vitfsdp.parallel.use_orig_params`) and
``strategy.blocks_per_unit``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vitfsdp.bench.wrappers import best_fsdp, paths
from vitfsdp.parallel import StrategyConfig, use_orig_params


def _bench(*args: str) -> subprocess.CompletedProcess:
    """The benchmark in a process of its own (it makes a process group)."""
    return subprocess.run([sys.executable, "-m", "vitfsdp.bench", "wrappers", *args],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_every_path_is_timed_and_fsdp1_runs_the_use_orig_params_it_names(tmp_path):
    out = tmp_path / "wrappers.json"
    proc = _bench("--depth", "3", "--width", "8", "--steps", "2", "--warmup", "0",
                  "--repeats", "1", "--device", "cpu", "--blocks-per-unit", "2",
                  "--compile", "both", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    assert record["units"] == 4 and record["device"] == "cpu"
    assert record["clock"] == "cpu" and "cpu clock" in proc.stdout  # --clock auto on a CPU
    assert list(record["paths"]) == [p.label for p in paths(2, (False, True))]
    for name, path in record["paths"].items():
        assert len(path["step_s"]) == 1 and path["step_s"][0] > 0, name
        assert name in proc.stdout
    p = record["paths"]
    assert p["unwrapped"]["added_ms_per_step"] == 0
    assert p["unwrapped (compiled)"]["added_ms_per_step"] == 0
    applied = {name: path["applied"] for name, path in p.items()}
    assert applied["unwrapped"] == {}
    assert applied["DDP"]["sharding_strategy"] == "DDP"
    assert applied["DDP"]["use_orig_params"] is None and applied["DDP"]["fsdp_units"] is None
    # a world of 1: torch runs NO_SHARD whatever FSDP1 was asked for
    assert applied["FSDP1 orig"]["sharding_strategy"] == "NO_SHARD"
    assert applied["FSDP1 orig"]["use_orig_params"] is True
    assert applied["FSDP1 flat"]["use_orig_params"] is False
    assert applied["FSDP2"]["use_orig_params"] is None
    # 3 blocks, 2 a unit: 2 units (the last holds one block), 3 with the root
    for name in ("FSDP1 orig x2", "FSDP1 flat x2", "FSDP2 x2", "FSDP2 x2 (compiled)"):
        assert applied[name]["fsdp_units"] == 2, name
        assert p[name]["added_us_per_unit"] == pytest.approx(
            p[name]["added_ms_per_step"] * 1e3 / 3), name
    assert applied["FSDP2"]["fsdp_units"] == 3
    assert applied["FSDP2 (compiled)"]["compiled_blocks"] == 3
    # flat parameters cannot compile inside FSDP1: no such path
    assert "FSDP1 flat (compiled)" not in p
    added = p["FSDP1 orig (compiled)"]["median_step_s"] - p["unwrapped (compiled)"]["median_step_s"]
    assert p["FSDP1 orig (compiled)"]["added_ms_per_step"] == pytest.approx(added * 1e3)
    assert p["FSDP2"]["added_us_per_block"] == pytest.approx(
        p["FSDP2"]["added_ms_per_step"] * 1e3 / 3)
    label, best = best_fsdp(record)
    assert best["added_us_per_block"] == min(v["added_us_per_block"] for v in p.values()
                                             if v["applied"].get("fsdp_units"))
    assert f"least added by an FSDP path: {label}," in proc.stdout


def test_bad_arguments_are_refused_in_one_line():
    proc = _bench("--depth", "0")
    assert proc.returncode == 2
    assert "--depth=0 must be >= 1" in proc.stderr


@pytest.mark.parametrize("setting, compiled, expected", [
    (None, False, False),  # uncompiled: the cheaper flat parameters
    (None, True, True),  # compiled blocks: Dynamo needs the original parameters
    (True, False, True),
])  # fmt: skip
def test_use_orig_params_follows_the_setting_else_the_compiled_blocks(setting, compiled,
                                                                      expected):
    assert use_orig_params(StrategyConfig(use_orig_params=setting), compiled) is expected


def test_flat_parameters_with_compiled_blocks_are_refused():
    with pytest.raises(ValueError, match="kernels.compile=false"):
        use_orig_params(StrategyConfig(use_orig_params=False), True)


@pytest.mark.parametrize("strategy, engine", [
    (StrategyConfig(name="DDP", sharding_strategy="DDP", use_orig_params=True), "fsdp1"),
    (StrategyConfig(use_orig_params=False), "fsdp2"),
])  # fmt: skip
def test_use_orig_params_is_refused_where_fsdp1_does_not_run(strategy, engine):
    with pytest.raises(ValueError, match="strategy.use_orig_params applies only to FSDP1"):
        strategy.resolve_for_engine(engine)


def test_blocks_per_unit_is_refused_under_ddp_and_below_one():
    with pytest.raises(ValueError, match="strategy.blocks_per_unit=4 applies only to FSDP"):
        StrategyConfig(name="DDP", sharding_strategy="DDP", blocks_per_unit=4) \
            .resolve_for_engine("fsdp1")
    with pytest.raises(ValueError, match="strategy.blocks_per_unit=0 must be >= 1"):
        StrategyConfig(blocks_per_unit=0)


@pytest.mark.parametrize("depth, k, units", [(32, 1, 32), (32, 4, 8), (12, 5, 3), (4, 8, 1)])
def test_units_hold_k_consecutive_blocks_the_last_the_rest(depth, k, units):
    from vitfsdp.plan.memory import ModelSizes, fsdp_units

    sizes = ModelSizes(num_params=depth * 100 + 7, unit_params=100, num_units=depth)
    assert fsdp_units(sizes, k) == (units, min(k, depth) * 100)
