"""This checkout's plan for the runs of a runs.csv export: each row's settings composed into a
:class:`~vitfsdp.config.RunConfig` as the sweep composes a point, then :func:`vitfsdp.plan.predict`.

An export's own ``pred_*`` columns were written by the plan of its day (the H100 exports of
2026-11-26 predict 975 images/s for a ViT-H/14 point that measured 201-293 and that today's
plan puts at 326): they say nothing of this checkout's plan. :func:`predict_row` recomputes
one row's prediction, :func:`predicted_columns` a frame's ``pred_*`` columns;
``tools/plan_check.py`` and the analysis rebuilt from exports
(:func:`vitfsdp.analysis.collect.read_runs_csv`) both use them.

A row is composed from ``model``, ``strategy``, ``precision``,
``train.activation_checkpointing``, ``local_batch_size``, ``nodes`` and ``ranks_per_node``
(or ``world_size`` over ``nodes``), with ``framework``, ``kernels.compile`` (an empty cell:
``null``, auto, as the run had it), ``kernels.fused_attn`` and ``device_type`` where the row
has them (else the defaults: torch, fused attention), on a cluster profile: the one given,
else the row's ``cluster``. A flag cell that is not true or false (``maybe``) and a
``device_type`` other than ``cuda``, ``rocm`` or ``cpu`` (``tpu``) are refused, the reason
naming the column, not read as the default or as a GPU. An export without ``device_type``
(older ones) has its device read from ``peak_mem_kind`` (``rss``: CPU, ``allocated``: GPU)
or ``device_name``, else the row is not composed. The device the run recorded
(``device_name``, ``device_peak_flops``, ``device_memory_gib``) goes to
:func:`vitfsdp.plan.predict_recorded`, the one rule of the analysis of records too: a GPU
row of a profile without a GPU's data sheet (``local``, ``virtual``) is predicted with its
recorded peak and memory and :data:`GPU_PROFILE`'s efficiency and bandwidths where it ran on
an H100, else with its recorded memory and, on one GPU with a recorded peak, an assumed
efficiency (``pred_source`` says which; see :func:`vitfsdp.plan.recorded_config`). A
whole-number column (``nodes``, ``local_batch_size``, ``ranks_per_node``, ``world_size``)
must hold a whole number >= 1, else the row is not composed and its reason names the column.
No probe is read (the profile's ``cluster.probe``, if any, is the plan's default).
Rows that differ only in ``nodes`` or ``local_batch_size`` are composed once (Hydra, about
0.1 s) and the rest built from it by ``dataclasses.replace``, validated as composed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vitfsdp.core.flags import read_flag
from vitfsdp.plan import GPU_PROFILE, predict_recorded

if TYPE_CHECKING:  # pandas and the config load on use
    import pandas as pd

    from vitfsdp.config import RunConfig

__all__ = ["GPU_PROFILE", "PRED_COLUMNS", "REQUIRED", "compose_row", "predict_row",
           "predicted_columns", "row_device", "row_overrides"]

#: The columns a row must have a value in to be composed.
REQUIRED = ("model", "strategy", "precision", "train.activation_checkpointing",
            "local_batch_size", "nodes")
#: The columns :func:`predicted_columns` returns: runs.csv's prediction columns
#: (vitfsdp.analysis.schema.PRED_COLUMNS; the plan cannot import the analysis, so a test,
#: test_the_prediction_columns_are_the_schemas, holds the two equal).
PRED_COLUMNS = ("pred_peak_mem_gib", "pred_step_time_s", "pred_ips", "pred_fits",
                "pred_mem_metric", "pred_source")


def _value(row: Mapping, column: str) -> Any:
    """``row[column]``, ``None`` where the row lacks it or holds no value there (None, NaN,
    pandas' NA or NaT, an empty or blank cell)."""
    value = row.get(column) if hasattr(row, "get") else None
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    try:
        return None if value != value else value
    except (TypeError, ValueError):  # an array-like cell: not a runs.csv value
        return value


def _int(row: Mapping, column: str, value: Any) -> int:
    """``value`` (the row's ``column``) as a whole number >= 1 (``4``, ``4.0``, ``"4"``);
    ValueError (one line) naming the column and the fix for anything else (``1.5``, ``0``,
    ``-4``, ``inf``, ``True``, ``"two"``)."""
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (number.is_integer() and number >= 1):
        raise ValueError(f"{column}={value!r} in the row is not a whole number >= 1: its point "
                         f"cannot be composed (correct or blank the row's {column} cell)")
    return int(number)


def _flag(row: Mapping, column: str, default: bool | None) -> str:
    """A flag column as an override value (``true``/``false``; :func:`read_flag`), or
    ``default`` (``null`` for None: auto) where the cell is empty.

    Raises:
        ValueError: a value that is not a flag (``maybe``, ``"1"``); one line naming the
            column and the fix.
    """
    value = _value(row, column)
    flag = read_flag(value)
    if flag is None and value is not None:
        blank = "auto" if default is None else str(default).lower()
        raise ValueError(f"{column}={value!r} in the row is not a flag: its point cannot be "
                         f"composed (write true or false in the row's {column} cell, or "
                         f"blank it for {blank})")
    flag = default if flag is None else flag
    return "null" if flag is None else str(flag).lower()


def _required(row: Mapping, column: str) -> Any:
    """``row[column]``; ValueError naming the column where it has no value."""
    value = _value(row, column)
    if value is None:
        raise ValueError(f"no {column} in the row (a runs.csv column): its point cannot be "
                         "composed")
    return value


def _ranks_per_node(row: Mapping, nodes: int) -> int:
    """``ranks_per_node``, else ``world_size`` / ``nodes``; ValueError naming them."""
    ranks = _value(row, "ranks_per_node")
    if ranks is not None:
        return _int(row, "ranks_per_node", ranks)
    world = _value(row, "world_size")
    if world is None:
        raise ValueError("no ranks_per_node or world_size in the row (runs.csv columns): "
                         "its point cannot be composed")
    ranks, left = divmod(_int(row, "world_size", world), nodes)
    if left or not ranks:
        raise ValueError(f"world_size={world!r} in the row is not a multiple of nodes={nodes}: "
                         "its point cannot be composed (add the row's ranks_per_node)")
    return ranks


#: Peak-memory kinds (runs.csv ``peak_mem_kind``) by the device type they are measured on.
_KIND_DEVICE = {"rss": "cpu", "allocated": "cuda"}
#: runs.csv ``device_type`` values (vitfsdp.analysis.schema) by the device the plan models:
#: a ROCm GPU is torch's ``cuda`` device.
DEVICE_TYPES = {"cuda": "cuda", "rocm": "cuda", "cpu": "cpu"}


def _device_type(row: Mapping) -> str | None:
    """The row's ``device_type`` as ``cuda`` or ``cpu`` (:data:`DEVICE_TYPES`, case aside);
    None where the cell is empty or the column absent.

    Raises:
        ValueError: another value (``tpu``, ``mps``); one line naming the column and the fix.
    """
    value = _value(row, "device_type")
    if value is None:
        return None
    kind = DEVICE_TYPES.get(str(value).strip().lower())
    if kind is None:
        raise ValueError(f"device_type={value!r} in the row is not one of "
                         f"{', '.join(DEVICE_TYPES)} (the devices the plan models): its point "
                         "cannot be composed (correct the row's device_type cell, or blank "
                         "it to read the device from peak_mem_kind or device_name)")
    return kind


def row_device(row: Mapping) -> dict:
    """The recorded device of a runs.csv ``row`` as run.json's ``device`` (``type``
    ``cuda``/``cpu``, ``name``, ``peak_flops``, ``memory_gib``; keys absent where empty):
    ``device_type``, else (older exports) read from ``peak_mem_kind`` or a GPU's
    ``device_name`` (NVIDIA, AMD Instinct). A JAX GPU row exported before
    ``memory_limit_gib`` recorded XLA's pool as ``device_memory_gib``: its memory is unknown
    (as :func:`vitfsdp.analysis.collect.read_runs_csv` reads it).

    Raises:
        ValueError: a ``device_type`` the plan does not model (:func:`_device_type`), or
            none and nothing to read it from; one line.
    """
    name = _value(row, "device_name")
    kind = _device_type(row) or _KIND_DEVICE.get(_value(row, "peak_mem_kind"))
    if kind is None and any(w in str(name or "") for w in ("NVIDIA", "Instinct")):
        kind = "cuda"
    if kind is None:
        raise ValueError("no device_type in the row (nor a peak_mem_kind or GPU device_name "
                         "to read it from): its point cannot be composed")
    memory = _value(row, "device_memory_gib")
    if (kind != "cpu" and _value(row, "framework") == "jax"
            and _value(row, "memory_limit_gib") is None):
        memory = None  # exported before memory_limit_gib: XLA's pool, not the device's
    device = {"type": "cpu" if kind == "cpu" else "cuda", "name": name,
              "peak_flops": _value(row, "device_peak_flops"), "memory_gib": memory}
    return {k: (float(v) if k in ("peak_flops", "memory_gib") else v)
            for k, v in device.items() if v is not None}


def row_overrides(row: Mapping, cluster: str | None = None) -> list[str]:
    """The overrides that compose ``row`` (a runs.csv row: a Series or dict) as its point,
    on profile ``cluster`` (default: the row's ``cluster`` column), ``nodes=`` last.

    Raises:
        ValueError: a column of :data:`REQUIRED` (or ``ranks_per_node``/``world_size``, or
            ``cluster`` where none is given, or the device: :func:`row_device`) has no
            value, or a whole number, flag or device type is not one; one line naming it.
    """
    nodes = _int(row, "nodes", _required(row, "nodes"))
    batch = _int(row, "local_batch_size", _required(row, "local_batch_size"))
    device = row_device(row)["type"]
    return [
        f"model={_required(row, 'model')}", f"strategy={_required(row, 'strategy')}",
        f"device={device}", f"precision={_required(row, 'precision')}",
        f"train.activation_checkpointing={_flag(row, 'train.activation_checkpointing', False)}",
        f"train.local_batch_size={batch}",
        f"kernels.compile={_flag(row, 'kernels.compile', None)}",
        f"cluster.gpus_per_node={_ranks_per_node(row, nodes)}",
        f"framework={_value(row, 'framework') or 'torch'}",
        f"kernels.fused_attn={_flag(row, 'kernels.fused_attn', True)}",
        f"cluster={cluster or _required(row, 'cluster')}", f"nodes={nodes}"]


@functools.lru_cache(maxsize=1024)
def _compose(overrides: tuple[str, ...]) -> RunConfig:
    """The one point of ``overrides``, validated; ValueError (one line) where it is refused
    or does not compose. Kept per overrides: a study's repeats compose once."""
    # Hydra and the composition on use: the analysis imports this module for every
    # re-analysis of records, which composes nothing
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from vitfsdp.plan.__main__ import compose_points

    try:
        [(_, cfg)] = compose_points(list(overrides))
    except (HydraException, OmegaConfBaseException) as e:
        raise ValueError(f"point {' '.join(overrides)}: {str(e).splitlines()[0]}") from None
    return cfg


#: The overrides :func:`_compose_fast` varies by ``dataclasses.replace`` (no interpolation
#: in conf/ reads them), by prefix.
_VARIED = ("train.local_batch_size=", "nodes=")
#: A composed config per overrides less :data:`_VARIED`.
_BASES: dict[tuple[str, ...], RunConfig] = {}


def _compose_fast(overrides: tuple[str, ...]) -> RunConfig:
    """:func:`_compose`'s config, composed once per overrides less ``nodes`` and
    ``train.local_batch_size`` and the rest built from it (validated by the dataclasses'
    ``__post_init__``s); ValueError (one line naming the point) where it is refused."""
    key = tuple(o for o in overrides if not o.startswith(_VARIED))
    base = _BASES.get(key)
    if base is None:
        cfg = _BASES[key] = _compose(overrides)
        return cfg
    values = {o.split("=", 1)[0]: int(o.split("=", 1)[1]) for o in overrides
              if o.startswith(_VARIED)}
    try:
        train = dataclasses.replace(base.train, local_batch_size=values["train.local_batch_size"])
        return dataclasses.replace(base, train=train, nodes=values["nodes"])
    except ValueError as e:
        raise ValueError(f"point {' '.join(overrides)}: {str(e).splitlines()[0]}") from None


def compose_row(row: Mapping, cluster: str | None = None) -> RunConfig:
    """The validated :class:`~vitfsdp.config.RunConfig` of one runs.csv ``row``, on profile
    ``cluster`` (default: the row's own): see the module's docstring for the columns read.

    Raises:
        ValueError: a needed column has no value (the message names it), or the point is
            refused or does not compose (the message names the point); one line.
    """
    return _compose_fast(tuple(row_overrides(row, cluster)))


def predict_row(row: Mapping, cluster: str | None = None) -> dict:
    """This checkout's prediction for the run of one runs.csv ``row`` as its ``pred_*``
    columns (:data:`PRED_COLUMNS`: memory in GiB per rank, step time in s, global
    images/s): :func:`compose_row`, then :func:`vitfsdp.plan.predict_recorded` on the row's
    recorded device (:func:`row_device`), as the analysis of run records predicts;
    ``pred_source`` ``profile:<cluster>`` where the profile's figures were used.

    Raises:
        ValueError: as :func:`compose_row`; one line naming the column or point.
    """
    cfg = compose_row(row, cluster)
    pred = predict_recorded(cfg, row_device(row))
    if pred["pred_source"] == "profile":
        pred["pred_source"] = f"profile:{cfg.cluster.name}"
    return pred


def predicted_columns(runs: pd.DataFrame,
                      cluster: str | None = None) -> tuple[pd.DataFrame, dict[Any, str]]:
    """The ``pred_*`` columns (:data:`PRED_COLUMNS`) of every row of ``runs`` (a runs.csv
    frame) by this checkout's plan (:func:`predict_row`), on ``runs``' index:
    ``pred_source`` is ``profile:<cluster>`` the row was composed on (``probe:...`` where
    the profile names a probe); a row that cannot be composed has every column empty.

    Returns:
        The frame of predictions (floats NaN, ``pred_fits`` True/False/None, text None where
        empty) and, by index, the one-line reason of each row that could not be composed.
    """
    import pandas as pd  # on use, as the plan's other tables (vitfsdp.plan.__main__)

    rows, failed = {}, {}
    for index, row in runs.iterrows():
        try:
            rows[index] = predict_row(row, cluster)
        except ValueError as e:
            failed[index] = str(e).splitlines()[0]
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(PRED_COLUMNS))
    frame = frame.reindex(runs.index)
    for column in ("pred_fits", "pred_mem_metric", "pred_source"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame, failed
