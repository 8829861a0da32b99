"""Sharding layouts of the JAX strategies on 8 virtual CPU devices in this process (the XLA
host platform device count; no mocks): meshes, parameter and AdamW layouts, the collectives
XLA compiles for each strategy, equal training across layouts, and a whole run's records."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it
import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec as P

from vitfsdp import models
from vitfsdp.config import RunConfig, to_run_config
from vitfsdp.core.mesh import REPLICATE_AXIS, SHARD_AXIS
from vitfsdp.distributed import DistEnv
from vitfsdp.jax import sharding
from vitfsdp.jax import train as jtrain
from vitfsdp.jax.model import build_model, param_shapes
from vitfsdp.parallel import StrategyConfig
from vitfsdp.records import read_json, read_jsonl

jax.config.update("jax_num_cpu_devices", 8)  # == XLA_FLAGS=--xla_force_host_platform_device_count=8

STRATEGIES = {
    "DDP": StrategyConfig("DDP", "DDP"),
    "FULL_SHARD": StrategyConfig("FULL_SHARD", "FULL_SHARD"),
    "HYBRID_1GPU": StrategyConfig("HYBRID_1GPU", "HYBRID_SHARD", shard_group_size=1),
    "HYBRID_2GPU": StrategyConfig("HYBRID_2GPU", "HYBRID_SHARD", shard_group_size=2),
    "HYBRID_8GPU": StrategyConfig("HYBRID_8GPU", "HYBRID_SHARD", shard_group_size=8),
}
#: (replicate, shard) mesh shape of each strategy over 8 devices.
MESHES = {"DDP": (8, 1), "FULL_SHARD": (1, 8), "HYBRID_1GPU": (8, 1), "HYBRID_2GPU": (4, 2),
          "HYBRID_8GPU": (1, 8)}


def _tiny(num_classes=10):
    """vit_tiny cut to one block: every kind of parameter, a quarter of the compile time."""
    return build_model(models.ModelConfig("vit_tiny"), num_classes).clone(depth=1)


#: Strategies whose layouts differ (HYBRID_1GPU is DDP's, HYBRID_8GPU FULL_SHARD's on 8).
LAYOUTS = ("DDP", "FULL_SHARD", "HYBRID_2GPU")


@pytest.fixture(scope="module")
def states():
    """The initial train state of the tiny model under each layout."""
    tx = optax.adamw(1e-3)
    out = {}
    for name in LAYOUTS:
        mesh = sharding.make_mesh(STRATEGIES[name])
        out[name] = (mesh, *jtrain.init_state(_tiny(), tx, mesh, seed=0))
    return out


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_mesh_shape_and_rank_order(name):
    mesh = sharding.make_mesh(STRATEGIES[name])
    assert mesh.axis_names == (REPLICATE_AXIS, SHARD_AXIS) == ("replicate", "shard")
    assert tuple(mesh.devices.shape) == MESHES[name]
    # shard groups are consecutive ranks: row r holds devices r*k .. r*k+k-1
    assert [d.id for d in mesh.devices.flat] == sorted(d.id for d in jax.devices())


def test_param_spec_rule():
    mesh = sharding.make_mesh(STRATEGIES["FULL_SHARD"])
    assert sharding.param_spec((64, 192), mesh) == P(None, SHARD_AXIS)  # largest divisible dim
    assert sharding.param_spec((192, 64), mesh) == P(SHARD_AXIS)
    assert sharding.param_spec((64,), mesh) == P(SHARD_AXIS)
    assert sharding.param_spec((10,), mesh) == P()  # 10 classes: no dim 8 divides
    assert sharding.param_spec((), mesh) == P()  # AdamW's step count
    assert sharding.param_spec((4, 4, 3, 64), mesh) == P(None, None, None, SHARD_AXIS)
    assert sharding.param_spec((1, 17, 64), mesh) == P(None, None, SHARD_AXIS)
    ddp = sharding.make_mesh(STRATEGIES["DDP"])
    assert sharding.param_spec((64, 192), ddp) == P()


@pytest.mark.parametrize("name", LAYOUTS)
def test_params_and_adamw_state_layout(states, name):
    mesh, state, _ = states[name]
    k = MESHES[name][1]
    qkv = state["params"]["blocks_0"]["attn"]["qkv"]["kernel"]  # (64, 192)
    mu = state["opt_state"][0].mu["blocks_0"]["attn"]["qkv"]["kernel"]
    for x in (qkv, mu):
        assert x.sharding.spec == (P() if k == 1 else P(None, SHARD_AXIS))
        shard_shapes = {s.data.shape for s in x.addressable_shards}
        assert shard_shapes == {(64, 192 // k)}
    head_bias = state["params"]["head"]["bias"]  # (10,): where k does not divide 10, stored
    # flat and zero-padded to a multiple of k, and split like every other parameter
    assert head_bias.sharding.is_fully_replicated == (k == 1)
    assert head_bias.shape == ((10,) if 10 % k == 0 else (-(-10 // k) * k,))
    np.testing.assert_array_equal(np.asarray(head_bias)[10:], 0)
    params = jax.eval_shape(lambda: state["params"])
    leaves = jax.tree.leaves(params)
    full = sum(np.prod(x.shape) * 4 for x in leaves)
    per_device = sharding.bytes_per_device(params, mesh)
    assert per_device == full if k == 1 else full / k <= per_device < full / k + 4 * len(leaves)


def test_a_parameter_no_dimension_of_which_the_shard_axis_divides_is_still_split():
    """ViT-15B's width 5040 and MLP 13545 over 32 devices: no dimension of a block's
    weights divides 32, which once kept all of them whole on every device (FULL_SHARD with
    DDP's memory); stored flat and padded, each device holds 1/32 of each, and the model
    gets them back whole in their own shapes."""
    from jax.sharding import Mesh

    devices = np.array([jax.devices()[0]] * 32).reshape(1, 32)  # shapes only: one device
    mesh = Mesh(devices, (REPLICATE_AXIS, SHARD_AXIS))
    for shape in [(5040, 13545), (13545,), (5040,), (3, 5040 * 3)]:
        stored = sharding.stored_shape(shape, mesh)
        assert len(stored) == 1 and stored[0] % 32 == 0
        assert 0 <= stored[0] - np.prod(shape) < 32
        assert sharding.param_spec(stored, mesh) == P(SHARD_AXIS)
    assert sharding.stored_shape((64, 192), mesh) == (64, 192)  # 192 = 6 x 32: as it is
    x = {"w": np.arange(15.0).reshape(3, 5), "b": np.arange(64.0)}
    four = Mesh(np.array(jax.devices()[:4]).reshape(1, 4), (REPLICATE_AXIS, SHARD_AXIS))
    stored = sharding.to_stored(x, four)
    assert stored["w"].shape == (16,) and float(stored["w"][15]) == 0
    back = sharding.from_stored(stored, jax.tree.map(lambda a: jax.ShapeDtypeStruct(
        a.shape, a.dtype), x))
    jax.tree.map(np.testing.assert_array_equal, back, x)


def test_every_layout_starts_from_the_same_weights(states):
    reference = jax.tree.map(np.asarray, states["DDP"][1]["params"])
    for name in ("FULL_SHARD", "HYBRID_2GPU"):
        values = jax.tree.map(np.asarray, sharding.from_stored(states[name][1]["params"],
                                                               reference))
        jax.tree.map(np.testing.assert_array_equal, values, reference)


@pytest.fixture(scope="module")
def steps(states):
    """The compiled train step of each layout, for a global batch of 32."""
    out = {}
    for name in LAYOUTS:
        mesh, state, shardings = states[name]
        batch = jax.ShapeDtypeStruct((32, 3, 16, 16), np.float32,
                                     sharding=sharding.batch_sharding(mesh))
        labels = jax.ShapeDtypeStruct((32,), np.int32, sharding=sharding.batch_sharding(mesh))
        step = jtrain.make_train_step(_tiny(), optax.adamw(1e-3), mesh, shardings)
        out[name] = step.lower(state, batch, labels).compile()
    return out


def test_compiled_step_holds_shards_and_gathers_weights(steps):
    ops = {name: _collectives(c) for name, c in steps.items()}
    # one collective per unit (blocks_0, root) and kind, not one per parameter
    assert ops["DDP"] == {"all-reduce": 1, "all-gather": 0, "reduce-scatter": 0,
                          "all-to-all": 0}
    for name in ("FULL_SHARD", "HYBRID_2GPU"):
        assert ops[name]["all-gather"] == ops[name]["reduce-scatter"] == 2
    # per-device inputs of the step: the whole state under DDP, 1/8 and 1/2 of it sharded
    arg = {name: c.memory_analysis().argument_size_in_bytes for name, c in steps.items()}
    batch_bytes = 32 * (3 * 16 * 16 + 1) * 4 // 8
    state_bytes = arg["DDP"] - batch_bytes
    assert arg["FULL_SHARD"] - batch_bytes == pytest.approx(state_bytes / 8, rel=0.02)
    assert arg["HYBRID_2GPU"] - batch_bytes == pytest.approx(state_bytes / 2, rel=0.02)


def test_same_losses_under_every_layout(states, steps):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((32, 3, 16, 16), dtype=np.float32)
    labels = rng.integers(0, 10, 32).astype(np.int32)
    losses = {}
    for name in LAYOUTS:
        mesh, state, _ = states[name]
        state = jax.tree.map(lambda x: x.copy(), state)  # the step donates its input
        batch = [jax.device_put(a, sharding.batch_sharding(mesh)) for a in (images, labels)]
        losses[name] = []
        for _ in range(3):
            state, loss = steps[name](state, *batch)
            losses[name].append(float(loss))
    assert losses["DDP"][-1] < losses["DDP"][0]
    for name in ("FULL_SHARD", "HYBRID_2GPU"):
        np.testing.assert_allclose(losses[name], losses["DDP"], rtol=1e-5)


def test_the_xla_placed_step_trains_alike_and_is_the_accelerator_default(states, steps):
    """collectives="xla" (the SPMD partitioner's step, the default off CPU) gives the explicit
    step's losses; on CPU it runs collectives per parameter, which is why CPU runs use the
    explicit one."""
    assert jtrain.step_collectives("cpu") == "explicit"
    assert jtrain.step_collectives("gpu") == jtrain.step_collectives("rocm") == "xla"
    with pytest.raises(ValueError, match="collectives="):
        jtrain.make_train_step(_tiny(), optax.adamw(1e-3), *states["DDP"][::2], "nccl")
    mesh, state, shardings = states["FULL_SHARD"]
    batch_sharding = sharding.batch_sharding(mesh)
    shapes = [jax.ShapeDtypeStruct((32, 3, 16, 16), np.float32, sharding=batch_sharding),
              jax.ShapeDtypeStruct((32,), np.int32, sharding=batch_sharding)]
    xla = jtrain.make_train_step(_tiny(), optax.adamw(1e-3), mesh, shardings,
                                 "xla").lower(state, *shapes).compile()
    assert _collectives(xla)["all-gather"] > _collectives(steps["FULL_SHARD"])["all-gather"]
    rng = np.random.default_rng(0)
    images = rng.standard_normal((32, 3, 16, 16), dtype=np.float32)
    labels = rng.integers(0, 10, 32).astype(np.int32)
    losses = {}
    for kind, step in (("explicit", steps["FULL_SHARD"]), ("xla", xla)):
        s = jax.tree.map(lambda x: x.copy(), state)  # the step donates its input
        batch = [jax.device_put(a, batch_sharding) for a in (images, labels)]
        losses[kind] = []
        for _ in range(3):
            s, loss = step(s, *batch)
            losses[kind].append(float(loss))
    np.testing.assert_allclose(losses["xla"], losses["explicit"], rtol=1e-5)


def test_a_bf16_sharded_step_gathers_bf16_weights_as_torch_fsdp_does(states):
    """Under bf16, the explicit FULL_SHARD step's program gathers the weights in bf16 (torch
    FSDP's MixedPrecision(param_dtype=bf16)), where it asked for fp32 gathers, twice the
    bytes. XLA's CPU backend then runs bf16 collectives in fp32, so the program (StableHLO)
    is what is checked, not the CPU's executable."""
    mesh, state, shardings = states["FULL_SHARD"]
    model = _tiny().clone(dtype=jnp.bfloat16)
    batch = sharding.batch_sharding(mesh)
    shapes = [jax.ShapeDtypeStruct((32, 3, 16, 16), np.float32, sharding=batch),
              jax.ShapeDtypeStruct((32,), np.int32, sharding=batch)]
    text = jtrain.make_train_step(model, optax.adamw(1e-3), mesh, shardings,
                                  "explicit").lower(state, *shapes).as_text()
    gathered = re.findall(r"stablehlo\.all_gather.*-> tensor<[0-9x]*x(\w+)>", text)
    assert len(gathered) == 2 and set(gathered) == {"bf16"}, gathered  # blocks_0 and root


def _collectives(compiled) -> dict[str, int]:
    """Collective ops in a compiled step's HLO, by kind."""
    text = compiled.as_text()
    return {op: len(re.findall(rf" {op}(?:-start)?\(", text))
            for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")}


@pytest.mark.parametrize("name", LAYOUTS)
def test_sharded_value_and_grad_is_the_global_gradient(states, name):
    """The written-out collectives give the loss and gradient of the whole batch on one
    device, laid out like the parameters, with one collective per unit and kind."""
    mesh, state, shardings = states[name]
    model = _tiny()

    shapes = param_shapes(model)

    def loss_fn(params, images, labels):
        logits = model.apply({"params": sharding.from_stored(params, shapes)}, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    rng = np.random.default_rng(1)
    images = rng.standard_normal((32, 3, 16, 16), dtype=np.float32)
    labels = rng.integers(0, 10, 32).astype(np.int32)
    params = jax.tree.map(np.asarray, state["params"])
    want_loss, want = jax.value_and_grad(loss_fn)(params, images, labels)
    batch = [jax.device_put(a, sharding.batch_sharding(mesh)) for a in (images, labels)]
    fn = jax.jit(sharding.sharded_value_and_grad(loss_fn, mesh),
                 out_shardings=(sharding.replicated(mesh), shardings["params"]))
    loss, grads = fn(state["params"], *batch)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-6)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4,
                                                         atol=1e-7), grads, want)
    assert [g.sharding.spec for g in jax.tree.leaves(grads)] == [
        p.sharding.spec for p in jax.tree.leaves(state["params"])]
    ops = _collectives(fn.lower(state["params"], *batch).compile())
    units = len(sharding.collective_units(params))  # blocks_0 and the root
    k = MESHES[name][1]
    assert ops["all-gather"] == ops["reduce-scatter"] == (units if k > 1 else 0)
    assert ops["all-to-all"] == 0
    # DDP: one bucket of every gradient (and the loss); sharded: the loss, plus one
    # all-reduce per unit across the replicas of HYBRID_2GPU
    assert 1 <= ops["all-reduce"] <= 1 + (units if name == "HYBRID_2GPU" else 0)


def _cfg(*overrides: str) -> RunConfig:
    from hydra import compose, initialize_config_dir

    from vitfsdp.config import CONF_DIR, register_configs

    register_configs()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return to_run_config(compose("config", overrides=list(overrides)))


TINY = ["framework=jax", "model=vit_tiny", "device=cpu", "nodes=4", "cluster.gpus_per_node=2"]


def test_run_records_on_digits_loss_falls(tmp_path):
    cfg = _cfg(*TINY, "strategy=FULL_SHARD", "data=digits", "precision=bf16",
               "train.steps=200", "train.warmup_steps=20", "train.log_every=20",
               "train.local_batch_size=4", "train.lr=1e-3")
    summary = jtrain.run(cfg, DistEnv(), tmp_path)
    assert summary["status"] == "completed" and summary["compile_s"] > 0
    windows = read_jsonl(tmp_path / "metrics.jsonl")
    assert len(windows) == 10 and windows[0]["warmup"] and not windows[-1]["warmup"]
    assert windows[0]["loss"] == pytest.approx(2.3, abs=0.15)  # ln(10): chance
    assert windows[-1]["loss"] < 0.75 * windows[0]["loss"]
    for key in ("ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "loss",
                "peak_mem_allocated_gib", "peak_rss_gib", "global_batch_size"):
        assert key in windows[-1]
    run = read_json(tmp_path / "run.json")
    assert run["status"] == "completed" and run["config"]["framework"] == "jax"
    assert run["world"]["mesh"] == {REPLICATE_AXIS: 1, SHARD_AXIS: 8} and run["world"]["size"] == 8
    assert run["config"]["strategy"]["backward_prefetch"] is None  # not applicable
    assert run["applied"]["jax_default_matmul_precision"] == "float32"
    assert run["applied"]["precision"]["compute_dtype"] == "bf16"
    assert run["applied"]["precision"]["reduce_dtype"] == "bf16"  # sharded: torch FSDP's
    assert run["applied"]["cudnn_attention_refused"] is None  # not tried on a CPU
    assert run["applied"]["compile_s"] == summary["compile_s"]
    tiny = models.ModelConfig("vit_tiny")
    num_params = models.count_params(models.build_model(tiny, 10, device="meta"))
    # XLA's static analysis of the compiled step, per device: at least the device's shard of
    # the fp32 parameters and AdamW's two moments comes in as arguments
    xla = run["applied"]["xla_memory_bytes"]
    shard = num_params * 12 // 8
    assert xla["argument"] >= shard and xla["temp"] > 0 and set(xla) >= {"output", "alias"}
    assert run["model"]["num_params"] == num_params
    flops = models.forward_flops_per_image(tiny, 10)
    assert run["model"]["forward_flops_per_image"] == flops
    assert run["versions"]["jax"] == jax.__version__
