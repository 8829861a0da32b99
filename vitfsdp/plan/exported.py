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
(or ``world_size`` over ``nodes``), with ``framework``, ``kernels.compile``,
``kernels.fused_attn`` and ``device_type`` where the row has them (else the defaults:
torch, no compile, fused attention), on a cluster profile: the one given, else the row's
``cluster``; a GPU row of a profile without a GPU's data sheet (no peak for its compute
dtype: ``local``, ``virtual``) is composed on :data:`GPU_PROFILE`, whose figures are a DGX H100's.
No probe is read (the profile's ``cluster.probe``, if any, is the plan's default).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vitfsdp.plan import Prediction, peak_flops_for, predict

if TYPE_CHECKING:  # pandas and the config load on use
    import pandas as pd

    from vitfsdp.config import RunConfig

#: The profile a GPU row of a profile without a GPU's peak (``local``, ``virtual``) is
#: composed on: a DGX H100's data sheets (conf/cluster/cuda8.yaml), as docs/plan.md's table.
GPU_PROFILE = "cuda8"
#: The columns a row must have a value in to be composed.
REQUIRED = ("model", "strategy", "precision", "train.activation_checkpointing",
            "local_batch_size", "nodes")
#: The columns :func:`predicted_columns` returns (runs.csv's prediction columns).
PRED_COLUMNS = ("pred_peak_mem_gib", "pred_step_time_s", "pred_ips", "pred_fits",
                "pred_mem_metric", "pred_source")


def _value(row: Mapping, column: str) -> Any:
    """``row[column]``, ``None`` where the row lacks it or holds no value there."""
    value = row.get(column) if hasattr(row, "get") else None
    try:
        return None if value is None or value != value or value == "" else value
    except (TypeError, ValueError):  # an array-like cell: not a runs.csv value
        return value


def _flag(row: Mapping, column: str, default: bool) -> str:
    """A flag column as an override value (``true``/``false``); ``default`` where empty."""
    value = _value(row, column)
    if value is None:
        return str(default).lower()
    return str(value in (True, 1, "True", "true", "1")).lower()


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
    if ranks is None:
        world = _value(row, "world_size")
        if world is None:
            raise ValueError("no ranks_per_node or world_size in the row (runs.csv columns): "
                             "its point cannot be composed")
        ranks = int(world) // nodes
    return int(ranks)


def row_overrides(row: Mapping, cluster: str | None = None) -> list[str]:
    """The overrides that compose ``row`` (a runs.csv row: a Series or dict) as its point,
    on profile ``cluster`` (default: the row's ``cluster`` column), ``nodes=`` last.

    Raises:
        ValueError: a column of :data:`REQUIRED` (or ``ranks_per_node``/``world_size``, or
            ``cluster`` where none is given) has no value; one line naming it.
    """
    nodes = int(_required(row, "nodes"))
    device = _value(row, "device_type")
    overrides = [f"model={_required(row, 'model')}", f"strategy={_required(row, 'strategy')}"]
    if device is not None:
        overrides.append(f"device={'cpu' if device == 'cpu' else 'cuda'}")
    overrides += [
        f"precision={_required(row, 'precision')}",
        f"train.activation_checkpointing={_flag(row, 'train.activation_checkpointing', False)}",
        f"train.local_batch_size={int(_required(row, 'local_batch_size'))}",
        f"kernels.compile={_flag(row, 'kernels.compile', False)}",
        f"cluster.gpus_per_node={_ranks_per_node(row, nodes)}",
        f"framework={_value(row, 'framework') or 'torch'}",
        f"kernels.fused_attn={_flag(row, 'kernels.fused_attn', True)}",
        f"cluster={cluster or _required(row, 'cluster')}", f"nodes={nodes}"]
    return overrides


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


def compose_row(row: Mapping, cluster: str | None = None) -> RunConfig:
    """The validated :class:`~vitfsdp.config.RunConfig` of one runs.csv ``row``, on profile
    ``cluster`` (default: the row's own, or :data:`GPU_PROFILE` for a GPU row of a profile
    without a GPU's peak): see the module's docstring for the columns read.

    Raises:
        ValueError: a needed column has no value (the message names it), or the point is
            refused or does not compose (the message names the point); one line.
    """
    cfg = _compose(tuple(row_overrides(row, cluster)))
    gpu = _value(row, "device_type") not in (None, "cpu")
    if cluster is None and gpu and peak_flops_for(cfg, "gpu")[0] is None:
        cfg = _compose(tuple(row_overrides(row, GPU_PROFILE)))
    return cfg


def _device(row: Mapping) -> str | None:
    """The plan's device kind of a row (``gpu``, ``cpu``), ``None`` where not recorded."""
    device = _value(row, "device_type")
    return None if device is None else "cpu" if device == "cpu" else "gpu"


def predict_row(row: Mapping, cluster: str | None = None) -> Prediction:
    """This checkout's :class:`~vitfsdp.plan.Prediction` for the run of one runs.csv ``row``
    (memory in GiB per rank, step time in s, global images/s): :func:`compose_row`, then
    :func:`vitfsdp.plan.predict` on the row's device (``device_type``), with its recorded
    ``device_memory_gib`` and ``device_peak_flops`` used only where the profile has none.

    Raises:
        ValueError: as :func:`compose_row`; one line naming the column or the point.
    """
    cfg = compose_row(row, cluster)
    memory, peak = _value(row, "device_memory_gib"), _value(row, "device_peak_flops")
    return predict(cfg, device=_device(row),
                   device_memory_gib=None if memory is None else float(memory),
                   peak_flops=None if peak is None else float(peak))


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
            p = predict_row(row, cluster)
        except ValueError as e:
            failed[index] = str(e).splitlines()[0]
            continue
        source = p.source if p.source != "profile" else (
            f"profile:{compose_row(row, cluster).cluster.name}")
        rows[index] = {"pred_peak_mem_gib": p.peak_mem_gib, "pred_step_time_s": p.step_time_s,
                       "pred_ips": p.ips, "pred_fits": p.fits,
                       "pred_mem_metric": p.pred_mem_metric, "pred_source": source}
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=list(PRED_COLUMNS))
    frame = frame.reindex(runs.index)
    for column in ("pred_fits", "pred_mem_metric", "pred_source"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame, failed
