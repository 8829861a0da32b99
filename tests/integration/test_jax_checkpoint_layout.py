"""JAX checkpoints across the padded layout (:func:`vitfsdp.jax.sharding.stored_shape`), on
8 virtual CPU devices in this process: a checkpoint saved before it (its parameters with no
dimension the shard group divides stored whole, no ``state_layout`` in meta.json) is refused
before orbax reads it, with a one-line reason the run records; one whose shapes this code
stores as they are restores."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it
import jax
import optax

from vitfsdp import checkpoint, failures
from vitfsdp.config import RunConfig, to_run_config
from vitfsdp.distributed import DistEnv
from vitfsdp.jax import checkpoint as jckpt
from vitfsdp.jax import sharding
from vitfsdp.jax import train as jtrain
from vitfsdp.jax.model import build_model
from vitfsdp.records import read_json

jax.config.update("jax_num_cpu_devices", 8)  # as the other test_jax files: one setting

#: FULL_SHARD over 8 devices, 10 classes: the head's bias (10,) has no dimension 8 divides.
OVERRIDES = ["framework=jax", "model=vit_tiny", "data=digits", "device=cpu", "precision=fp32",
             "nodes=4", "cluster.gpus_per_node=2", "train.steps=4", "train.warmup_steps=1",
             "train.log_every=2", "train.local_batch_size=2"]


def _cfg(*overrides: str) -> RunConfig:
    from hydra import compose, initialize_config_dir

    from vitfsdp.config import CONF_DIR, register_configs

    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return to_run_config(compose("config", overrides=[*OVERRIDES, *overrides]))


def _save_before_padding(run_dir, cfg: RunConfig, monkeypatch) -> dict:
    """Save the initial state as the code before the padded layout did: every parameter in
    its own shape (stored_shape the identity), meta.json without ``state_layout``; returns
    the state saved."""
    model = build_model(cfg.model, cfg.num_classes, precision="fp32")
    tx = optax.adamw(cfg.train.lr, weight_decay=cfg.train.weight_decay)
    mesh = sharding.make_mesh(cfg.strategy)
    with monkeypatch.context() as m:
        m.setattr(sharding, "stored_shape", lambda shape, mesh: tuple(shape))
        state, _ = jtrain.init_state(model, tx, mesh, cfg.train.seed)
    jckpt.save(run_dir, 2, state, cfg=cfg, attempt=0)
    meta_file = run_dir / checkpoint.CHECKPOINT_DIR / checkpoint.META_FILE
    meta = json.loads(meta_file.read_text())
    meta.pop("state_layout", None)
    meta_file.write_text(json.dumps(meta))
    return state


def test_checkpoint_before_padded_layout_is_refused_and_recorded(tmp_path, monkeypatch):
    cfg = _cfg("strategy=FULL_SHARD")
    state = _save_before_padding(tmp_path, cfg, monkeypatch)
    assert state["params"]["head"]["bias"].shape == (10,)  # whole: the old layout
    with pytest.raises(failures.RunFailed) as e:  # recorded as a torch run's failures are
        jtrain.run(cfg, DistEnv(), tmp_path)
    assert isinstance(e.value.__cause__, ValueError)
    message = str(e.value.__cause__)
    ckpt = tmp_path / checkpoint.CHECKPOINT_DIR
    assert message.startswith(f"{ckpt} was saved before the padded layout")
    assert "params/head/bias: saved (10,), stored now as (16,)" in message
    assert "remove that folder to start the run afresh" in message
    assert "--rerun-failed" in message and "\n" not in message
    summary = read_json(tmp_path / "summary.json")
    assert summary["status"] == "failed" and summary["reason"].startswith(
        f"raised on rank 0 (ranks 0) at step 3: ValueError: {message}\n")
    assert summary["num_attempts"] == 2 and summary["last_step"] == 2
    assert (ckpt / checkpoint.META_FILE).is_file()  # kept: removing it is the user's call


def test_checkpoint_of_unchanged_shapes_restores_without_layout(tmp_path, monkeypatch):
    """DDP stores every parameter whole in both layouts: a checkpoint saved before the
    padded layout holds the shapes this code stores and restores as it was."""
    cfg = _cfg("strategy=DDP")
    state = _save_before_padding(tmp_path, cfg, monkeypatch)
    model = build_model(cfg.model, cfg.num_classes, precision="fp32")
    tx = optax.adamw(cfg.train.lr, weight_decay=cfg.train.weight_decay)
    target, _ = jtrain.state_layout(model, tx, sharding.make_mesh(cfg.strategy), 0)
    restored = jckpt.load(tmp_path, target)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_padded_checkpoint_restores(tmp_path):
    cfg = _cfg("strategy=FULL_SHARD")
    model = build_model(cfg.model, cfg.num_classes, precision="fp32")
    tx = optax.adamw(cfg.train.lr, weight_decay=cfg.train.weight_decay)
    mesh = sharding.make_mesh(cfg.strategy)
    state, _ = jtrain.init_state(model, tx, mesh, cfg.train.seed)
    assert state["params"]["head"]["bias"].shape == (16,)  # flat, zero-padded
    jckpt.save(tmp_path, 2, state, cfg=cfg, attempt=0)
    meta = read_json(tmp_path / checkpoint.CHECKPOINT_DIR / checkpoint.META_FILE)
    assert meta["state_layout"] == jckpt.STATE_LAYOUT
    target, _ = jtrain.state_layout(model, tx, mesh, cfg.train.seed)
    restored = jckpt.load(tmp_path, target)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        assert a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_failure_records_the_last_step_that_ran_not_the_last_dispatched(tmp_path,
                                                                          monkeypatch):
    """JAX returns from a step once it is dispatched; a failure in it (a peer lost in its
    collective) surfaces where the window's meter waits for the results. The summary's
    last_step is the last window's end that finished (1), not the last step dispatched (3,
    before)."""
    cfg = _cfg("strategy=DDP")
    calls = {"n": 0}
    stop = jtrain.JaxWindowMeter.stop

    def failing_stop(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the second window (steps 2-3)
            raise RuntimeError("Gloo all-reduce failed: Connection reset by peer")
        return stop(self, *args, **kwargs)

    monkeypatch.setattr(jtrain.JaxWindowMeter, "stop", failing_stop)
    with pytest.raises(failures.RunFailed, match="Connection reset by peer"):
        jtrain.run(cfg, DistEnv(), tmp_path)
    summary = read_json(tmp_path / "summary.json")
    assert summary["status"] == "failed" and summary["last_step"] == 1
