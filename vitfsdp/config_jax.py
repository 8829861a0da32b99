"""What ``framework=jax`` accepts of the run config, checked when the config is validated.

This module imports no JAX, so a sweep refuses a point before anything starts, as fast as
it refuses any other invalid value. Each refusal is a one-line ``ValueError`` that names the
field and its valid values under JAX.

Strategies under JAX (:mod:`vitfsdp.jax.sharding` builds the meshes):

- ``DDP``: parameters and optimizer state replicated, the batch split over every device;
  XLA all-reduces the gradients.
- ``FULL_SHARD``: parameters and AdamW moments sharded over the ``shard`` mesh axis, which
  holds every device, with the batch over the same devices (ZeRO-3; XLA all-gathers a
  parameter where it is used and reduce-scatters its gradient).
- ``HYBRID_<k>GPU``: a 2-D mesh of world/k replicas (``replicate`` axis) × shard groups of k
  consecutive ranks (``shard`` axis); ``HYBRID_1GPU`` is therefore DDP's layout, and
  ``strategy=HYBRID_SHARD`` takes groups of ``cluster.gpus_per_node``. A refused strategy's
  error lists the presets this world accepts (:func:`jax_strategies`).
- ``NO_SHARD`` is refused: under jax.sharding, replicated parameters with all-reduced
  gradients *are* DDP; the compiled step would be DDP's, so the point would duplicate DDP
  under another name.
- ``SHARD_GRAD_OP`` is refused: it differs from FULL_SHARD only in keeping the gathered
  parameters from forward to backward, and under jax.sharding where gathered copies live is
  XLA's scheduling decision, not a setting; a point labelled SHARD_GRAD_OP would run the
  same program as FULL_SHARD.

Torch-only settings are refused rather than ignored: ``engine=fsdp2``,
``strategy.backward_prefetch``, ``strategy.limit_all_gathers``,
``strategy.forward_prefetch``, ``mixed_precision.*``, ``precision=fp16`` (no loss scaling
here), ``kernels.compile=true`` (the whole step is always jit-compiled; null, torch's auto, is
accepted and means nothing here), ``kernels.adamw`` other
than ``auto`` (optax has one AdamW), ``kernels.cudnn_allow_tf32`` (JAX convolutions follow
``jax_default_matmul_precision``) and ``train.memory_limit_gib`` (the torch trainer's CPU
memory limit). ``train.checkpoint_every`` applies to both (:mod:`vitfsdp.jax.checkpoint`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from vitfsdp.launch.slurm import data_dir
from vitfsdp.parallel import StrategyConfig

if TYPE_CHECKING:  # annotations only; the root config imports this module, not the reverse
    from vitfsdp.parallel import MixedPrecisionConfig

#: ``strategy.sharding_strategy`` values with a JAX layout.
JAX_SHARDING_STRATEGIES = ("DDP", "FULL_SHARD", "HYBRID_SHARD")
#: ``precision`` values under JAX: fp32, or bf16 compute on fp32 parameters and AdamW state;
#: ``auto`` is resolved by ``RunConfig.resolved_precision`` on the device type of the backend
#: (:func:`vitfsdp.jax.train.device_type`).
JAX_PRECISIONS = ("fp32", "bf16")
#: ``kernels.float32_matmul_precision`` (torch's names) → ``jax_default_matmul_precision``:
#: IEEE fp32, TF32, bf16 passes, as ``torch.set_float32_matmul_precision`` means them.
MATMUL_PRECISION = {"highest": "float32", "high": "tensorfloat32", "medium": "bfloat16"}
#: Why a sharding strategy has no JAX layout of its own (see the module docstring).
_NO_JAX_MEANING = {
    "NO_SHARD": "replicated parameters with all-reduced gradients are DDP under jax.sharding",
    "SHARD_GRAD_OP": ("where gathered parameters live between forward and backward is XLA's "
                      "scheduling decision under jax.sharding, so it would run FULL_SHARD"),
}


class _Kernels(Protocol):
    """The ``kernels.*`` settings :func:`check_run_config` reads."""

    @property
    def compile(self) -> bool | None: ...
    @property
    def adamw(self) -> str: ...
    @property
    def cudnn_allow_tf32(self) -> bool: ...


class _Train(Protocol):
    """The ``train.*`` setting :func:`check_run_config` reads."""

    @property
    def memory_limit_gib(self) -> float: ...


class _Cluster(Protocol):
    """The ``cluster.*`` setting :func:`check_run_config` reads."""

    @property
    def gpus_per_node(self) -> int: ...


class RunSettings(Protocol):
    """What :func:`check_run_config` reads of a run config; :class:`vitfsdp.config.RunConfig`
    has all of it. A protocol, so that this module needs nothing of the root config, which
    imports it."""

    @property
    def engine(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def strategy(self) -> StrategyConfig: ...
    @property
    def mixed_precision(self) -> MixedPrecisionConfig: ...
    @property
    def kernels(self) -> _Kernels: ...
    @property
    def train(self) -> _Train: ...
    @property
    def cluster(self) -> _Cluster: ...
    @property
    def world_size(self) -> int: ...


def check_run_config(cfg: RunSettings) -> None:
    """Refuse settings that have no meaning under ``framework=jax``; leaves ``cfg`` as is.

    Call it instead of ``StrategyConfig.resolve_for_engine``: the FSDP1-only settings stay
    unset (``None``), so run.json records them as not applicable.

    Raises:
        ValueError: one line naming the field, why, and the values valid under JAX.
    """
    s = cfg.strategy
    if s.sharding_strategy not in JAX_SHARDING_STRATEGIES:
        valid = jax_strategies(cfg.world_size, cfg.cluster.gpus_per_node)
        raise ValueError(
            f"strategy={s.name} (sharding_strategy={s.sharding_strategy}) has no JAX meaning: "
            f"{_NO_JAX_MEANING.get(s.sharding_strategy, 'no layout')}; valid with "
            f"framework=jax: {', '.join(valid) or 'none'} (on {cfg.world_size} ranks, "
            f"{cfg.cluster.gpus_per_node} a node)")
    torch_only = {
        "engine": (cfg.engine != "fsdp1", "fsdp1 (ignored: XLA shards the jitted step)"),
        "strategy.backward_prefetch": (s.backward_prefetch is not None, "null"),
        "strategy.limit_all_gathers": (s.limit_all_gathers is not None, "null"),
        "strategy.forward_prefetch": (s.forward_prefetch, "false"),
        "strategy.use_orig_params": (s.use_orig_params is not None, "null"),
        "strategy.blocks_per_unit": (s.blocks_per_unit != 1, "1 (XLA has no FSDP units)"),
        "kernels.compile": (bool(cfg.kernels.compile),
                            "null or false (the whole step is always jitted)"),
        "kernels.adamw": (cfg.kernels.adamw != "auto", "auto (optax.adamw)"),
        "kernels.cudnn_allow_tf32": (cfg.kernels.cudnn_allow_tf32,
                                     "false (convolutions follow the matmul precision)"),
        "train.memory_limit_gib": (getattr(cfg.train, "memory_limit_gib", 0) != 0, "0"),
    }
    for key in ("param_dtype", "reduce_dtype", "buffer_dtype"):
        torch_only[f"mixed_precision.{key}"] = (
            getattr(cfg.mixed_precision, key) is not None, "null (set precision=fp32|bf16)")
    for key, (is_set, valid) in torch_only.items():
        if is_set:
            raise ValueError(f"{key}={_value(cfg, key)!r} applies only to framework=torch; "
                             f"valid with framework=jax: {valid}")
    if cfg.precision not in (*JAX_PRECISIONS, "auto"):
        raise ValueError(f"precision={cfg.precision} is not supported with framework=jax "
                         f"(no loss scaling); valid: {', '.join(JAX_PRECISIONS)}, auto")


def jax_strategies(world_size: int, ranks_per_node: int,
                   conf_dir: Path | None = None) -> list[str]:  # fmt: skip
    """The ``strategy=<name>`` presets (``conf/strategy/*.yaml``; ``conf_dir``: the package's
    config folder where None) that ``framework=jax`` accepts on ``world_size`` ranks of
    ``ranks_per_node`` a node, by the rules that validate a run: a sharding strategy of
    :data:`JAX_SHARDING_STRATEGIES` and a shard group that tiles the world
    (:meth:`vitfsdp.parallel.StrategyConfig.check_world`), ``HYBRID_SHARD``'s group resolved
    to ``cluster.gpus_per_node`` as the preset says; sorted. Presets of a
    ``hydra.searchpath`` folder are not among them."""
    from omegaconf import OmegaConf  # on the error path only

    folder = Path(conf_dir or data_dir("vitfsdp.conf")) / "strategy"
    valid = []
    for path in sorted(folder.glob("*.yaml")):
        composed = OmegaConf.create({"cluster": {"gpus_per_node": ranks_per_node},
                                     "strategy": OmegaConf.load(path)})
        preset = OmegaConf.to_container(composed, resolve=True)["strategy"]
        try:
            strategy = StrategyConfig(**preset)
            strategy.check_world(world_size, ranks_per_node)
        except (TypeError, ValueError):  # not a strategy, or its group does not tile
            continue
        if strategy.sharding_strategy in JAX_SHARDING_STRATEGIES:
            valid.append(path.stem)
    return valid


def _value(cfg: RunSettings, dotted: str):
    """The value of ``cfg`` at a dotted key such as ``strategy.backward_prefetch``."""
    obj = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj
