"""The root config: composes each component's dataclass; Hydra structured-config registration.

Hydra composes ``conf/config.yaml`` onto :class:`RunConfig` (registered as ``base_config``),
so YAML keys and types are checked against these dataclasses. :func:`to_run_config` turns
the DictConfig into dataclasses at the edge; no DictConfig travels inside the package.
Impossible combinations fail in ``__post_init__`` with a ``ValueError`` naming the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import shlex
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from vitfsdp.config_jax import check_run_config as check_jax_config
from vitfsdp.data import DataConfig
from vitfsdp.data import num_classes as data_num_classes
from vitfsdp.launch import ClusterConfig, LaunchOptions, config_path_dirs
from vitfsdp.launch.local import paste_override, quote_override
from vitfsdp.launch.secrets import check_override as check_secret_override
from vitfsdp.launch.slurm import data_dir
from vitfsdp.metrics import MetricsConfig
from vitfsdp.models import ModelConfig
from vitfsdp.parallel import (
    AUTO,
    ENGINES,
    MixedPrecisionConfig,
    PrecisionSettings,
    StrategyConfig,
    auto_precision,
    resolve_precision,
    use_orig_params,
)
from vitfsdp.provenance import redact_args
from vitfsdp.rundir import register_resolver

FRAMEWORKS = ("torch", "jax")
#: ``device``: auto (a GPU where the run gets one, else the CPU) | cpu | cuda (CUDA and ROCm).
DEVICES = ("auto", "cpu", "cuda")
#: ``kernels.adamw``: ``auto`` (fused on a GPU where torch has fused AdamW, torch's own pick
#: elsewhere: a per-tensor loop on CPU), or one implementation forced.
ADAMW_IMPLS = ("auto", "for_loop", "foreach", "fused")
#: ``torch.set_float32_matmul_precision`` values: IEEE fp32, TF32, bf16-based.
MATMUL_PRECISIONS = ("highest", "high", "medium")

#: The Hydra config folder: the repository's ``conf/``, installed as the package data
#: ``vitfsdp.conf`` (pyproject.toml), so that a wheel carries it; the checkout's ``conf/``
#: where ``vitfsdp`` is imported from a checkout (:func:`vitfsdp.launch.slurm.data_dir`). A
#: folder on disk (pip installs unzipped): Hydra and :func:`group_options` list it. Users add
#: YAMLs of their own through ``hydra.searchpath`` (README, "Your own configs").
CONF_DIR = data_dir("vitfsdp.conf")
#: The config groups whose options are YAML files (``model=vit_base``).
GROUPS = ("model", "strategy", "data", "cluster", "experiment")


@dataclass
class TrainConfig:
    """The training loop (``train.*``)."""

    local_batch_size: int = 32  # images per rank per step (the study used 32)
    steps: int = 20  # optimizer steps in total, warm-up included
    warmup_steps: int = 5  # first steps left out of the headline figures (compile, caches)
    log_every: int = 5  # steps per timing window (one metrics.jsonl line each)
    lr: float = 1e-3  # AdamW learning rate
    weight_decay: float = 0.05  # AdamW decoupled weight decay
    seed: int = 0  # model init and data order; the same on every rank
    # collective timeout in seconds: a collective waiting longer fails the run as `timeout`
    timeout_s: float = 600.0
    # steps between sharded checkpoints into run_dir/checkpoint/ (saved at the end of the
    # timing window that reaches each multiple); 0 = none, except on SIGUSR2/SIGTERM
    checkpoint_every: int = 0
    # CPU only, a test/CI aid: each rank may grow its data segment (RLIMIT_DATA: heap and
    # anonymous mappings) by at most this many GiB after the run starts; an allocation beyond
    # it fails and the run is recorded as `oom`. 0 = no limit
    memory_limit_gib: float = 0.0
    # recompute each transformer block's activations in backward instead of keeping them
    activation_checkpointing: bool = False
    # CPU runs: give every large tensor its own mapping, returned to the OS when freed, so
    # peak RSS is what the training holds rather than what glibc's heap kept (FSDP's freed
    # unit buffers); about 2x slower steps at ViT-Base size. For memory measurements
    release_host_memory: bool = False

    def __post_init__(self) -> None:
        for name in ("local_batch_size", "steps", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name}={getattr(self, name)} must be >= 1")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(
                f"train.warmup_steps={self.warmup_steps} must be >= 0 and < "
                f"train.steps={self.steps}, so that some steps are measured"
            )
        if self.timeout_s <= 0:
            raise ValueError(f"train.timeout_s={self.timeout_s} must be > 0")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"train.lr={self.lr} must be a finite number > 0 (AdamW's "
                             "learning rate, e.g. train.lr=1e-3)")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ValueError(f"train.weight_decay={self.weight_decay} must be a finite "
                             "number >= 0 (0 = none)")
        for name in ("checkpoint_every", "memory_limit_gib"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name}={getattr(self, name)} must be >= 0 (0 = off)")


@dataclass
class KernelsConfig:
    """Kernel and numerics choices (``kernels.*``), applied explicitly and recorded in
    run.json's ``applied``: throughput comparisons are honest only when these are controlled.

    The defaults are the fastest honest recipe where the run has a GPU (docs/benchmarks.md): fused
    attention, ``torch.compile`` per block (FSDP1 below a local batch of 128: eager blocks on
    flat parameters, :meth:`resolved_compile`), fused AdamW (with ``precision=auto``: bf16 mixed
    precision), and on CPU exactly the eager fp32 behaviour (no compile, torch's own AdamW).
    ``None``/``auto`` values are resolved where the device is known, at run start.
    """

    # timm's fused scaled-dot-product attention (F.scaled_dot_product_attention); false =
    # softmax(q·kᵀ)·v written out (timm Attention.fused_attn)
    fused_attn: bool = True
    # torch.compile each transformer block (the FSDP unit) in place; None = auto: on where the
    # run's device is a GPU (CUDA/ROCm), except FSDP1 at a local batch below
    # COMPILE_MIN_FSDP1_BATCH (there eager blocks on flat parameters); off on CPU
    compile: bool | None = None
    # AdamW implementation: auto (fused on GPUs where torch has it, torch's default on CPU)
    # | for_loop | foreach | fused
    adamw: str = "auto"
    # torch.set_float32_matmul_precision: highest (IEEE fp32) | high (TF32) | medium (bf16);
    # also sets torch.backends.cuda.matmul.allow_tf32 (true unless highest)
    float32_matmul_precision: str = "highest"
    cudnn_allow_tf32: bool = False  # torch.backends.cudnn.allow_tf32 (the patch-embedding conv)

    def __post_init__(self) -> None:
        for key, valid in (("adamw", ADAMW_IMPLS),
                           ("float32_matmul_precision", MATMUL_PRECISIONS)):
            if getattr(self, key) not in valid:
                raise ValueError(f"kernels.{key}={getattr(self, key)!r} is unknown; valid: "
                                 f"{', '.join(valid)}")

    def resolved_compile(self, device_type: str, fsdp1: bool = False,
                         local_batch: int | None = None) -> bool:
        """``compile`` with ``None`` (auto) resolved for a device type: True on ``cuda``
        (CUDA and ROCm builds alike), False elsewhere; and False on ``cuda`` for FSDP1
        (``fsdp1``) at a ``local_batch`` below :data:`COMPILE_MIN_FSDP1_BATCH`.

        Why (one H100, bf16, one GPU, 2026-11-26 and -27; docs/benchmarks.md, "The host"):
        compiled blocks need FSDP1's original parameters, whose views cost the host about
        2.6 ms a unit a step. At batch 32 that decided the step: ViT-H/14 169-201 images/s
        compiled (the device busy 37-45%) against 281-331 eager on flat parameters (busy
        0.92 with 4 blocks a unit). At batch 128 compiled blocks measured 419.5 and 422.9
        images/s (two runs) against 392.5 eager (one run): ahead, but not established by the
        project's rule (one run is not a result). Between 32 and 128 nothing was measured:
        the switch at 128 is a choice, not a measured or fitted boundary.
        """
        if self.compile is not None:
            return self.compile
        if device_type != "cuda":
            return False
        return not (fsdp1 and local_batch is not None and local_batch < COMPILE_MIN_FSDP1_BATCH)


#: The smallest local batch at which ``kernels.compile`` (auto) compiles the blocks under
#: FSDP1 on a GPU: a choice, the batch where compiled blocks ran ahead of eager ones on flat
#: parameters in 2 runs against 1 (ViT-H/14 on one H100, 2026-11-27; not established:
#: :meth:`KernelsConfig.resolved_compile`).
COMPILE_MIN_FSDP1_BATCH = 128

#: Images of the data sets whose size is known before loading: scikit-learn's
#: ``load_digits`` (the UCI handwritten digits test set) holds 1797.
DATA_SET_IMAGES = {"digits": 1797}


@dataclass
class RunConfig:
    """One training run: what to train, how to shard it, where it runs."""

    model: ModelConfig = field(default_factory=ModelConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    kernels: KernelsConfig = field(default_factory=KernelsConfig)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    nodes: int = 1  # nodes of the run; world size = nodes × cluster.gpus_per_node
    engine: str = "fsdp1"  # fsdp1 (FullyShardedDataParallel) | fsdp2 (fully_shard, DeviceMesh)
    framework: str = "torch"  # torch | jax (vitfsdp.jax: Flax, jax.sharding)
    # auto | fp32 | bf16 | fp16: FSDP mixed precision in that dtype (see mixed_precision.*),
    # autocast under DDP; fp16 adds a (sharded) gradient scaler. auto = bf16 where the run's
    # device is a GPU (CUDA/ROCm), fp32 on CPU; resolved at run start (run.json
    # applied.precision.name), see RunConfig.resolved_precision
    precision: str = "auto"
    device: str = "auto"  # auto | cpu | cuda
    experiment: str | None = None  # name of the experiment preset, if one was used
    dry_run: bool = False  # print per-rank model-state bytes for this world size and exit
    # a label that makes otherwise identical runs distinct sweep points (repeat=0,1,2);
    # it changes nothing in the run; analysis aggregates over it (median, min, max)
    repeat: int = 0

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes={self.nodes} must be >= 1")
        if self.repeat < 0:
            raise ValueError(f"repeat={self.repeat} must be >= 0 (a label: 0, 1, 2 ...)")
        for key, value, valid in (
            ("engine", self.engine, ENGINES),
            ("framework", self.framework, FRAMEWORKS),
            ("device", self.device, DEVICES),
        ):
            if value not in valid:
                also = " (cuda also means ROCm: torch's HIP build calls its GPUs cuda)" \
                    if key == "device" else ""
                raise ValueError(f"{key}={value!r} is not supported; valid: "
                                 f"{', '.join(valid)}{also}")
        if self.framework == "jax":  # refuses torch-only settings; leaves them unset
            check_jax_config(self)
        else:
            self.strategy.resolve_for_engine(self.engine)
            self._check_orig_params()
        self.strategy.check_world(self.world_size, self.cluster.gpus_per_node)
        self._check_data_size()
        # refuses unknown or contradictory dtypes; precision=auto must hold on CPU and GPU
        for device_type in ("cpu", "cuda") if self.precision == AUTO else (None,):
            self.precision_settings(device_type)

    def _check_orig_params(self) -> None:
        """Refuse ``strategy.use_orig_params=false`` where the blocks will be compiled
        (``kernels.compile=true``, or auto with ``device=cuda``: :meth:`compile_blocks`), as
        the wrap would (:func:`vitfsdp.parallel.use_orig_params`), before anything runs. Under
        ``device=auto`` with auto compile the run's device decides, and the wrap refuses it.

        Raises:
            ValueError: naming both keys and the fix.
        """
        use_orig_params(self.strategy,
                        self.compile_blocks("cuda" if self.device == "cuda" else "cpu"))

    def _check_data_size(self) -> None:
        """Refuse a global batch larger than a data set of known size: every rank's
        ``DistributedSampler`` (``drop_last``) would then hold less than one local batch and
        the loader none at all.

        Raises:
            ValueError: naming ``train.local_batch_size`` and the largest that fits.
        """
        num_images = DATA_SET_IMAGES.get(self.data.name)
        if num_images is None or self.framework != "torch":
            return
        per_rank = num_images // self.world_size
        if self.train.local_batch_size > per_rank:
            raise ValueError(
                f"train.local_batch_size={self.train.local_batch_size} × {self.world_size} "
                f"ranks is more than data={self.data.name}'s {num_images} images ({per_rank} "
                f"per rank): no full batch; use train.local_batch_size<={per_rank} or fewer nodes")

    def precision_settings(self, device_type: str | None = None) -> PrecisionSettings:
        """The dtypes this run uses (``precision`` with the ``mixed_precision.*`` overrides).

        Args:
            device_type: the run's device type (``cpu`` | ``cuda``), which ``precision=auto``
                resolves with; ``None`` = :meth:`expected_device_type` (before the run, where
                the device is not known yet).

        Raises:
            ValueError: see :func:`vitfsdp.parallel.resolve_precision`.
        """
        return resolve_precision(self.precision, self.mixed_precision,
                                 is_fsdp=self.strategy.is_fsdp, engine=self.engine,
                                 device_type=device_type or self.expected_device_type())

    def compile_blocks(self, device_type: str) -> bool:
        """``kernels.compile`` resolved for this run on ``device_type`` (``cuda`` | ``cpu``):
        :meth:`KernelsConfig.resolved_compile` with this run's engine (FSDP1 where a torch
        FSDP strategy runs under ``engine=fsdp1``) and local batch."""
        fsdp1 = (self.framework == "torch" and self.engine == "fsdp1"
                 and self.strategy.is_fsdp)
        return self.kernels.resolved_compile(device_type, fsdp1=fsdp1,
                                             local_batch=self.train.local_batch_size)

    def resolved_precision(self, device_type: str | None = None) -> str:
        """``precision`` with ``auto`` resolved (:func:`vitfsdp.parallel.auto_precision`):
        bf16 on ``cuda``, fp32 on ``cpu``; ``device_type=None`` as in
        :meth:`precision_settings`."""
        if self.precision != AUTO:
            return self.precision
        return auto_precision(device_type or self.expected_device_type())

    def expected_device_type(self) -> str:
        """The device type the run will get, for decisions taken before it starts (dry run,
        memory plan): ``device`` when it is ``cpu`` or ``cuda``; under ``device=auto``
        ``cuda`` when the cluster profile gives a GPU memory (``cluster.device_memory_gib``
        set), else ``cpu`` (``cluster.gpu_resource`` is not enough: the virtual Slurm
        profile asks Slurm for GPUs and runs on CPU). At run start the real device decides."""
        if self.device != "auto":
            return self.device
        return "cuda" if self.cluster.device_memory_gib else "cpu"

    def gpu_expected(self) -> str | None:
        """Why this run must find a GPU under ``device=auto`` (the cluster profile describes
        one: ``cluster.device_memory_gib``), in words for the error
        :func:`vitfsdp.distributed.pick_device` raises where none is visible; None where a
        CPU is a valid answer (``device=cpu|cuda`` said so, or the profile gives no GPU
        memory: local and virtual clusters)."""
        if self.device != "auto" or not self.cluster.device_memory_gib:
            return None
        return (f"cluster={self.cluster.name} describes GPUs "
                f"(cluster.device_memory_gib={self.cluster.device_memory_gib:g})")

    @property
    def world_size(self) -> int:
        """Processes (GPUs) of the run: nodes × ranks per node."""
        return self.nodes * self.cluster.gpus_per_node

    @property
    def num_classes(self) -> int:
        """Classifier outputs: ``model.num_classes``, or the data set's class count."""
        return self.model.num_classes or data_num_classes(self.data)


