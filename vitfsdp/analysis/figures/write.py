"""Writing the figures: which there are, drawing them into files (beside this process, in a
pool of processes), and keeping those whose inputs did not change."""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pandas as pd

from vitfsdp.analysis.collect import collect_runs
from vitfsdp.analysis.figures.efficiency import plot_efficiency
from vitfsdp.analysis.figures.finish import _save
from vitfsdp.analysis.figures.loss import plot_loss
from vitfsdp.analysis.figures.memory import plot_memory
from vitfsdp.analysis.figures.prefetch import plot_prefetch
from vitfsdp.analysis.figures.recipe import plot_recipe
from vitfsdp.analysis.figures.style import _mpl
from vitfsdp.analysis.figures.tflops import plot_tflops
from vitfsdp.analysis.figures.weak_scaling import plot_weak_scaling
from vitfsdp.analysis.fingerprint import code_fingerprint, frame_hash
from vitfsdp.analysis.rows import loss_curves
from vitfsdp.analysis.schema import FIGURE_COLUMNS, MEASURED_COLUMNS
from vitfsdp.analysis.workshare import WorkShare
from vitfsdp.records import write_json_atomic

log = logging.getLogger(__name__)


#: Every figure by name: the file stem it is written under, and the function drawing it. The
#: loss, prefetch, TFLOP/s and recipe figures are drawn where the runs hold data for them
#: (their functions return ``None`` otherwise, and no file is written).
FIGURES = {"weak_scaling": plot_weak_scaling, "efficiency": plot_efficiency,
           "memory": plot_memory, "loss": plot_loss, "prefetch": plot_prefetch,
           "tflops": plot_tflops, "recipe": plot_recipe}
#: The same: every figure function by name (the name ``write_figures`` checks against).
ALL_FIGURES = FIGURES
#: What a figure that was not drawn needed, by name (the ones that may have nothing to draw).
NOTHING_TO_DRAW = {"loss": "loss", "prefetch": "prefetch ablation",
                   "recipe": "recipe ablation (<recipe>_<n>_<what> presets beside <recipe>)",
                   "tflops": "TFLOP/s per GPU", "weak_scaling": "run", "memory": "run",
                   "efficiency": "line completed at two node counts or more (each "
                                 "line's one efficiency would be its own baseline's 1)"}
#: The figures, longest to draw first (memory has two panels per model, the loss figure a
#: few lines per panel), the order in which :class:`PendingFigures` hands them out.
COST_ORDER = ("memory", "weak_scaling", "efficiency", "prefetch", "loss", "tflops", "recipe")


def write_figures(df: pd.DataFrame, out_dir: str | os.PathLike,
                  formats: tuple[str, ...] = ("png", "svg"),
                  names: tuple[str, ...] = tuple(FIGURES),
                  pool: FigurePool | None = None) -> dict[str, Path]:  # fmt: skip
    """Write figures into ``out_dir`` (created if missing), once per format.

    Args:
        df: a ``collect_runs`` frame.
        out_dir: the directory; files are ``<name>.<format>``.
        formats: PNG at :data:`~vitfsdp.analysis.figures.style.DPI` dpi; SVG is vector (for papers).
        names: which of :data:`FIGURES` (default all): ``weak_scaling``,
            ``memory``, ``loss`` (written when a run recorded a loss), ``prefetch`` (when
            the runs hold an ablation), ``tflops`` (when a run recorded TFLOP/s) and
            ``recipe`` (when the runs hold a recipe ablation).
        pool: processes drawing figures beside this one (:func:`figure_pool`); ``None``
            draws them one after another here. The files are the same either way.

    Returns:
        The path of each figure's first format (by default the PNG), by name; the other
        formats lie beside it with their suffix.

    Raises:
        ValueError: a name is not one of :data:`FIGURES`.
    """
    return PendingFigures(df, out_dir, formats, names, pool).result()


