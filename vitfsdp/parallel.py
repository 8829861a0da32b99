"""Data parallelism: DDP, FSDP1 and FSDP2 wrapping, hybrid shard groups, mixed precision,
per-shard materialization of meta-device models, activation checkpointing and compile.

Parallel code knows nothing of ViTs beyond "the blocks are the FSDP units": the caller passes
the block classes (``vitfsdp.models.block_classes()``) for transformer-block auto-wrap, and for
a model built on the meta device a :class:`ParamInit` that can draw any rows of any parameter.

Strategy names (``strategy=<name>``) follow the published study: ``DDP``, FSDP's
``NO_SHARD``, ``FULL_SHARD``, ``SHARD_GRAD_OP``, and ``HYBRID_<k>GPU`` = FSDP
``HYBRID_SHARD`` with shard groups of ``k`` consecutive ranks, replicated across the rest
(world size / k replicas). ``strategy=HYBRID_SHARD strategy.shard_group_size=k`` takes any
``k`` that divides the world size and tiles the nodes: a group inside a node (k divides the
ranks per node) or whole nodes (k a multiple of it: k = 16 on 8-GPU nodes spans two nodes,
as the ORNL study ran it); its name is then ``HYBRID_<k>GPU``.

torch loads on first use, inside the functions that need it: the config layer reads this
module's dataclasses, and the commands that train nothing (``--help``, the plan, the analysis)
stay torch-free.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vitfsdp.core.mesh import REPLICATE_AXIS, SHARD_AXIS  # noqa: F401 (re-exported)

if TYPE_CHECKING:  # torch is imported where a model is wrapped: configs import this module
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy
    from torch.distributed.tensor import DTensor

log = logging.getLogger(__name__)

SHARDING_STRATEGIES = ("DDP", "NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD")
BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NONE")
ENGINES = ("fsdp1", "fsdp2")
#: FSDP1 defaults of the settings that only FSDP1 has.
FSDP1_DEFAULTS = {"backward_prefetch": "BACKWARD_PRE", "limit_all_gathers": True}
#: ``precision`` values; a name is also a dtype for the ``mixed_precision.*`` keys.
PRECISIONS = ("fp32", "bf16", "fp16")
#: ``precision=auto``: the dtype follows the run's device (:func:`auto_precision`).
AUTO = "auto"
#: The torch dtype name of each ``precision`` name (:func:`torch_dtype`).
_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a precision name (fp32 | bf16 | fp16)."""
    # torch on use (module docstring)
    import torch

    return getattr(torch, _DTYPE_NAMES[name])