def register_configs() -> None:
    """Register :class:`RunConfig` as Hydra's ``base_config`` and the run-directory name
    resolver of ``conf/config.yaml`` (idempotent)."""
    ConfigStore.instance().store(name="base_config", node=RunConfig)
    register_resolver()


def to_run_config(cfg: DictConfig) -> RunConfig:
    """Turn a composed DictConfig into a validated :class:`RunConfig` (``hydra`` key dropped).

    Raises:
        ValueError: a field has an invalid value or the combination is impossible.
    """
    cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), cfg))
    assert isinstance(obj, RunConfig)
    return obj


def group_options(group: str, conf_dir: Path = CONF_DIR,
                  extra_dirs: Sequence[Path] = ()) -> list[str]:
    """The option names of a config group (``conf/<group>/*.yaml`` and ``<dir>/<group>/*.yaml``
    of every folder in ``extra_dirs``), sorted."""
    dirs = [conf_dir, *extra_dirs]
    return sorted({p.stem for d in dirs for p in (Path(d) / group).glob("*.yaml")})


def group_defaults(conf_dir: Path = CONF_DIR, config_name: str = "config") -> dict[str, str]:
    """Each config group's option when the command line names none, from the defaults list
    of ``conf_dir/<config_name>.yaml`` (``{"model": "vit_tiny", "cluster": "local", ...}``);
    a group whose default is ``null`` (``experiment``) is left out. Read as YAML, without
    composing (for ``--help``)."""
    defaults = OmegaConf.load(Path(conf_dir) / f"{config_name}.yaml").get("defaults", [])
    return {group: str(option) for entry in defaults if isinstance(entry, DictConfig)
            for group, option in entry.items()
            if "/" not in group and not group.startswith("override") and option is not None}