class PendingFigures:
    """Figures being drawn by a :class:`FigurePool`'s processes while this process goes on
    (writing the tables, say); :meth:`result` draws the ones no process has taken yet and
    waits for the rest. Each process holds one figure at a time and is handed the next as
    soon as it is done (:class:`~vitfsdp.analysis.workshare.WorkShare`), so whichever is
    free first takes the next. Without a pool every figure is drawn in :meth:`result`.

    With ``keep_unchanged``, a figure whose inputs (:func:`figure_inputs`) are those it was
    last drawn from in ``out_dir`` (:data:`INPUTS_FILE`), and whose files are all there, is
    kept as it is, not drawn again (:attr:`kept`); :attr:`todo` holds what will be drawn.
    Other arguments and errors as :func:`write_figures`."""

    def __init__(self, df: pd.DataFrame, out_dir: str | os.PathLike,
                 formats: tuple[str, ...] = ("png", "svg"),
                 names: tuple[str, ...] = tuple(FIGURES),
                 pool: FigurePool | None = None,
                 keep_unchanged: bool = False) -> None:  # fmt: skip
        unknown = [n for n in names if n not in FIGURES]
        if unknown:
            raise ValueError(f"unknown figure(s) {unknown}; valid: {', '.join(FIGURES)}")
        self.df, self.out_dir, self.formats = df, Path(out_dir), formats
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.inputs: dict[str, str] = {}  # figure_inputs of each figure, where kept track of
        self.kept: dict[str, Path | None] = {}  # unchanged: its first format's path, or None
        self.inputs_due: tuple[str, ...] = ()  # inputs to take in result(), when drawn anyway
        self.curves: pd.DataFrame | None = None  # the loss curves, once taken
        if keep_unchanged:
            self._keep_unchanged(names)
        todo = sorted((n for n in names if n not in self.kept), key=COST_ORDER.index)
        if pool is not None and "loss" in todo:  # now, not in the pool's thread
            self._loss_curves()
        self.share = WorkShare(todo, self._submit, pool)

    @property
    def todo(self) -> list[str]:
        """The figures neither handed to a process nor drawn here yet, in
        :data:`COST_ORDER`."""
        return list(self.share.left)

    @property
    def futures(self) -> dict[str, Future]:
        """The figures handed to the pool's processes, by name, in that order."""
        return self.share.futures

    def attach(self, pool: FigurePool | None) -> None:
        """Hand the figures left to draw to ``pool``'s processes from now on (a pool started
        once :attr:`todo` is known); ``None``: nothing changes."""
        if pool is not None and self.share.pool is None and "loss" in self.todo:
            self._loss_curves()
        self.share.attach(pool)

    def _keep_unchanged(self, names: tuple[str, ...]) -> None:
        """Fill :attr:`inputs` and :attr:`kept`: the figures whose inputs equal those
        recorded in :data:`INPUTS_FILE` when they were drawn, with every format's file in
        place (or recorded as having had nothing to draw). With no record at all, every
        figure is drawn: their inputs are taken in :meth:`result`, once they are handed out."""
        done = _read_inputs(self.out_dir / INPUTS_FILE)
        if not done:
            self.inputs_due = names
            return
        self._take_inputs(names)
        for name in names:
            before = done.get(name) or {}
            if before.get("inputs") != self.inputs[name]:
                continue
            if not before.get("drawn"):
                self.kept[name] = None
            elif all((self.out_dir / f"{name}.{fmt}").is_file() for fmt in self.formats):
                self.kept[name] = self.out_dir / f"{name}.{self.formats[0]}"

    def _take_inputs(self, names: tuple[str, ...]) -> None:
        """:attr:`inputs` of ``names`` (:func:`figures_inputs`)."""
        if names:
            curves = self._loss_curves() if "loss" in names else None
            self.inputs |= figures_inputs(self.df, names, self.formats, curves)

    def _loss_curves(self) -> pd.DataFrame:
        """The runs' loss curves (:func:`~vitfsdp.analysis.rows.loss_curves`: what
        ``collect_runs`` kept in this process, which the pool's processes lack), taken once."""
        if self.curves is None:
            self.curves = loss_curves(self.df)
        return self.curves

    def _submit(self, pool: FigurePool, name: str) -> Future:
        """Hand figure ``name`` to a process of ``pool`` (with the loss curves, which the
        pool's processes lack)."""
        curves = self.curves if name == "loss" else None
        return pool.submit(_write_figure, name, self.df, self.out_dir, self.formats, curves)

    def result(self) -> dict[str, Path]:
        """Draw what is left, wait for the pool; the path of each figure's first format
        (by default the PNG), by name."""
        written: dict[str, Path | None] = {}
        while (name := self.share.take()) is not None:  # every process is busy: here
            written[name] = _write_figure(name, self.df, self.out_dir, self.formats)
        self._take_inputs(self.inputs_due)  # while the pool's processes draw
        for name, future in list(self.futures.items()):
            try:
                written[name] = future.result()
            except BrokenProcessPool as e:  # the process died (killed for memory, say)
                log.warning("the process drawing %s ended (%s); drawing it here", name, e)
                written[name] = _write_figure(name, self.df, self.out_dir, self.formats)
        if self.inputs:
            _write_inputs(self.out_dir / INPUTS_FILE, self.inputs, {**written, **self.kept})
        if self.kept:
            log.info("kept %d figure(s) whose runs did not change: %s", len(self.kept),
                     ", ".join(self.kept))
        paths = {}
        for name in FIGURES:  # in the order of FIGURES, however they were drawn
            if name not in written and name not in self.kept:
                continue
            path = written.get(name, self.kept.get(name))
            if path is None:
                log.info("no %s figure: the runs hold no %s", name, NOTHING_TO_DRAW[name])
                continue
            for fmt in self.formats:
                if name in written:
                    log.info("wrote %s", path.with_suffix(f".{fmt}"))
            paths[name] = path
        return paths