def __getattr__(name: str):
    """``DTYPES`` (precision name → torch dtype), made when first asked for: the configs
    import this module and must start without torch."""
    if name == "DTYPES":
        return {k: torch_dtype(k) for k in _DTYPE_NAMES}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class StrategyConfig:
    """How the model is data-parallel (``strategy=<name>``)."""

    name: str = "FULL_SHARD"  # the preset's name, as plots label it
    sharding_strategy: str = "FULL_SHARD"  # DDP or a torch ShardingStrategy name
    shard_group_size: int = 0  # ranks per shard group for HYBRID_SHARD; 0 = not hybrid
    # BACKWARD_PRE | BACKWARD_POST | NONE; FSDP1 only. None = BACKWARD_PRE under FSDP1 and
    # "not applicable" (recorded as null) under DDP and FSDP2.
    backward_prefetch: str | None = None
    limit_all_gathers: bool | None = None  # FSDP1 all-gather rate limiter; None as above (true)
    forward_prefetch: bool = False  # FSDP1 explicit forward prefetch
    # FSDP1's use_orig_params; None = true where the blocks are compiled (Dynamo compiles
    # FSDP1 only so), else false: the views of the original parameters that true keeps
    # cost the host about 2.6 times as much per unit and step (python -m vitfsdp.bench
    # wrappers)
    use_orig_params: bool | None = None
    # consecutive transformer blocks per FSDP unit (FSDP1 and FSDP2; 1 = each block its own
    # unit, as the published study wrapped). k > 1: ceil(depth / k) units, each gathered
    # whole: FSDP's per-unit host time falls about k-fold, the gathered buffers grow k-fold
    # (python -m vitfsdp.bench wrappers; docs/benchmarks.md)
    blocks_per_unit: int = 1

    def __post_init__(self) -> None:
        if self.blocks_per_unit < 1:
            raise ValueError(f"strategy.blocks_per_unit={self.blocks_per_unit} must be >= 1 "
                             "(consecutive transformer blocks per FSDP unit; 1 = one block "
                             "a unit)")
        if self.sharding_strategy not in SHARDING_STRATEGIES:
            raise ValueError(
                f"strategy.sharding_strategy={self.sharding_strategy!r} is unknown; valid: "
                f"{', '.join(SHARDING_STRATEGIES)}"
            )
        if self.backward_prefetch is not None and self.backward_prefetch not in BACKWARD_PREFETCH:
            raise ValueError(
                f"strategy.backward_prefetch={self.backward_prefetch!r} is unknown; valid: "
                f"{', '.join(BACKWARD_PREFETCH)}"
            )
        hybrid = self.sharding_strategy == "HYBRID_SHARD"
        if hybrid and self.shard_group_size < 1:
            raise ValueError(
                f"strategy.shard_group_size={self.shard_group_size} must be >= 1 for "
                "HYBRID_SHARD (ranks per shard group): set strategy.shard_group_size=k"
            )
        if not hybrid and self.shard_group_size:
            raise ValueError(
                f"strategy.shard_group_size={self.shard_group_size} applies only to "
                f"HYBRID_SHARD, not {self.sharding_strategy}: leave it out, and to set a "
                "group size beside other strategies name the preset, e.g. "
                f"strategy={self.sharding_strategy},HYBRID_{self.shard_group_size}GPU"
            )

    @property
    def is_fsdp(self) -> bool:
        """True for every FSDP strategy, False for DDP."""
        return self.sharding_strategy != "DDP"

    def resolve_for_engine(self, engine: str) -> None:
        """Fill FSDP1-only settings with their defaults under FSDP1; elsewhere refuse them.

        Under DDP and FSDP2 ``backward_prefetch`` and ``limit_all_gathers`` do not exist
        (FSDP2 prefetches by its own schedule), so they stay ``None`` and are recorded as not
        applicable: a sweep never plots an axis that did nothing.

        Raises:
            ValueError: one of them is set for DDP or engine=fsdp2.
        """
        applies = self.is_fsdp and engine == "fsdp1"
        for key, default in FSDP1_DEFAULTS.items():
            if applies and getattr(self, key) is None:
                setattr(self, key, default)
            elif not applies and getattr(self, key) is not None:
                where = "DDP" if not self.is_fsdp else f"engine={engine}"
                raise ValueError(f"strategy.{key} applies only to FSDP1 (engine=fsdp1), not "
                                 f"{where}; leave it unset (null)")
        if self.forward_prefetch and not applies:
            raise ValueError("strategy.forward_prefetch applies only to FSDP1 (engine=fsdp1)")
        if self.use_orig_params is not None and not applies:
            raise ValueError("strategy.use_orig_params applies only to FSDP1 (engine=fsdp1); "
                             "leave it unset (null)")
        if self.blocks_per_unit != 1 and not self.is_fsdp:
            raise ValueError(f"strategy.blocks_per_unit={self.blocks_per_unit} applies only "
                             "to FSDP (DDP has no units); leave it at 1")

    def check_world(self, world_size: int, ranks_per_node: int) -> None:
        """Refuse a hybrid shard group that does not tile the world and the nodes.

        A shard group is consecutive ranks: inside a node (``k`` divides the ranks per node)
        or a whole number of nodes (``k`` a multiple of them); never part of one node and
        part of the next, where every collective would wait on the inter-node link for a
        few ranks.

        Raises:
            ValueError: ``shard_group_size`` does not divide the world size, or neither
                divides nor is a multiple of the ranks per node.
        """
        k = self.shard_group_size
        if not k:
            return
        tiles = ranks_per_node % k == 0 or k % ranks_per_node == 0
        if world_size % k or not tiles:
            raise ValueError(
                f"strategy={self.name} (strategy.shard_group_size={k}): "
                f"{self.sharding_strategy} needs shard groups "
                f"of {k} ranks, but a node has {ranks_per_node} ranks (world {world_size}); "
                f"choose a shard group that divides the world size and divides or is a "
                f"multiple of cluster.gpus_per_node={ranks_per_node}"
            )

    def effective_sharding_strategy(self) -> str:
        """The ShardingStrategy handed to FSDP1 (``DDP`` for DDP).

        HYBRID_SHARD with shard groups of 1 becomes NO_SHARD over the whole world: the same
        math (a full replica per rank, gradients averaged over all ranks). FSDP1 given a
        shard group of size 1 clamps itself to NO_SHARD *on that group*
        (torch/distributed/fsdp/_init_utils.py, ``_init_core_state``) and then never
        reduces gradients across replicas, silently training each rank on its own data.
        """
        if self.sharding_strategy == "HYBRID_SHARD" and self.shard_group_size == 1:
            return "NO_SHARD"
        return self.sharding_strategy

    def shard_group(self, world_size: int) -> int:
        """Ranks one parameter is split over: the world (FULL_SHARD, SHARD_GRAD_OP), the
        hybrid shard group, or 1 (NO_SHARD, DDP: replicated)."""
        effective = self.effective_sharding_strategy()
        if effective in ("FULL_SHARD", "SHARD_GRAD_OP"):
            return world_size
        return self.shard_group_size if effective == "HYBRID_SHARD" else 1

    def replicas(self, world_size: int) -> int:
        """Number of model replicas: world / shard group."""
        return world_size // self.shard_group(world_size)