def searchpath_dirs(searchpath: Sequence[str] | str) -> list[Path]:
    """The folders of ``hydra.searchpath`` entries: ``file://DIR`` or ``DIR`` (relative to the
    working directory, as Hydra reads them) and ``pkg://package`` (an importable package).

    Raises:
        ValueError: a ``pkg://`` entry names no importable package.
    """
    dirs = []
    for entry in [searchpath] if isinstance(searchpath, str) else searchpath:
        if entry.startswith("pkg://"):
            try:
                dirs.append(Path(str(resources.files(entry.removeprefix("pkg://")))))
            except ModuleNotFoundError:
                raise ValueError(f"hydra.searchpath: {entry} names no importable package; "
                                 "give a folder as file:///path/to/conf") from None
        else:
            dirs.append(Path(entry.removeprefix("file://")))
    return dirs


def check_group_choices(argv: Sequence[str], conf_dir: Path = CONF_DIR) -> None:
    """Refuse unknown group options on the command line before Hydra composes anything.

    Hydra's own error for ``strategy=BOGUS`` spans a dozen lines; this gives one line that
    names the option, the nearest valid one (``strategy=full_shard``: did you mean
    ``strategy=FULL_SHARD``?) and the valid ones, for every value of a sweep
    (``strategy=A,BOGUS``).

    Raises:
        ValueError: an option of :data:`GROUPS` names no YAML file in ``conf_dir`` or in a
            folder of a ``hydra.searchpath=[...]`` override.
    """
    args = [a for a in argv if "=" in a and not a.startswith("-")]
    overrides = OverridesParser.create().parse_overrides(args)
    extra = [d for o in overrides if o.key_or_group == "hydra.searchpath"
             for d in searchpath_dirs(o.value())] + config_path_dirs()  # VITFSDP_CONFIG_PATH
    for override in overrides:
        group = override.key_or_group
        if group not in GROUPS or override.is_delete() or isinstance(override.value(), Glob):
            continue  # a glob picks among the group's options only
        values = (list(override.sweep_string_iterator()) if override.is_sweep_override()
                  else [override.get_value_element_as_str()])
        valid = group_options(group, conf_dir, extra)
        for value in values:
            if value not in valid and value != "null":
                raise ValueError(_option_error(group, value, valid))