#: Beside the figures: what each was last drawn from (:func:`figure_inputs`) and whether it
#: was drawn (``{"memory": {"inputs": "<sha1>", "drawn": true}, ...}``), so an analysis of
#: unchanged runs keeps the figures (``PendingFigures(keep_unchanged=True)``).
INPUTS_FILE = ".figure_inputs.json"


def figure_inputs(df: pd.DataFrame, name: str, formats: tuple[str, ...] = ("png", "svg"),
                  curves: pd.DataFrame | None = None) -> str:  # fmt: skip
    """A fingerprint (SHA-1, hex) of everything figure ``name`` is drawn from: the columns
    of ``df`` it reads (every column but the :data:`MEASURED_COLUMNS` other than its own,
    :data:`FIGURE_COLUMNS`), row by row in order; for ``loss``, the loss curves
    (``curves``, else :func:`~vitfsdp.analysis.rows.loss_curves`); the ``formats``; and
    the code that draws it
    (:func:`~vitfsdp.analysis.fingerprint.code_fingerprint`). Equal fingerprints draw equal files.

    Raises:
        KeyError: ``name`` is not one of :data:`FIGURES`.
    """
    return figures_inputs(df, (name,), formats, curves)[name]


def figures_inputs(df: pd.DataFrame, names: Iterable[str],
                   formats: tuple[str, ...] = ("png", "svg"),
                   curves: pd.DataFrame | None = None) -> dict[str, str]:  # fmt: skip
    """:func:`figure_inputs` of each of ``names``, by name. The columns every figure reads
    (all but :data:`MEASURED_COLUMNS`: which runs, their settings) are hashed once, not once
    per figure; each figure's fingerprint holds that hash, its own measured columns' and,
    for ``loss``, the curves' (``curves``, else computed once here).

    Raises:
        KeyError: a name is not one of :data:`FIGURES`.
    """
    names = list(names)
    measured = set(MEASURED_COLUMNS)
    shared = [c for c in df.columns if c not in measured]
    shared_digest = hashlib.sha1(frame_hash(df[shared])).digest()
    if "loss" in names and curves is None:
        curves = loss_curves(df)
    inputs = {}
    for name in names:
        own = set(FIGURE_COLUMNS[name])
        columns = [c for c in df.columns if c in measured and c in own]
        digest = hashlib.sha1(code_fingerprint().encode())
        digest.update(repr((name, formats, shared, columns)).encode())
        digest.update(shared_digest)
        digest.update(frame_hash(df[columns]))
        if name == "loss":
            digest.update(frame_hash(curves))
        inputs[name] = digest.hexdigest()
    return inputs