@dataclass
class MixedPrecisionConfig:
    """FSDP mixed-precision dtypes (``mixed_precision.*``): fp32 | bf16 | fp16 each, or null
    to follow ``precision`` (fp32: no mixed precision). FSDP only; DDP uses autocast."""

    param_dtype: str | None = None  # dtype parameters are all-gathered and computed in
    reduce_dtype: str | None = None  # dtype of the gradient reduce-scatter / all-reduce
    buffer_dtype: str | None = None  # FSDP1 only (FSDP2 has none): dtype of module buffers

    def __post_init__(self) -> None:
        for key in ("param_dtype", "reduce_dtype", "buffer_dtype"):
            value = getattr(self, key)
            if value is not None and value not in PRECISIONS:
                raise ValueError(f"mixed_precision.{key}={value!r} is unknown; valid: "
                                 f"{', '.join(PRECISIONS)} or null (follow precision)")


@dataclass(frozen=True)
class PrecisionSettings:
    """The dtypes a run actually uses, as recorded in run.json (``None``: not applicable).

    Attributes:
        param_dtype: dtype of parameters in forward/backward (FSDP's gathered copies; under
            DDP the parameters stay fp32 and ``autocast_dtype`` casts the matmuls).
        reduce_dtype: dtype gradients are reduced in.
        buffer_dtype: FSDP1's buffer dtype; ``None`` under DDP and FSDP2.
        autocast_dtype: ``torch.autocast`` dtype of the forward (DDP with bf16/fp16), else None.
        grad_scaler: ``ShardedGradScaler`` (FSDP) or ``GradScaler`` (DDP) under fp16, else None.
    """

    param_dtype: str = "fp32"
    reduce_dtype: str = "fp32"
    buffer_dtype: str | None = None
    autocast_dtype: str | None = None
    grad_scaler: str | None = None

    @property
    def compute_dtype(self) -> str:
        """The dtype the matmuls run in: the autocast dtype, else the parameter dtype."""
        return self.autocast_dtype or self.param_dtype

    def fsdp1_policy(self) -> MixedPrecision | None:
        """FSDP1 ``MixedPrecision`` of these dtypes; ``None`` when everything is fp32."""
        # torch on use (module docstring)
        from torch.distributed.fsdp import MixedPrecision

        dtypes = (self.param_dtype, self.reduce_dtype, self.buffer_dtype)
        if all(d in (None, "fp32") for d in dtypes):
            return None
        return MixedPrecision(param_dtype=torch_dtype(self.param_dtype),
                              reduce_dtype=torch_dtype(self.reduce_dtype),
                              buffer_dtype=torch_dtype(self.buffer_dtype or "fp32"))

    def fsdp2_policy(self) -> MixedPrecisionPolicy:
        """FSDP2 ``MixedPrecisionPolicy`` of these dtypes (fp32 everywhere: no casting)."""
        # torch on use (module docstring)
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if (self.param_dtype, self.reduce_dtype) == ("fp32", "fp32"):
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=torch_dtype(self.param_dtype),
                                    reduce_dtype=torch_dtype(self.reduce_dtype))