def _nearest(name: str, names: Sequence[str]) -> str | None:
    """The one of ``names`` that a mistyped ``name`` most likely meant: the same name in
    another case (``full_shard``: ``FULL_SHARD``), else the nearest by
    :func:`difflib.get_close_matches` (similarity >= 0.6, case ignored); None when none is
    near."""
    folded = {n.casefold(): n for n in reversed(names)}  # the first of names on a tie
    close = difflib.get_close_matches(name.casefold(), list(folded), n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def _option_error(group: str, value: str, valid: Sequence[str]) -> str:
    """One line for an unknown option ``value`` of config group ``group``: the nearest option
    (:func:`_nearest`) where one is near, and every valid option."""
    near = _nearest(value, valid)
    hint = f" did you mean {group}={near}?" if near else ""
    return f"{group}={value} is unknown;{hint} valid: {', '.join(valid)}"


#: A key as Hydra's override grammar reads it: dot-separated names, each starting with a
#: letter or ``_`` (https://hydra.cc/docs/advanced/override_grammar/basic/).
_KEY = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*(@[\w.]*)?$")
#: Hydra's own command-line flags that take a value (the value is not an override).
_HYDRA_VALUE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                      "--experimental-rerun", "--package", "-p", "--cfg", "-c", "--info", "-i")
#: A field typed ``dict[str, ...]`` (``cluster.env``): any key below it is the user's.
_OPEN = "open"


