"""Optional metric sinks fed from the timing windows appended to ``metrics.jsonl``.

Off by default. Rank 0 only (the :class:`vitfsdp.records.RunRecords` writer forwards each
window record it appends, and closes the sinks when the run is recorded as finished):

- ``metrics.tensorboard=true``: TensorBoard event files in ``RUN_DIR/tensorboard/`` written
  with ``torch.utils.tensorboard.SummaryWriter`` (pip package ``tensorboard``); one scalar
  per numeric window field, tag ``window/<field>``, at the window's last step
  (``step_end``). Read with ``tensorboard --logdir RUN_DIR/tensorboard``.
- ``metrics.wandb=offline|online``: a Weights & Biases run (pip package ``wandb``) in
  ``RUN_DIR/wandb/``, project ``metrics.wandb_project``, config = the run's ``run.json``;
  ``offline`` needs no network (``wandb sync RUN_DIR/wandb/offline-run-*`` uploads later,
  https://docs.wandb.ai/guides/technical-faq/setup/#can-i-run-wandb-offline).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

WANDB_MODES = ("offline", "online")
TENSORBOARD_DIR = "tensorboard"


def keep_wandb_out(opens_wandb: bool) -> None:
    """Make ``import wandb`` fail in this process unless it opens the W&B sink
    (``opens_wandb``: rank 0 of a run with ``metrics.wandb`` set). Call before timm is
    imported; does nothing where wandb is imported already.

    timm imports wandb where it is installed (``timm.utils.summary``: ``try: import wandb``,
    for its own training scripts; a model never uses it), and wandb's import makes two
    temporary directories (``tmp*wandb-media``, ``tmp*wandb-artifacts``) that only the
    interpreter's exit removes. A rank leaves by ``os._exit``
    (:func:`vitfsdp.provenance.exit_now`), so every rank of every run left two behind in the
    temporary directory, and spent 0.6-0.9 s of CPU importing wandb. ``sys.modules[name] =
    None`` is Python's own way of marking a module absent (the import raises ImportError,
    which timm catches): https://docs.python.org/3/reference/import.html#the-module-cache
    """
    if not opens_wandb:
        sys.modules.setdefault("wandb", None)


def _remove_wandb_import_dirs() -> None:
    """Remove the temporary directories wandb made at its import (see :func:`keep_wandb_out`):
    the rank that opened the W&B sink leaves by ``os._exit``, past their finalizers. The two
    objects are wandb's (0.17-0.31: ``data_types._private.MEDIA_TMP``,
    ``artifacts.artifact.Artifact._TMP_DIR``); where a release moved one, it stays behind."""
    for module, path in (("wandb.sdk.data_types._private", ("MEDIA_TMP",)),
                         ("wandb.sdk.artifacts.artifact", ("Artifact", "_TMP_DIR"))):
        obj = sys.modules.get(module)
        for name in path:
            obj = getattr(obj, name, None)
        if isinstance(obj, tempfile.TemporaryDirectory):
            obj.cleanup()


def require_package(module: str, field: str, pip_name: str) -> None:
    """Raise a one-line ValueError when ``module`` cannot be imported.

    Raises:
        ValueError: naming the config field that asked for it and the pip package.
    """
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"{field} needs the {pip_name!r} package: pip install {pip_name} "
                         f"(or turn {field} off)")


def _scalars(window: dict) -> dict[str, float]:
    """The window's finite numeric fields (booleans and nulls left out)."""
    return {k: float(v) for k, v in window.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class Sink(Protocol):
    """Something that takes window records."""

    def write(self, window: dict) -> None:
        """Take one window record (a metrics.jsonl line: ``step_end``, ``loss``, ``ips``
        ...; units in the field names); numeric fields become scalars at ``step_end``."""

    def close(self, status: str) -> None:
        """End the run with its status (``completed``, ``failed`` ...), flushing what is
        buffered."""


class TensorBoardSink:
    """Window records as TensorBoard scalars in ``run_dir/tensorboard/``."""

    def __init__(self, run_dir: Path) -> None:
        # optional sink packages, loaded only where metrics.tensorboard / metrics.wandb is on
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR))

    def write(self, window: dict) -> None:
        step = int(window.get("step_end", window.get("window", 0)))
        for name, value in _scalars(window).items():
            self.writer.add_scalar(f"window/{name}", value, global_step=step)
        self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.close()


class WandbSink:
    """Window records as a Weights & Biases run's history (``run_dir/wandb/``)."""

    def __init__(self, run_dir: Path, mode: str, project: str, run_info: dict) -> None:
        # optional sink packages, loaded only where metrics.tensorboard / metrics.wandb is on
        import wandb

        self.run = wandb.init(project=project, mode=mode, dir=str(run_dir),
                              name=run_dir.name, config=_flat_config(run_info))

    def write(self, window: dict) -> None:
        self.run.log(_scalars(window), step=int(window.get("step_end", 0)))

    def close(self, status: str) -> None:
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "completed" else 1)
        _remove_wandb_import_dirs()


def _flat_config(run_info: dict) -> dict[str, Any]:
    """run.json's ``config`` (the resolved run config) or, lacking it, run.json itself."""
    cfg = run_info.get("config")
    return dict(cfg) if isinstance(cfg, dict) else dict(run_info)


def open_sinks(metrics: Any, run_dir: Path, run_info: dict) -> list[Sink]:
    """The sinks ``metrics`` (a :class:`vitfsdp.metrics.MetricsConfig`) asks for; call on
    rank 0 only."""
    sinks: list[Sink] = []
    if metrics.tensorboard:
        sinks.append(TensorBoardSink(run_dir))
        log.info("metrics: TensorBoard events in %s", run_dir / TENSORBOARD_DIR)
    if metrics.wandb:
        sinks.append(WandbSink(run_dir, metrics.wandb, metrics.wandb_project, run_info))
        log.info("metrics: W&B %s run in %s", metrics.wandb, run_dir / "wandb")
    return sinks