def auto_precision(device_type: str) -> str:
    """What ``precision=auto`` means on ``device_type``: ``bf16`` on ``cuda`` (CUDA and ROCm
    builds: every GPU the study targets, A100/H100/MI250X, has bf16 tensor cores), ``fp32``
    elsewhere (CPU: bf16 matmuls there are emulated and slower, and fp32 keeps CPU runs
    exactly as they were)."""
    return "bf16" if device_type == "cuda" else "fp32"


def resolve_precision(precision: str, mp: MixedPrecisionConfig, *, is_fsdp: bool,
                      engine: str, device_type: str | None = None) -> PrecisionSettings:
    """The dtypes of ``precision`` with the ``mixed_precision.*`` overrides, per engine.

    FSDP: each of ``mp``'s dtypes, where null, is ``precision``'s. DDP: fp32 parameters and
    reductions, the forward in autocast to ``precision``. fp16 scales the loss: a
    ShardedGradScaler (FSDP; it also agrees on inf/NaN across ranks) or GradScaler (DDP).
    ``precision=auto`` is :func:`auto_precision` of ``device_type``; it never means fp16, so
    a ``mixed_precision`` key set to fp16 is refused under auto as under bf16 and fp32.

    Raises:
        ValueError: ``precision`` is unknown, or ``auto`` without ``device_type``; a
            ``mixed_precision`` key is set under DDP, ``buffer_dtype`` under engine=fsdp2,
            or fp16 is asked for without ``precision=fp16`` (its gradients would not be
            scaled).
    """
    if precision not in (*PRECISIONS, AUTO):
        raise ValueError(f"precision={precision!r} is not supported; valid: "
                         f"{', '.join((AUTO, *PRECISIONS))}")
    asked = precision
    if precision == AUTO:
        if device_type is None:
            raise ValueError("precision=auto resolves only where the device type is known "
                             "(bf16 on cuda, fp32 on cpu): pass device_type")
        precision = auto_precision(device_type)
    scaler = "ShardedGradScaler" if is_fsdp else "GradScaler"
    scaler = scaler if precision == "fp16" else None
    overrides = {k: v for k, v in dataclasses.asdict(mp).items() if v is not None}
    if not is_fsdp:
        if overrides:
            raise ValueError(f"mixed_precision.{next(iter(overrides))} applies only to FSDP; "
                             "DDP keeps fp32 parameters and autocasts to precision: leave it null")
        autocast = None if precision == "fp32" else precision
        return PrecisionSettings(autocast_dtype=autocast, grad_scaler=scaler)
    if engine == "fsdp2" and "buffer_dtype" in overrides:
        raise ValueError("mixed_precision.buffer_dtype applies only to FSDP1 (FSDP2's "
                         "MixedPrecisionPolicy has no buffer dtype); leave it null")
    for key, value in overrides.items():
        if value == "fp16" and precision != "fp16":
            raise ValueError(f"mixed_precision.{key}=fp16 needs precision=fp16, which scales "
                             f"the loss (precision={asked} does not)")
    dtypes = {k: overrides.get(k, precision) for k in ("param_dtype", "reduce_dtype")}
    buffer = overrides.get("buffer_dtype", precision) if engine == "fsdp1" else None
    return PrecisionSettings(**dtypes, buffer_dtype=buffer, grad_scaler=scaler)


def grad_scaler(settings: PrecisionSettings, device: torch.device):
    """The loss scaler of ``settings`` on ``device`` (``None`` unless fp16).

    ``ShardedGradScaler`` all-reduces its inf/NaN flag over the ranks, so every rank skips
    the same steps whatever gradient shard it holds; DDP's gradients are already identical.
    """
    if settings.grad_scaler == "ShardedGradScaler":
        # torch on use (module docstring)
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device=device.type)
    if settings.grad_scaler == "GradScaler":
        # torch on use (module docstring)
        import torch

        return torch.amp.GradScaler(device.type)
    return None