def _read_inputs(path: Path) -> dict:
    """:data:`INPUTS_FILE`'s record, ``{}`` where there is none or it cannot be read (every
    figure is drawn then)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_inputs(path: Path, inputs: dict[str, str], paths: dict[str, Path | None]) -> None:
    """Record ``inputs`` of each figure in ``paths`` (drawn: a path; nothing to draw:
    ``None``) into :data:`INPUTS_FILE`, keeping the other figures' records (atomically:
    an analysis killed half way leaves the old record or the new one)."""
    record = _read_inputs(path)
    record |= {name: {"inputs": inputs[name], "drawn": paths[name] is not None}
               for name in paths if name in inputs}
    write_json_atomic(path, record)


class FigurePool(ProcessPoolExecutor):
    """Processes that work beside this one: they read part of the records
    (:func:`~vitfsdp.analysis.collect.collect_runs`' ``pool``), then draw figures
    (:class:`PendingFigures`).

    They are spawned, not forked (a fork of a process holding threads, BLAS's or a logging
    handler's, can deadlock), and start at once, so create the pool before
    :func:`~vitfsdp.analysis.collect.collect_runs`, and shut it down after the figures
    (``with`` or :meth:`shutdown`). The first time the pool has nothing to do (its processes
    started, the records they were given read), each process imports matplotlib and loads
    its font (:func:`_warm_up`) while this one is still busy (building the runs' frame,
    say), so the figures they are given next start at once.

    Args:
        workers: how many processes (at least 1).
    """

    def __init__(self, workers: int) -> None:
        super().__init__(workers, mp_context=multiprocessing.get_context("spawn"),
                         initializer=_leave_without_teardown)
        self.workers = workers
        self._lock = threading.Lock()
        self._queued = 0  # submitted, not yet done
        self._cold = workers  # warm-ups still to hand out
        for _ in range(workers):  # each submit starts a process while none is idle
            self.submit(_started)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """As :meth:`ProcessPoolExecutor.submit`; the pool warms up when it next is idle."""
        with self._lock:
            self._queued += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._when_done)
        return future

    def _when_done(self, _: Future) -> None:
        """A task ended: once nothing is queued, hand out the warm-ups (this pool's thread)."""
        with self._lock:
            self._queued -= 1
            warm, self._cold = (self._cold, 0) if self._queued == 0 else (0, self._cold)
        for _ in range(warm):
            try:
                self.submit(_warm_up)
            except RuntimeError:  # shutting down: nothing left to draw
                return


def figure_pool(jobs: int | None = None, figures: int = len(FIGURES)) -> FigurePool | None:
    """The pool for ``jobs`` processes drawing figures at once, this one included, or
    ``None`` for ``jobs=1`` (every figure drawn in this process).

    Args:
        jobs: default one per figure to draw, at most the CPUs this process may run on
            (``os.sched_getaffinity``: a Slurm step's CPUs, not the node's).
        figures: how many figures there are to draw (default all of :data:`FIGURES`): no
            more processes than that.
    """
    if jobs is None:
        cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else os.cpu_count() or 1)  # fmt: skip
        jobs = cpus
    jobs = min(jobs, figures)
    return FigurePool(jobs - 1) if jobs > 1 else None


def _leave_without_teardown() -> None:
    """Run first in each new process: once it has been told to stop and has flushed its
    output, it leaves without the interpreter's teardown (the frame and figures it holds:
    about half a second that :meth:`FigurePool.shutdown` would wait for)."""
    atexit.register(os._exit, 0)  # the last handler registered runs first


def _started() -> None:
    """Run in a new process: nothing (its start, the imports, is the work)."""


def _warm_up() -> None:
    """Run in a new figure process: load the font every figure's text is measured with."""
    _mpl().font_manager.findfont(_mpl().FontProperties(
        family=_mpl().matplotlib.rcParams["font.family"]))


def _write_figure(name: str, df: pd.DataFrame, out_dir: Path, formats: tuple[str, ...],
                  curves: pd.DataFrame | None = None) -> Path | None:  # fmt: skip
    """Draw figure ``name`` of ``df`` and save it once per format; the first format's path,
    or ``None`` when the runs hold nothing to draw (no loss, no ablation)."""
    fig = (FIGURES[name](df, curves=curves) if name == "loss" and curves is not None
           else FIGURES[name](df))  # fmt: skip
    if fig is None:
        return None
    for fmt in formats:
        _save(fig, out_dir / f"{name}.{fmt}", quiet=True)
    return out_dir / f"{name}.{formats[0]}"


def figure_script(name: str, argv: list[str]) -> int:
    """The body of ``analysis/<name>.py``: write one figure for each sweep dir in ``argv``
    into ``SWEEP_DIR/analysis`` (PNG and SVG); 2 on bad input (no such dir, no runs)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not argv or any(a.startswith("-") for a in argv):
        script = Path(sys.argv[0]).name  # the script run (prefetch_ablation.py draws prefetch)
        if not script.endswith(".py") or script == "__main__.py":  # python -m, an entry point
            script = f"{name}.py"
        print(f"usage: python analysis/{script} SWEEP_DIR [SWEEP_DIR ...]", file=sys.stderr)
        return 2
    try:
        runs = {sweep_dir: collect_runs(sweep_dir) for sweep_dir in argv}
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for sweep_dir, df in runs.items():
        write_figures(df, Path(sweep_dir) / "analysis", names=(name,))
    return 0