def schema_keys(cls: type | None = None) -> dict[str, object]:
    """Every key of the config (``train.steps``, ``cluster.env`` ...) and what lies below it:
    the same mapping for a dataclass field, ``"open"`` for a dict field (any key may be
    added), ``None`` for a value. ``cls`` defaults to :class:`RunConfig`."""
    cls = cls or RunConfig
    hints = typing.get_type_hints(cls)
    keys: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            keys[f.name] = schema_keys(kind)
        else:
            keys[f.name] = _OPEN if typing.get_origin(kind) is dict else None
    return keys


def _flat(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for name, below in tree.items():
        out.append(prefix + name)
        if isinstance(below, dict):
            out += _flat(below, f"{prefix}{name}.")
    return out


def _key_error(key: str, tree: dict, prefix: str) -> str:
    """One line for an unknown ``key``: the nearest valid key (:func:`_nearest`; among its
    siblings where its parent is a key), else the valid keys of its parent."""
    node, parent = tree, prefix.rstrip(".")
    *parents, name = key.removeprefix(prefix).split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node, parent, name = tree, prefix.rstrip("."), key.removeprefix(prefix)
            break
        node, parent = node[part], f"{parent}.{part}" if parent else part
    names = _flat(node) if node is tree else list(node)
    close = _nearest(name, names)
    if close:
        near = f"{parent}.{close}" if parent else close
        return f"{key} is not a config key; did you mean {near}?"
    return (f"{key} is not a config key; the keys of {parent or 'the config'} are: "
            f"{', '.join(node)}")


def _launcher_keys() -> dict[str, object]:
    """``hydra.launcher.*``: the vitfsdp launcher's options."""
    return {f.name: None for f in dataclasses.fields(LaunchOptions)}


def check_key(override) -> None:
    """Refuse a Hydra override (parsed) whose key the config does not have.

    ``key=v`` and ``~key`` need the key; ``+key=v`` may only add below a dict field
    (``+cluster.env.NAME=v``): the dataclass sections have fixed keys and Hydra would take an
    added one silently. ``hydra.launcher.*`` is checked against the launcher's options;
    Hydra checks its other keys. Group choices are :func:`check_group_choices`' job.

    Raises:
        ValueError: one line naming the key and the nearest valid one.
    """
    key = override.key_or_group
    if override.package is not None or (key in GROUPS and not override.is_add()) or "/" in key:
        return  # a group choice (hydra/launcher=...): Hydra checks it
    if key.startswith("hydra."):
        if not key.startswith("hydra.launcher.") or key.count(".") != 2:
            return
        tree, prefix, parts = _launcher_keys(), "hydra.launcher.", key.split(".")[2:]
    else:
        tree, prefix, parts = schema_keys(), "", key.split(".")
    node: object = tree
    for name in parts:
        if node == _OPEN:  # below a dict field: added with +, or a profile's (composition)
            return
        if not isinstance(node, dict) or name not in node:
            raise ValueError(_key_error(key, tree, prefix))
        node = node[name]
    if override.is_add() and node != _OPEN:
        raise ValueError(f"{key} is already a config key; set it without the +: "
                         f"{key}={override.get_value_element_as_str()}")


def _parse_error(text: str, error: Exception) -> str:
    """One line for an override that does not parse, naming it, with a hint; a secret-looking
    value redacted (:func:`vitfsdp.provenance.redact_args`), control characters escaped."""
    shown = redact_args([text])[0]
    key, eq, value = shown.partition("=")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return (f"{shown.encode('unicode_escape').decode()}: contains a control character "
                "(newline, tab ...); remove it")
    if not _KEY.match(key):
        return (f"{shown}: {key.lstrip('+~')} is not a key: each dot-separated name starts "
                "with a letter or _ and holds letters, digits, _ or -")
    # Hydra's reason quotes the input: left out where a value was redacted
    reason = "" if shown != text else f" ({str(error).splitlines()[0].split(' expecting ')[0]})"
    if not eq:
        hint = f"give it a value: {key}=VALUE"
    elif ",," in value or value.endswith(",") or value.startswith(","):
        hint = "an empty item between commas; write key=a,b (a sweep) or key=[a,b] (a list)"
    elif value.count("[") != value.count("]") or value.count("{") != value.count("}"):
        hint = "an unclosed bracket; write key=[a,b] (a list) or key=a,b (a sweep)"
    elif value.startswith("[") and value.endswith("]"):
        items = ",".join(quote_override(item.strip()) for item in value[1:-1].split(","))
        hint = f"quote each item: {shlex.quote(f'{key}=[{items}]')}"
    else:  # Hydra's quotes inside the shell's: the hint pastes as one argument
        hint = f"quote the value: {paste_override(key, value)}"
    return f"{shown} does not parse{reason}: {hint}"


def parse_overrides(argv: Sequence[str]) -> list:
    """Hydra's parsed overrides of the command line ``argv`` (flags and their values left
    out).

    Raises:
        ValueError: one line naming the first override that does not parse, with a hint.
    """
    parser = OverridesParser.create()
    parsed = []
    texts = [a for i, a in enumerate(argv) if not a.startswith("-")
             and not (i and argv[i - 1] in _HYDRA_VALUE_FLAGS)]
    for text in texts:
        try:
            parsed.append(parser.parse_override(text))
        except Exception as e:  # noqa: BLE001 - hydra's HydraException/OverrideParseException
            raise ValueError(_parse_error(text, e)) from None
    return parsed


def check_overrides(argv: Sequence[str], conf_dir: Path = CONF_DIR) -> list:
    """Refuse, each in one line, the overrides of ``argv`` that Hydra would refuse in many
    lines, with a traceback, or not at all: a secret's value typed on the command line
    (:func:`vitfsdp.launch.secrets.check_override`), overrides that do not parse, unknown keys
    (:func:`check_key`), unknown group options (:func:`check_group_choices`).

    Returns:
        the parsed overrides.

    Raises:
        ValueError: one line naming the override or key and the fix.
    """
    parsed = parse_overrides(argv)
    for override in parsed:
        check_secret_override(override.input_line)
        check_key(override)
    check_group_choices([o.input_line for o in parsed], conf_dir)
    return parsed


def one_line(error: Exception, overrides: Sequence[str] = ()) -> str:
    """A Hydra or OmegaConf composition error in one line that names the key, built from the
    exception objects (:class:`hydra.errors.MissingConfigException`'s ``missing_cfg_file``
    and ``options``; the OmegaConf error Hydra chains as the cause, with its ``full_key`` and
    ``msg``), not from their wording.

    A missing group option (``strategy=X``) becomes ``strategy=X is unknown; did you mean
    ...? valid: ...`` (every option of Hydra's search path, :func:`_option_error`); a plain
    override of a key the composed config lacks says to add it with ``+``; an override
    OmegaConf refuses (a type) is named with OmegaConf's first line; any other error is its
    first line, after its ``full_key``.

    Args:
        overrides: the overrides composed (as typed), to name the one the error is about.
    """
    if isinstance(error, MissingConfigException) and error.options is not None:
        group, _, name = (error.missing_cfg_file or "").rpartition("/")
        return _option_error(group, name, error.options)
    cause = error.__cause__ or error
    # the OmegaConf error behind Hydra's: its cause, or the one it was raised while handling
    full_key = next((k for e in (cause, error.__context__) if (k := getattr(e, "full_key", None))),
                    "")
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    first = lines[0] if lines else type(error).__name__
    fixes = [line for line in lines[1:] if line.startswith(("Either ", "Or "))]
    if fixes:  # Hydra's own fixes ("Or add a second + ..."): kept on the one line
        first = " ".join([first, *fixes])
    if isinstance(error, ConfigCompositionException) and cause is not error and full_key:
        override = _override_of(full_key, overrides)
        if override is not None and (override.is_delete() or override.is_add()
                                     or override.is_force_add()
                                     or not isinstance(cause, _NOT_A_KEY)):
            return f"{override.input_line}: {first}"  # OmegaConf refused the value
        if override is not None:  # Hydra's "Could not override": a plain override
            return (f"{override.key_or_group} is not in the composed config (not a key, or a "
                    "dict entry the profile does not set); to add it: "
                    f"+{override.input_line}")
    prefix = f"{full_key}: " if full_key and full_key not in first else ""
    return " ".join(f"{prefix}{first}".split())


#: OmegaConf's errors for a key a config does not have (Hydra's "Could not override").
_NOT_A_KEY = (ConfigAttributeError, ConfigKeyError)


def _override_of(full_key: str, overrides: Sequence[str]):
    """The last of ``overrides`` (as Hydra's parsed ``Override``) that sets ``full_key``, else
    the last that sets a key below or above it (``cluster.env.X.Y=1`` for ``cluster.env.X``,
    ``cluster.env={A: 1}`` for ``cluster.env.A``); None when none does or they do not
    parse."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - hydra's HydraException/OverrideParseException
        return None
    exact = [o for o in parsed if o.key_or_group == full_key]
    related = [o for o in parsed if o.key_or_group.startswith(f"{full_key}.")
               or full_key.startswith(f"{o.key_or_group}.")]
    return (exact or related or [None])[-1]


def _check_launcher(cfg: DictConfig) -> None:
    """Refuse a ``hydra.launcher`` value (``job_name`` ...) that is, or resolves to, text
    holding ``${``: Hydra's instantiation of the launcher resolves its config a second time
    (``a\\${IFS}`` failed there with a traceback).

    Raises:
        ValueError: naming the key; OmegaConf's error where a value does not resolve.
    """
    launcher = OmegaConf.select(cfg, "hydra.launcher")
    if launcher is None:
        return
    for key, value in OmegaConf.to_container(launcher, resolve=True).items():
        if isinstance(value, str) and "${" in value:
            raise ValueError(f"hydra.launcher.{key} holds '${{', which Hydra would resolve a "
                             "second time; leave it out")


def check_composes(config_name: str, overrides: Sequence, validate: bool = False) -> None:
    """Compose ``config_name`` from ``conf/`` with the parsed ``overrides`` that are not
    sweeps (each sweep point is composed by the sweep), as Hydra will before it starts; with
    ``validate`` and no sweep among them (one run), validate it too (:func:`to_run_config`),
    so that a bad value is refused before Hydra makes the run's directory (the sweep
    validates each point itself, naming it).

    Raises:
        ValueError: :func:`one_line` of the composition error, or the validation's line.
    """
    register_configs()
    fixed = [o.input_line for o in overrides if not o.is_sweep_override()]
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        try:
            cfg = compose(config_name, fixed, return_hydra_config=True)
            _check_launcher(cfg)
            if validate and len(fixed) == len(overrides):
                with open_dict(cfg):
                    del cfg["hydra"]
                to_run_config(cfg)
        except (OmegaConfBaseException, ValueError) as e:
            raise ValueError(one_line(e, fixed)) from None
        except Exception as e:  # hydra.errors.HydraException and its kinds
            if type(e).__module__.startswith("hydra"):
                raise ValueError(one_line(e, fixed)) from None
            raise


#: Hydra's flags of which a command takes one (hydra/_internal/utils.py, _run_hydra).
_MODES = {"-m": "--multirun", "--multirun": "--multirun", "-c": "--cfg", "--cfg": "--cfg",
          "-i": "--info", "--info": "--info", "-r": "--run", "--run": "--run",
          "-sc": "--shell-completion", "--shell-completion": "--shell-completion"}


def check_one_mode(argv: Sequence[str]) -> None:
    """Refuse two of Hydra's modes at once (``-m ... --cfg job``), which Hydra reports with a
    traceback.

    Raises:
        ValueError: naming the two flags and what to do instead.
    """
    modes = list(dict.fromkeys(_MODES[a] for a in argv if a in _MODES))
    if len(modes) > 1:
        raise ValueError(f"{modes[0]} and {modes[1]} cannot go together (Hydra runs one of "
                         "--multirun, --cfg, --info); to see a point's config, give its "
                         "values without -m: --cfg job key=value ...")


def cli(hydra_main, config_name: str = "config", validate: bool = False) -> None:
    """Run a Hydra entry point after :func:`check_overrides` and, unless Hydra's own config
    flags are given, :func:`check_composes` (``validate``: a single run's values too); a
    refused override prints ``error: ...`` on one line (no traceback) and exits with
    status 2."""
    argv = sys.argv[1:]
    try:
        check_one_mode(argv)
        config_path_dirs()  # VITFSDP_CONFIG_PATH, before Hydra's search path reads it
        parsed = check_overrides(argv)
        if not any(a.split("=")[0] in _HYDRA_VALUE_FLAGS[:6] for a in argv):
            check_composes(config_name, parsed, validate)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    hydra_main()