class ParamInit(Protocol):
    """Draws the initial values of a model built on the meta device, any rows at a time
    (``vitfsdp.models.ViTInit``); parameters are named by their owning module and name."""

    def params(self) -> Iterable[tuple[torch.nn.Module, str]]:
        """Every (owning module, parameter name)."""

    def fill_(self, module: torch.nn.Module, name: str, out: torch.Tensor,
              row_start: int = 0) -> torch.Tensor:
        """Write dim-0 rows ``row_start`` … of the parameter's initial value into ``out``."""


def hybrid_mesh(device_type: str, world_size: int, shard_group_size: int) -> DeviceMesh:
    """2-D mesh (replicas × shard group) for HYBRID_SHARD; ranks in a shard group are
    consecutive, so with ranks numbered node by node a shard group is part of one node or
    whole nodes (``shard_group_size`` > ranks per node: it spans nodes)."""
    # torch on use (module docstring)
    from torch.distributed.device_mesh import init_device_mesh

    shape = (world_size // shard_group_size, shard_group_size)
    return init_device_mesh(device_type, shape, mesh_dim_names=(REPLICATE_AXIS, SHARD_AXIS))


def wrap(
    model: torch.nn.Module,
    cfg: StrategyConfig,
    *,
    device: torch.device,
    world_size: int,
    block_classes: set[type[torch.nn.Module]],
    init: ParamInit | None = None,
    engine: str = "fsdp1",
    precision: PrecisionSettings | None = None,
    activation_checkpointing: bool = False,
    compile_blocks: bool = False,
) -> tuple[torch.nn.Module, dict]:
    """Wrap ``model`` for data-parallel training per ``cfg``, materializing it if it is on
    the meta device.

    FSDP wraps every module of ``block_classes`` as its own unit (``cfg.blocks_per_unit``
    consecutive blocks a unit where that is > 1), then the root. DDP keeps a
    full replica per rank; under bf16/fp16 the caller runs the forward in autocast
    (``precision.autocast_dtype``).

    A model on the meta device is materialized with ``init``, never whole when the strategy
    shards: FSDP1 materializes one unit at a time on ``device`` (``param_init_fn``) just
    before it flattens and shards it, so a rank holds its shards plus at most one full
    unit; FSDP2 shards on meta and ``to_empty`` allocates only this rank's shards, into
    which ``init`` draws exactly this rank's rows; DDP materializes the whole replica.

    Args:
        model: the unwrapped model, on ``device`` or entirely on the meta device.
        device: this rank's device.
        world_size: ranks in the job.
        block_classes: module classes that are the FSDP units (and the checkpointed and
            compiled blocks).
        init: draws initial values; required for a meta-device model.
        engine: fsdp1 | fsdp2 (ignored for DDP).
        precision: effective dtypes (:func:`resolve_precision`); None = fp32.
        activation_checkpointing: recompute each block's activations in backward
            (non-reentrant ``checkpoint_wrapper``; FSDP1: ``apply_activation_checkpointing``
            after wrapping; DDP and FSDP2: wrapped before the data-parallel wrapper).
        compile_blocks: ``torch.compile`` every block in place before wrapping.

    Returns:
        (the wrapped model, what was applied: ``materialized`` (``whole_model``,
        ``per_unit``, ``per_shard`` or ``none`` for a model already on a device),
        ``activation_checkpointed_blocks`` and ``compiled_blocks`` counts, and the
        ``sharding_strategy`` that runs: ``DDP``, FSDP1's own (``NO_SHARD`` on a world of
        1, whatever was asked: torch substitutes it) or FSDP2's effective one, FSDP1's
        ``use_orig_params`` (:func:`use_orig_params`; ``None`` under DDP and FSDP2), and
        ``fsdp_units``, the FSDP units besides the root (``None`` under DDP)).

    Raises:
        ValueError: unknown engine, a meta-device model without ``init``, or
            ``strategy.use_orig_params=false`` with compiled blocks.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is unknown; valid: {', '.join(ENGINES)}")
    on_meta = _on_meta(model)
    if on_meta and init is None:
        raise ValueError("the model is on the meta device: pass init= to materialize it")
    precision = precision or PrecisionSettings()
    if not cfg.is_fsdp:
        return _ddp(model, device, init if on_meta else None, block_classes,
                    activation_checkpointing, compile_blocks)
    if engine == "fsdp2":
        return _fully_shard(model, cfg, device, world_size, block_classes, precision,
                            init if on_meta else None, activation_checkpointing, compile_blocks)
    return _fsdp1(model, cfg, device, world_size, block_classes, precision,
                  init if on_meta else None, activation_checkpointing, compile_blocks)


def _on_meta(model: torch.nn.Module) -> bool:
    """True if every parameter is on the meta device, False if none is.

    Raises:
        ValueError: some parameters are on meta and some not, or a buffer is on meta (the
            init draws parameters only).
    """
    meta = {p.is_meta for p in model.parameters()}
    if len(meta) > 1:
        raise ValueError("the model is partly on the meta device; build it on one device")
    buffers = [name for name, b in model.named_buffers() if b.is_meta]
    if buffers:
        raise ValueError(f"meta-device materialization draws parameters only, but buffers "
                         f"{', '.join(buffers)} are on meta; build them on the device")
    return meta == {True}


def _ddp(model, device, init, block_classes, checkpointing, compile_blocks):
    """DDP: the whole replica materialized, blocks checkpointed and compiled, then DDP."""
    # torch on use (module docstring)
    from torch.nn.parallel import DistributedDataParallel as DDP

    if init is not None:
        init.init_model_(model.to_empty(device=device))
    units = _block_units(model, block_classes, checkpointing)
    _compile(units, compile_blocks)
    ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=ids), _applied(
        "whole_model" if init is not None else "none", units, checkpointing, compile_blocks,
        "DDP")


def _fsdp1(model, cfg, device, world_size, block_classes, precision, init, checkpointing,
           compile_blocks):
    """FSDP1 with transformer-block auto-wrap; meta models materialized unit by unit."""
    # torch on use (module docstring)
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    cfg = dataclasses.replace(cfg)
    cfg.resolve_for_engine("fsdp1")  # FSDP1 defaults for settings left unset
    kwargs = {}
    strategy = cfg.effective_sharding_strategy()
    if strategy == "HYBRID_SHARD":
        kwargs["device_mesh"] = hybrid_mesh(device.type, world_size, cfg.shard_group_size)
    if init is not None:
        kwargs["param_init_fn"] = _unit_init_fn(init, device)
    units = _block_units(model, block_classes, checkpoint=False)
    _compile(units, compile_blocks)
    # k > 1: each run of k consecutive blocks becomes one module, the unit FSDP1 wraps
    groups = _group_blocks(model, block_classes, cfg.blocks_per_unit)
    prefetch = None if cfg.backward_prefetch == "NONE" else BackwardPrefetch[cfg.backward_prefetch]
    orig_params = use_orig_params(cfg, compile_blocks)
    model = FSDP(
        model,
        sharding_strategy=ShardingStrategy[strategy],
        auto_wrap_policy=ModuleWrapPolicy({type(groups[0])} if groups else block_classes),
        mixed_precision=precision.fsdp1_policy(),
        backward_prefetch=prefetch,
        forward_prefetch=cfg.forward_prefetch,
        limit_all_gathers=cfg.limit_all_gathers,
        use_orig_params=orig_params,
        device_id=device,
        **kwargs,
    )
    if checkpointing:
        apply_activation_checkpointing(model, checkpoint_wrapper_fn=checkpoint_wrapper,
                                       check_fn=lambda m: type(m) in block_classes)
    # what FSDP1 runs: on a world of 1 torch replaces every strategy by NO_SHARD (with a
    # warning; torch/distributed/fsdp/_init_utils.py, _init_core_state)
    return model, _applied("per_unit" if init is not None else "none", units, checkpointing,
                           compile_blocks, model.sharding_strategy.name, orig_params,
                           len(groups) or len(units))


def use_orig_params(cfg: StrategyConfig, compile_blocks: bool) -> bool:
    """FSDP1's ``use_orig_params`` for ``cfg``: ``strategy.use_orig_params`` where set, else
    ``compile_blocks``.

    ``True`` keeps each original parameter as a view into its unit's flat parameter, set
    again around every forward and backward: on a world of 1 on CPU, a 32-block model's
    step cost the host 1.9 ms more per unit than unwrapped with ``True`` and 0.7 ms with
    ``False`` (``python -m vitfsdp.bench wrappers``, docs/benchmarks.md). Dynamo
    compiles modules inside FSDP1 only with ``True`` (with ``False`` it breaks the graph,
    "FSDP with use_orig_params=False", and the blocks run eagerly).

    Raises:
        ValueError: ``strategy.use_orig_params=false`` with compiled blocks.
    """
    if cfg.use_orig_params is False and compile_blocks:
        raise ValueError("strategy.use_orig_params=false with compiled blocks "
                         "(kernels.compile, auto on a GPU): Dynamo compiles inside FSDP1 "
                         "only with use_orig_params=true; set kernels.compile=false or "
                         "leave strategy.use_orig_params unset")
    return cfg.use_orig_params if cfg.use_orig_params is not None else compile_blocks


def _unit_init_fn(init: ParamInit, device: torch.device):
    """FSDP1 ``param_init_fn``: FSDP calls it on each module of a unit about to be
    flattened (children of already-wrapped units excluded); it allocates that module's own
    parameters on ``device`` and draws their whole values."""

    def param_init_fn(module: torch.nn.Module) -> None:
        params = list(module.named_parameters(recurse=False))
        if not any(p.is_meta for _, p in params):
            return
        module.to_empty(device=device, recurse=False)
        for name, param in module.named_parameters(recurse=False):
            init.fill_(module, name, param)

    return param_init_fn


def _block_units(model, block_classes, checkpoint: bool) -> list[torch.nn.Module]:
    """The blocks of ``model``, each replaced in its parent by ``checkpoint_wrapper(block)``
    when ``checkpoint``; returns what now sits where the blocks were (the FSDP units)."""
    # torch on use (module docstring)
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    units = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in block_classes:
                unit = checkpoint_wrapper(child) if checkpoint else child
                parent.register_module(name, unit)
                units.append(unit)
    return units


def _group_blocks(model, block_classes, k: int) -> list[torch.nn.Module]:
    """Put each run of ``k`` consecutive blocks of an ``nn.Sequential`` into one
    :func:`block_group` module in place (names ``blocks.<group>.<i>``; the blocks bare, as
    FSDP1 wraps them: checkpointing is applied after, compiling keeps their type); the
    groups, in order, or ``[]`` for ``k = 1`` (nothing changed).

    Raises:
        ValueError: ``k > 1`` and the blocks' parent is not an ``nn.Sequential`` of blocks
            alone (its forward would not run the groups in order).
    """
    if k == 1:
        return []
    # torch on use (module docstring)
    from torch import nn

    group_class, groups = block_group(), []
    for parent in list(model.modules()):
        children = list(parent.children())
        if not any(type(c) in block_classes for c in children):
            continue
        if not isinstance(parent, nn.Sequential) or not all(
                type(c) in block_classes for c in children):
            raise ValueError(f"strategy.blocks_per_unit={k} needs the blocks in an "
                             f"nn.Sequential of blocks alone, but their parent is a "
                             f"{type(parent).__name__}; set strategy.blocks_per_unit=1")
        parent._modules.clear()
        for i in range(0, len(children), k):
            groups.append(group_class(*children[i:i + k]))
            parent.add_module(str(i // k), groups[-1])
    return groups


def block_group() -> type:
    """The ``nn.Sequential`` subclass that holds one FSDP1 unit of several consecutive
    blocks (``strategy.blocks_per_unit``), made once: torch loads on first use."""
    global _BLOCK_GROUP
    if _BLOCK_GROUP is None:
        # torch on use (module docstring)
        from torch import nn

        _BLOCK_GROUP = type("BlockGroup", (nn.Sequential,), {
            "__doc__": "Consecutive transformer blocks wrapped as one FSDP unit.",
            "__module__": __name__})
    return _BLOCK_GROUP


_BLOCK_GROUP: type | None = None


def _compile(units: list[torch.nn.Module], enabled: bool) -> None:
    """``torch.compile`` each unit in place (``Module.compile``: names and types unchanged)."""
    for unit in units if enabled else []:
        unit.compile()


def _applied(materialized: str, units, checkpointing: bool, compile_blocks: bool,
             sharding_strategy: str, orig_params: bool | None = None,
             fsdp_units: int | None = None) -> dict:
    """run.json's ``applied``: what :func:`wrap` did (its docstring); ``fsdp_units``: FSDP
    units besides the root (None under DDP)."""
    return {"materialized": materialized,
            "activation_checkpointed_blocks": len(units) if checkpointing else 0,
            "compiled_blocks": len(units) if compile_blocks else 0,
            "sharding_strategy": sharding_strategy, "use_orig_params": orig_params,
            "fsdp_units": fsdp_units}


def fsdp2_mesh(device_type: str, world_size: int, cfg: StrategyConfig) -> DeviceMesh:
    """The DeviceMesh ``fully_shard`` shards over.

    FULL_SHARD and SHARD_GRAD_OP: 1-D over all ranks. HYBRID_SHARD: 2-D replicas × shard
    group (HSDP). NO_SHARD (and hybrid groups of 1): 2-D (world, 1), a replica per rank with
    gradients all-reduced over all of them.
    """
    # torch on use (module docstring)
    from torch.distributed.device_mesh import init_device_mesh

    if cfg.sharding_strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=(SHARD_AXIS,))
    return hybrid_mesh(device_type, world_size, cfg.shard_group(world_size))


def _fully_shard(model, cfg, device, world_size, block_classes, precision, init,
                 checkpointing, compile_blocks):
    """FSDP2: ``fully_shard`` each block (checkpointed and compiled first, as torchtitan
    does), then the root. FULL_SHARD and the hybrids reshard parameters after forward;
    SHARD_GRAD_OP keeps them gathered until backward (ZeRO-2). A meta model is sharded on
    meta, then only this rank's shards are allocated and drawn."""
    # torch on use (module docstring)
    from torch.distributed.fsdp import fully_shard

    mesh = fsdp2_mesh(device.type, world_size, cfg)
    policy = precision.fsdp2_policy()
    reshard = cfg.sharding_strategy != "SHARD_GRAD_OP"
    units = _block_units(model, block_classes, checkpointing)
    _compile(units, compile_blocks)
    k = cfg.blocks_per_unit  # fully_shard takes a list of modules as one unit
    groups = [units[i:i + k] if k > 1 else units[i] for i in range(0, len(units), k)]
    for group in groups:
        fully_shard(group, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    model = fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    if init is not None:
        _materialize_shards(model, init, device)
    return model, _applied("per_shard" if init is not None else "none", units, checkpointing,
                           compile_blocks, cfg.effective_sharding_strategy(),
                           fsdp_units=len(groups))


def _materialize_shards(model: torch.nn.Module, init: ParamInit, device: torch.device) -> None:
    """Allocate this rank's shards of a model sharded on meta and draw their rows."""
    # torch on use (module docstring)
    import torch
    from torch.distributed.tensor import DTensor

    model.to_empty(device=device)
    with torch.no_grad():
        for module, name in init.params():
            param = getattr(module, name)
            if isinstance(param, DTensor):
                init.fill_(module, name, param.to_local(), row_start=_row_offset(param))
            else:
                init.fill_(module, name, param)


def _row_offset(param: DTensor) -> int:
    """First dim-0 row of the whole parameter in this rank's shard. FSDP2 shards dim 0 as
    ``torch.chunk`` does: shard ``i`` of ``k`` starts at row ``i × ceil(rows / k)``."""
    offset = 0
    for mesh_dim, placement in enumerate(param.placements):
        if placement.is_shard():
            assert placement.dim == 0, f"FSDP2 shards dim 0, not {placement}"
            k = param.device_mesh.size(mesh_dim)
            offset += -(-param.shape[0] // k) * param.device_mesh.get_local_rank(mesh_dim)
    return min(offset, param.shape[0])
