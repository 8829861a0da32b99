"""A self-contained report of a sweep: ``report.md`` and ``report.html`` with every figure
and table of the study.

``report.md`` links the figures (PNG, with the SVG beside it) by relative paths, so the
analysis directory can be moved or committed as a whole; ``report.html`` embeds the PNGs as
base64 data, so the one file can be mailed or opened anywhere. Tables are the frames of
:mod:`vitfsdp.analysis.tables`, formatted for reading: fractions as percentages, images/s
to the unit, a column no run measured (older records) left out.
"""

from __future__ import annotations

import base64
import datetime
import html
import logging
import os
import re
import shlex
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vitfsdp.analysis.figures import DPI, DRAWN_KEY
from vitfsdp.analysis.figures.style import MIN_ERROR_BAR
from vitfsdp.analysis.lines import (
    ONE_DEVICE,
    busy_missing,
    configurations,
    contention_note,
    format_efficiency,
    framework_partners,
    invented_runs,
    numeric_column,
    window_spreads,
)
from vitfsdp.analysis.schema import DISPLAY, RATE, flop_unit, format_rate
from vitfsdp.analysis.tables import (
    CONTENDED,
    IMAGENET_TRAIN_IMAGES,
    PREFETCH_ORDER,
    calibration_summary,
    competition_text,
    figures_contended,
    judged_count,
    loaded_runs,
    noisy_text,
    observed_noise,
    prefetch_limits,
    resumed_text,
    runs_per_point,
    verdict_kind,
)
from vitfsdp.analysis.verdict import (
    BEYOND,
    FEW_RUNS,
    HOST_BOUND,
    IN_NOISE,
    MAX_SEPARATION_CHANCE,
    NOT_KNOWN_REPEATS,
    NOT_LIKE_FOR_LIKE,
    NOT_RESULTS,
    ONE_RUN,
    PARTED_LOSS_FACTOR,
    PARTED_LOSS_FLOOR,
    UNMEASURED,
    WITHIN,
    loss_parted,
    separation_chance,
)
from vitfsdp.core.layout import COMMANDS_FILE
from vitfsdp.core.throughput import HOST_BOUND_BUSY_FRAC, NOISY_SPREAD
from vitfsdp.plan import STARTUP_S
from vitfsdp.plan.memory import CPU_BASELINE_GIB
from vitfsdp.provenance import git_state, saved_overrides
from vitfsdp.records import read_jsonl

log = logging.getLogger(__name__)

#: What makes a point host-bound, in the report's words (:data:`HOST_BOUND_BUSY_FRAC`).
BUSY_BELOW = (f"device busy less than {HOST_BOUND_BUSY_FRAC:.0%} of the timed windows (on "
              "its least busy rank)")
#: Figure captions by figure name (the keys of ``write_figures``' result): what every such
#: figure draws; :data:`MARK_CAPTIONS` adds what a given figure drew besides.
CAPTIONS = {
    "weak_scaling": "Weak scaling: global images/s against nodes, one panel per model.",
    "efficiency": "Weak-scaling efficiency against nodes on a linear axis, where the log axis "
                  "of images/s hides differences of a few percent: each point's images/s "
                  "(median over repeats) over the ideal from its line's smallest completed "
                  "node count (1, dashed); its bounds are the point's slowest measurement "
                  "over the ideal from the baseline's fastest, and the other way round.",
    "memory": "Peak memory per GPU (per rank on CPU) against nodes; FULL_SHARD and the other "
              "strategies in separate panels.",
    "prefetch": "Backward prefetch x limit_all_gathers: images/s per strategy at the largest "
                "node count the ablation ran (every node count: prefetch.csv).",
    "loss": "Training loss (mean over each timing window) against step, a line per point "
            "(median over repeats), lighter for fewer nodes within its strategy's colour "
            "and n=<nodes> at its end (lines that end alike share one label: n=1,2,4, or "
            "past three node counts their range and count, n=1-16 (5)); warm-up "
            "windows included, and runs that did not complete up to their last window. The "
            "global batch grows with the node count (weak scaling: the local batch times the "
            "ranks), so a line of more nodes sees more images a step and its loss may fall "
            "faster per step for that alone. Each strategy's line is dashed in its "
            "colour, the strategies' dashes in turn, so lines that coincide (strategies that "
            "train alike) show every colour.",
    "recipe": "Recipe ablation: each cumulative recipe step's images/s relative to the "
              "recipe's baseline (step 0) at the same node count, median over repeats; the "
              "value above each bar (every step and node count: recipe.csv).",
    "tflops": "Model FLOP rate per GPU (3 x forward FLOPs x images/s per GPU; per rank on "
              "CPU) against the number of GPUs, a line per configuration, median over "
              "repeats; in TFLOP/s, or GFLOP/s where TFLOP/s would read below 0.1 (CPU "
              "ranks, small models), as the axis says.",
}  # fmt: skip
#: The caption's words for each kind of mark a figure drew (the PNG's ``DRAWN_KEY``), in
#: caption order; a figure saved without that list gets :data:`CAPTIONS` alone.
MARK_CAPTIONS = {
    "state_params": "solid bar: the parameters a rank holds, counted from its local shards "
                    "(the most any rank held)",
    "state_grads": "hatched bar: its gradients",
    "state_optimizer": "dotted bar: its optimizer state",
    "state_rest": "hollow bar: the measured peak above the model state",
    "state_tiny": "the model state a rank holds is too small to see beside its peak (its "
                  "bytes: the memory table)",
    "ideal": "dashed: ideal linear scaling from each line's smallest node count",
    "above_ideal": ("grey square: efficiency above 100 % of ideal, not super-linear: its "
                    "line's baseline (host-bound, contended or one run: points.csv "
                    "`above_ideal_cause`) or noise"),
    "host_bound": f"grey hexagon: a host-bound point, its {BUSY_BELOW}: its figures "
                  "(images/s, TFLOP/s) measure the wrapper and the loop, not the device or the "
                  "network",
    "device": "black dotted: the device's memory",
    "ranks": "thin bar without caps, just right of a point: down to the minimum over ranks "
             f"(none where the ranks' peaks are within {MIN_ERROR_BAR:.0%} of the axis: a "
             "bar that short hides under the marker)",
    "repeats": f"error bars: min-max over repeats (not drawn under {MIN_ERROR_BAR:.0%} of "
               "the median)",
    "efficiency_bounds": "capped bars: efficiency bounds (slowest run / baseline's fastest to "
                         "fastest / baseline's slowest: points.csv efficiency_min-"
                         "efficiency_max, wider than the point's repeats alone; not drawn "
                         f"under {MIN_ERROR_BAR:.0%} of the value)",
    "one_run": "hollow marker, one run: no spread over repeats (a point that completed once)",
    "efficiency_windows": "thin bar without caps, through the hollow marker of a point that "
                          "ran once: its efficiency from its run's slowest and fastest windows "
                          "against the baseline's fastest and slowest (its repeats, or its one "
                          "run's windows), the least the bounds can be (not drawn under "
                          f"{MIN_ERROR_BAR:.0%} of the value)",
    "windows": "thin bar without caps (through a line's hollow point; on a bar, at its top) "
               "where a point ran once: min-max over its run's timed windows, the least its "
               "noise can be (the noise between runs is not measured; not drawn under "
               f"{MIN_ERROR_BAR:.0%} of the value)",
    "predicted": "dotted: the plan's prediction (of memory: of what the legend names, the "
                 "peak reserved memory on a GPU, XLA's peak in use for JAX on a GPU (its "
                 "reserved is its preallocated pool), the resident memory on CPU, just left "
                 "of the measured peak)",
    "reserved": "hollow thin diamonds, just right of the measured peak: measured peak reserved "
                "memory, what the plan predicts there (the dotted line compares with them, "
                "not with the allocated line)",
    "device_used": "three-spoked marks, right of the reserved diamonds: the whole "
                   "device's used memory (NVML or AMD SMI: the CUDA context, NCCL's buffers "
                   "and other processes included) above what the allocator holds",
    "failed": "x: runs that did not complete, at what they reached before they ended (the "
              "median over a point's such runs: of images/s, each run's median over its "
              "timed windows; of memory, each run's largest peak that a window or its "
              "failing ranks recorded, so an OOM before any window stands at its "
              "summary.json memory_at_failure), else side by side in the panel's bottom "
              "band (the note under the panel names them)",
    "skipped": "hollow diamond: a point skipped as predicted not to fit",
    "contended": "black dashed ring: other work competed with a run of the point (the footer "
                 "names each)",
    "reference": "hollow star: a published figure of the same setup (reference.csv)",
    "published_other": "orange line with its value: a published figure drawn beside ours, not "
                       "compared (another model, device or measure; reference.csv's differs "
                       "says which)",
    "peak": "black dotted: the device's peak, MFU on the right axis",
    "chance": "grey dashed: chance level, ln(number of classes)",
}
#: Report figures are shown at this many times their print size (7-8 pt text at print size
#: is 9-11 CSS px: too small on a screen), at most the PNG's own pixels and the page width.
SCREEN_SCALE = 2.0
#: How every table prints a missing value (a figure not measured, a setting that does not
#: apply).
MISSING = "-"
#: CSS pixels per inch: a figure shown at its natural (print) size is its inches x this.
CSS_PX_PER_IN = 96
#: Display names and formats of table columns: (header, format). Fractions become percent.
#: Those of runs.csv's columns are declared with the columns
#: (:data:`vitfsdp.analysis.schema.DISPLAY`), those of the tables' own columns here.
COLUMN_FORMATS = {
    **DISPLAY,
    "configuration_a": ("configuration", "{}"), "configuration_b": ("same computation as", "{}"),
    "cost_per_epoch": ("cost/epoch", "{:,.2f}"), "difference": ("difference", "{}"),
    "epoch_hours": ("hours/epoch", "{:.3g}"), "host_bound": ("host-bound", "{}"),
    "ideal_ips": ("ideal images/s", RATE), "ideal_from": ("ideal from (nodes)", "{:d}"),
    "ips_a": ("images/s", RATE),
    "ips_b": ("its images/s", RATE), "runs_a": ("runs", "{:d}"),
    "runs_b": ("its runs", "{:d}"), "ips_range": ("images/s min-max (repeats)", "{}"),
    "ips_repeat_spread": ("repeat spread", "{:.0%}"), "noisy": ("noisy", "{}"),
    "runs_failed": ("runs failed", "{:d}"), "runs_contended": ("runs beside other work", "{:d}"),
    "efficiency_range": ("efficiency bounds", "{}"),
    "ips_ratio": ("ratio", "{:.2f}x"), "ips_rel_error": ("ips error", "{:+.0%}"),
    "ips_vs_best": ("vs best variant", "{:.0%}"), "jax_ips": ("JAX images/s", RATE),
    "jax_busy_frac": ("JAX device busy", "{:.0%}"), "jax_runs": ("JAX runs", "{:d}"),
    "torch_runs": ("PyTorch runs", "{:d}"), "torch_failed": ("PyTorch runs failed", "{:d}"),
    "jax_failed": ("JAX runs failed", "{:d}"),
    "jax_over_torch": ("JAX / PyTorch", "{:.2f}"), "label": ("study", "{}"),
    "log_link": ("log", "{}"), "max_abs_rel_error": ("max |error|", "{:.1%}"),
    "measured": ("measured", RATE), "measured_mem_gib": ("measured (GiB)", "{:.2f}"),
    "median_abs_rel_error": ("median |error|", "{:.1%}"),
    "median_rel_error": ("median error", "{:+.1%}"), "mem_rel_error": ("mem error", "{:+.0%}"),
    "mem_above_baseline_rel_error": ("above baseline", "{:+.0%}"),
    "metric": ("metric", "{}"), "node_hours_per_epoch": ("node-hours/epoch", "{:.3g}"),
    "num_repeats": ("repeats", "{:d}"), "num_runs": ("runs", "{:d}"),
    "published": ("published", RATE),
    "ratio_per_device": ("measured / published, per device", "{:.3g}"),
    "relative_ips": ("x baseline", "{:.2f}"), "runner_up": ("runner-up", "{}"),
    "vs_baseline": ("vs baseline", "{}"), "vs_best": ("vs fastest", "{}"),
    "runs_ended": ("runs that did not complete", "{}"),
    "scaling_efficiency": ("scaling efficiency", "{:.0%}"),
    "peak_mem_since": ("peak counted since", "{}"),
    "speedup_over_runner_up": ("ips over runner-up", "{:.2f}x"),
    "statuses": ("not completed", "{}"), "step": ("step", "{:d}"),
    "step_time_rel_error": ("step error", "{:+.0%}"), "torch_ips": ("PyTorch images/s", RATE),
    "torch_busy_frac": ("PyTorch device busy", "{:.0%}"),
    "torch_recipe": ("PyTorch recipe", "{}"),
    "torch_loss": ("PyTorch final loss", "{:.3g}"), "jax_loss": ("JAX final loss", "{:.3g}"),
    "unit": ("unit", "{}"),
}  # fmt: skip


@dataclass
class Section:
    """One titled section of the report: text, then figures and/or tables."""

    title: str
    text: str = ""
    figures: Sequence[str] = ()  # figure names (``write_figures``' keys), shown if written
    table: pd.DataFrame | None = None  # formatted for display (strings)
    #: the section is about its figures: left out, title and text, where none was written
    #: (the loss section of runs that recorded no loss)
    needs_figure: bool = False

    def shown(self, figures: Mapping[str, Path]) -> bool:
        """Whether the report shows the section, given the figures written."""
        return not self.needs_figure or bool(_written(self, figures))


def report_sections(tables: Mapping[str, pd.DataFrame], dataset_size: int,
                    sweep_dirs: Sequence[Path] = (),
                    out_dir: str | os.PathLike | None = None,
                    command: str | None = None) -> list[Section]:  # fmt: skip
    """The report's sections, in order, from the study's tables: provenance, runs, weak
    scaling, PyTorch and JAX (when both ran), memory, training loss, best configuration,
    cost, prefetch ablation, failures, calibration. Every table a section shows is the one
    ``python -m vitfsdp.analysis`` wrote beside it, not computed again.

    Args:
        tables: :func:`~vitfsdp.analysis.tables.study_tables` of the runs, by file stem
            (``runs`` is every run, as ``collect_runs`` read them).
        dataset_size: images per epoch the cost table assumed (``study_tables``' own).
        sweep_dirs: the sweep directories, whose ``multirun.yaml`` gives the sweep command.
        out_dir: where the report is written; logs are linked relative to it.
        command: the analysis command that writes the report, shell-quoted
            (:func:`vitfsdp.provenance.command_line`); None: not known (not shown).
    """
    df, points = tables["runs"], tables["points"]
    flops = flop_formats(df)
    scaled = scaled_at_all(points)
    labelled = _with_range(points).assign(ideal_from=ideal_from(points, df))
    contended = ["runs_contended"] if _count_column(points, "runs_contended").any() else []
    competed = competition_text(df)
    equivalence = tables["equivalence"]
    noise = observed_noise(equivalence)
    sections = [
        invented_section(df),
        Section("Not a result: other work competed", f"{competed[0].upper()}{competed[1:]}.")
        if competed else None,
        Section("Provenance", table=provenance_table(df, sweep_dirs, command)),
        Section("Runs", _runs_text(df) + repeats_text(df, points)),
        Section("Weak scaling" if scaled else ONE_DEVICE_TITLE,
                ("Throughput per point (median over repeats), ideal linear scaling from each "
                 "line's smallest node count (the efficiency's bounds: the point's slowest "
                 "measurement over the ideal from the baseline's fastest, and the other way "
                 "round; repeats, else one run's windows)" if scaled else
                 f"Throughput per point (median over repeats), {ONE_DEVICE_TEXT}")
                + _flops_text(labelled) + "." + baseline_text(labelled, df)
                + _above_ideal_text(labelled) + noisy_points_text(labelled)
                + resumed_runs_text(df)
                + _sent_text(labelled) + host_bound_text(labelled, df),
                ["weak_scaling", "efficiency", "tflops"],
                display(one_device(labelled), ["model", "configuration", "nodes", "world_size",
                                   "num_repeats", "runs_failed", *contended, "ips",
                                   "ips_range",
                                   "ips_repeat_spread", "noisy", "ideal_ips",
                                   "ideal_from", "scaling_efficiency", "efficiency_range",
                                   "tflops_per_gpu", "mfu", "hw_tflops_per_gpu", "hfu",
                                   "device_busy_frac", "device_busy_min_frac", "host_bound",
                                   "sent_gb_per_node_max",
                                   "sent_gb_total"], flops)),
        _framework_section(tables["framework_ratio"], df),
        _reference_section(tables["reference"]),
        Section("Memory", _memory_text(labelled) + not_completed_text(df, MEMORY_MISSING),
                ["memory"],
                display(memory_rows(below_device(labelled)),
                        ["model", "configuration", "nodes", "peak_mem_gib", "peak_mem_since",
                         "peak_mem_min_gib",
                         "state_params_gib", "state_grads_gib", "state_optimizer_gib",
                         "peak_mem_reserved_gib", "device_mem_used_gib", "device_memory_gib",
                         "memory_limit_gib", "alloc_retries", "num_ooms"])),
        Section("Training loss", "Every point's loss against step: each configuration "
                "trained.", ["loss"], needs_figure=True),
        Section("Best configuration per model and node count",
                best_text(tables["best"], points, noise, runs_per_point(df, points))
                + not_completed_text(df, BEST_MISSING),
                table=display(one_device(tables["best"].assign(
                    ideal_from=ideal_from(tables["best"], df))),
                              ["model", "nodes", "configuration", "ips", "scaling_efficiency",
                               "ideal_from", "tflops_per_gpu", "mfu", "peak_mem_gib",
                               "runner_up", "speedup_over_runner_up", "difference",
                               "host_bound"], flops)),
        _equivalence_section(equivalence),
        Section("Cost per epoch", _cost_text(points, dataset_size, df)
                + _cost_caveats(points) + not_completed_text(df, COST_MISSING),
                table=display(labelled, ["model", "configuration", "nodes", "num_repeats",
                                         "runs_failed", "ips", "ips_repeat_spread", "noisy",
                                         "host_bound", "epoch_hours", "node_hours_per_epoch",
                                         "price_per_node_hour", "cost_per_epoch"])),
        _prefetch_section(tables["prefetch"]),
        _recipe_section(tables["recipe"]),
        _failures_section(tables["failures"], out_dir),
        *_calibration_sections(tables["calibration"], df),
    ]
    return [s for s in sections if s is not None]


#: The throughput section's title where every point ran on one device
#: (:func:`scaled_at_all` False), in place of "Weak scaling" ...
ONE_DEVICE_TITLE = "Throughput on one device (no scaling measured)"
#: ... and what it says there.
ONE_DEVICE_TEXT = ("each on one device (world size 1): no sharding across ranks and no "
                   "collectives, so nothing was scaled and the tables print no ideal and no "
                   "scaling efficiency (each point is its own baseline)")

#: What :func:`not_completed_text` says of a configuration none of whose runs completed at a
#: node count, in the best-configuration section ...
BEST_MISSING = ("is not ranked there: the fastest is the fastest of the configurations that "
                "completed")
#: ... in the cost section ...
COST_MISSING = ("has no cost there: the cheapest is the cheapest of the configurations that "
                "completed")
#: ... and in the memory section.
MEMORY_MISSING = ("has no row there (what its runs reached before they ended: failures.csv); "
                  "another's peak is over its completed runs only")


def not_completed_text(df: pd.DataFrame, missing: str) -> str:
    """The configurations whose runs did not all complete, one sentence per node count,
    read from the runs (``df``, a ``collect_runs`` frame: not completed, or completed
    without a measured ips, as failures.csv counts them), each with its status counts over
    its runs there, e.g. ``" At 4 node(s): vit_tiny DDP 3 of 3 oom (none completed)."``,
    then what a configuration with no completed run means for the section (``missing``:
    :data:`BEST_MISSING`, :data:`MEMORY_MISSING`); ``""`` where every run completed."""
    done = (df["status"] == "completed") & df["ips"].notna()
    if df.empty or done.all():
        return ""
    status = df["status"].fillna("unknown").mask(df["status"] == "completed",
                                                 "completed without ips")
    frame = pd.DataFrame({"model": df["model"], "configuration": configurations(df),
                          "nodes": df["nodes"], "done": done, "status": status})
    sentences = []
    for nodes, at in frame.groupby("nodes", dropna=False, sort=True):
        named = [f"{model} {conf} {_status_counts(runs)}" for (model, conf), runs in
                 at.groupby(["model", "configuration"], dropna=False, sort=True)
                 if not runs["done"].all()]
        if named:
            where = "an unknown node count" if pd.isna(nodes) else f"{nodes:g} node(s)"
            sentences.append(f" At {where}: {'; '.join(named)}.")
    return (" **Not completed, by node count** (runs.csv `status`; why: "
            "failures.csv):" + "".join(sentences) + " A configuration none of whose runs "
            f"completed at a node count {missing}.")


def _status_counts(runs: pd.DataFrame) -> str:
    """How many of a configuration's runs at a node count did not complete, and how they
    ended: ``"3 of 3 oom (none completed)"``, ``"2 of 3 (1 oom, 1 timeout)"``."""
    ended = runs.loc[~runs["done"], "status"].value_counts()
    counts = (f"{ended.iloc[0]} of {len(runs)} {ended.index[0]}" if len(ended) == 1 else
              f"{ended.sum()} of {len(runs)} ("
              + ", ".join(f"{n} {status}" for status, n in ended.items()) + ")")
    return counts + (" (none completed)" if not runs["done"].any() else "")


def best_text(best: pd.DataFrame, points: pd.DataFrame, noise: float = float("nan"),
              runs: pd.Series | None = None) -> str:  # fmt: skip
    """The best-configuration section's words: how a win is judged, and which rows are not
    a result (their ratio is not a speed-up: :func:`vitfsdp.analysis.verdict.judge`).

    Args:
        best: :func:`~vitfsdp.analysis.tables.best_table` of ``points`` under ``noise``.
        points: a :func:`~vitfsdp.analysis.tables.points_table` frame.
        noise: :func:`~vitfsdp.analysis.tables.observed_noise` of the sweep.
        runs: each point's runs of any status
            (:func:`~vitfsdp.analysis.tables.runs_per_point`); None: only completed ones
            known.
    """
    text = ("The fastest point per model and node count, and its images/s over the second "
            "fastest's. A ratio is a speed-up only where the fastest point's lowest run stays "
            "above the runner-up's highest, both ran often enough that two sets of runs of "
            "one configuration would separate so by chance at most "
            f"{MAX_SEPARATION_CHANCE:.0%} of the time (3 runs each, or 2 against 5; 2 each "
            "separate 1 time in 3; the count holds for repeats of one sweep, run in rounds, "
            "not for repeats added on another day), and the ratio is larger than the noise "
            "check's (two names for one computation).")
    kinds = best["difference"].map(verdict_kind)
    contended = best[kinds == CONTENDED]
    if len(contended):
        which = ", ".join(f"{r.model} at {r.nodes} node(s) ({r.configuration}"
                          + (f" against {r.runner_up}, {r.speedup_over_runner_up:.2f}x"
                             if r.runner_up else "")
                          + f": other work competed{_contended_detail(r.difference)})"
                          for r in contended.itertuples())
        text += (" **Not a result, other work competed** with runs of the fastest point or "
                 f"the runner-up, so nothing is ranked there (best.csv `runs_contended`): "
                 f"{which}.")
    for verdict, words in (
            (WITHIN, "**No difference** within the spread, whatever the ratio"),
            (IN_NOISE, f"**Within observed noise** (the noise check differed {noise:.2f}x)"),
            (ONE_RUN, "**Not established**: a point ran once, and one run's windows do not "
                      "hold a second run"),
            (FEW_RUNS, "**Not established on so few runs**: apart, but two configurations "
                       "that are one would separate so by chance more than "
                       f"{MAX_SEPARATION_CHANCE:.0%} of the time")):
        tied = best[kinds == verdict]
        if len(tied):
            which = ", ".join(f"{r.model} at {r.nodes} node(s) ({r.configuration} against "
                              f"{r.runner_up}, {r.speedup_over_runner_up:.2f}x)"
                              for r in tied.itertuples())
            text += f" {words}: {which}."
    failed = [(r, _failed_notes(r.difference)) for r in best.itertuples()]
    failed = [(r, notes) for r, notes in failed if notes]
    if failed:
        which = ", ".join(f"{r.model} at {r.nodes} node(s) ({r.configuration}: {notes})"
                          for r, notes in failed)
        text += (f" **Runs that did not complete:** {which}: a point's images/s are the "
                 "median of its runs that completed (best.csv `runs_failed`; which and why: "
                 "failures.csv).")
    if kinds.isin(NOT_RESULTS).any():
        text += rerun_advice(points, runs, best)
    if len(contended):
        text += " Rerun the points other work competed with on a quiet host."
    bound = best[best["host_bound"].fillna(False).astype(bool)]
    if len(bound):
        which = ", ".join(f"{r.model} at {r.nodes} node(s)" for r in bound.itertuples())
        text += (f" **Host-bound:** at {which} the fastest or the runner-up ran with its "
                 f"{BUSY_BELOW}, so the ranking there is of host loops and wrappers, not of "
                 "the strategies' communication; a larger local batch or fewer FSDP units "
                 "(strategy.blocks_per_unit) move the step back onto the device.")
    pooled = best[kinds == NOT_KNOWN_REPEATS]
    if len(pooled):
        which = ", ".join(f"{r.model} at {r.nodes} node(s)" for r in pooled.itertuples())
        text += (f" **Not known repeats:** at {which} the fastest or the runner-up pools runs "
                 "that share a repeat label (points.csv `runs_share_repeat`, "
                 "`repeats_differ`), so its median images/s and final loss are not known to "
                 "be one configuration's, and nothing is ranked there; give repeated runs "
                 "distinct repeat=N.")
    unlike = best[kinds == NOT_LIKE_FOR_LIKE]
    if len(unlike):
        which = ", ".join(f"{r.model} at {r.nodes} node(s) ({r.configuration} against "
                          f"{r.runner_up})" for r in unlike.itertuples())
        text += (f" **Not like-for-like (loss differs):** at {which} the fastest and the "
                 "runner-up did not train alike (final losses "
                 f"{PARTED_LOSS_FACTOR:g} times apart, one at or above "
                 f"{PARTED_LOSS_FLOOR:g} nat: another program, data or labels), so nothing is "
                 "ranked there: the fastest is not known to do the runner-up's work faster.")
    unknown = best[kinds == UNMEASURED]
    if len(unknown):
        which = ", ".join(f"{r.model} at {r.nodes} node(s)" for r in unknown.itertuples())
        text += (f" **Host-bound not known:** at {which} the fastest or the runner-up ran on "
                 "GPUs whose busy share was not measured (no NVML or AMD SMI readings, or "
                 "records older than the field), so nothing is ranked there: the ranking may "
                 "be of host loops.")
    return text


def _contended_detail(verdict: str) -> str:
    """The count of a :data:`~vitfsdp.analysis.tables.CONTENDED` verdict, e.g. ``" (3 of 3
    runs)"`` or ``" with the runner-up (2 of 2 runs)"``."""
    return verdict[len(CONTENDED):].split("; ")[0]


def _failed_notes(verdict: object) -> str:
    """The failure notes of a best.csv or prefetch.csv verdict (``"1 of 3 runs failed"``,
    ``"the runner-up: 1 of 3 runs failed"``), ``", "`` between them; ``""`` for none."""
    if not isinstance(verdict, str):
        return ""
    return ", ".join(p for p in verdict.split("; ") if p.endswith(" runs failed"))


def rerun_advice(points: pd.DataFrame, runs: pd.Series | None = None,
                 best: pd.DataFrame | None = None) -> str:  # fmt: skip
    """What would settle the differences that are not results, judged on the points they rest
    on: the fastest and the runner-up of ``best``'s rows whose ``difference`` is one of
    :data:`~vitfsdp.analysis.verdict.NOT_RESULTS` (every point of ``points`` where ``best``
    is None).

    Where some of them completed fewer than three runs: ``--rerun-failed`` where each of
    those ran three or more (``runs``: :func:`~vitfsdp.analysis.tables.runs_per_point` on
    ``points``' index) but some failed, naming them; else a sweep with three repeats. Where
    each completed three or more: runs that overlap (:data:`WITHIN`) stay overlapping as
    repeats are added (a min-max only widens), so none are advised for them; a ratio within
    the noise check's (:data:`IN_NOISE`) may grow beyond it with more repeats. Either way,
    which of them are noisy (:func:`~vitfsdp.analysis.tables.noisy_text`).
    """
    kinds = None
    if best is not None:
        rows = best[best["difference"].map(verdict_kind).isin(NOT_RESULTS)]
        kinds = rows["difference"].map(verdict_kind)
        named = {(r.model, r.nodes, c) for r in rows.itertuples()
                 for c in (r.configuration, r.runner_up) if isinstance(c, str) and c}
        keys = zip(points["model"], points["nodes"], points["configuration"], strict=True)
        keep = pd.Series([key in named for key in keys], index=points.index, dtype=bool)
        points, runs = points[keep], runs[keep] if runs is not None else None
    noisy = noisy_text(points)
    noisy = (f" Noisy among them: {noisy}: more repeats of a noisy point widen its spread; "
             "only runs that agree better narrow it." if noisy else "")
    short = points["num_repeats"] < 3
    if not short.any():
        if kinds is None:
            return " More repeats (repeat=0,1,2,3,4) may separate them." + noisy
        text = " The fastest and the runner-up of these each completed three runs or more."
        if (kinds == WITHIN).any():
            text += (" Runs that overlap stay overlapping as repeats are added (a min-max "
                     "only widens), so more repeats do not separate them.")
        if (kinds == IN_NOISE).any():
            text += (" A ratio within the noise check's may grow beyond it with more repeats "
                     "(repeat=0,1,2,3,4).")
        return text + noisy
    attempted = runs[short] if runs is not None else points.loc[short, "num_repeats"]
    if (attempted >= 3).all():
        which = ", ".join(f"{r.model} {r.configuration} at {r.nodes} node(s)"
                          for r in points[short].itertuples())
        return (f" {int(short.sum())} point(s) ran three repeats or more but completed fewer "
                f"({which}; points.csv `num_repeats`): the same sweep command with "
                "`--rerun-failed` runs the failed ones again." + noisy)
    return (" Rerun with at least three repeats (repeat=0,1,2) to separate them; the same "
            "sweep directory keeps the runs that completed." + noisy)


def _equivalence_section(table: pd.DataFrame) -> Section | None:
    """The noise check (``table``: :func:`~vitfsdp.analysis.tables.equivalence_table`):
    points that compute the same thing under two names, and whether they agree; None where
    the sweep has no such pair."""
    if table.empty:
        return None
    apart = table[table["difference"] == BEYOND]
    text = ("Configurations that compute the same thing under two names (FULL_SHARD and "
            "HYBRID_SHARD with the shard group equal to the world, NO_SHARD and "
            "HYBRID_1GPU) do the same arithmetic on the same ranks: their images/s "
            "should agree within their spread. (FSDP1's hybrid with one replica still "
            "all-reduces each unit's gradient over a group of one rank; on CPU that measured "
            "no difference: docs/benchmarks.md, \"The 1-node pair\".)")
    noise = observed_noise(table)
    if len(apart):
        which = ", ".join(f"{r.configuration_a} and {r.configuration_b} ({r.model}, "
                          f"{r.nodes} node(s): {r.ips_ratio:.2f}x)" for r in apart.itertuples())
        text += (f" **Noise of {noise:.2f}x:** {which} differ beyond their spread, so the "
                 "machine's noise is at least that large: differences up to that size "
                 "between other configurations of this sweep are not results (best.csv: "
                 f"\"{IN_NOISE}\").")
    else:
        text += (f" They agree within their spread (at most {noise:.2f}x apart, and no win "
                 "up to that counts).")
    once = table[(table["runs_a"] < 2) | (table["runs_b"] < 2)]
    if len(once):
        text += (f" {len(once)} of {len(table)} pairs rest on a point that ran once: its "
                 "windows, not the noise between runs.")
    return Section("Noise check", text, table=display(table, list(table.columns)))


def _reference_section(table: pd.DataFrame) -> Section | None:
    """The points whose setup matches a published figure: measured, published and their
    ratio (``table``: :func:`~vitfsdp.analysis.reference.reference_table`, every point, with
    why it was not compared); None when none does."""
    compared = table[table["compared"].astype(bool)] if len(table) else table
    if compared.empty:
        return None
    text = ("Points whose model, strategy, nodes, local batch, precision and image size "
            "(and any other setting the source states) equal a published row's. Measured "
            "and published images/s are global; their ratio is per device (each side's "
            "images/s over its GPUs, GCDs or CPU ranks), so a point on fewer devices a node "
            "than the source is not a fraction of it for that alone. GPUs per node and the "
            "device, where ours differ, are named in the study's label and in `differs`. "
            "Every point, with the settings that differ where it was not compared: "
            "reference.csv.")
    return Section("Published figures", text, table=display(
        compared, ["label", "model", "configuration", "nodes", "metric", "measured",
                   "published", "ratio_per_device", "unit", "differs"]))


def _recipe_section(table: pd.DataFrame) -> Section | None:
    """The recipe ablation (``table``: :func:`~vitfsdp.analysis.recipe.recipe_table`, a
    sweep over a recipe's presets): its figure and table; None when the runs hold no
    recipe."""
    if table.empty:
        return None
    steps = table[table["step"] > 0]
    results = int((steps["vs_baseline"].map(verdict_kind) == BEYOND).sum())
    text = ("Each step adds one change to the step before (conf/experiment/, the step's "
            "preset); images/s relative to the baseline (step 0) at the same node count. "
            f"A step differs from the baseline only as best.csv's wins do (`vs baseline`; "
            "not where other work competed with every run of either, or either was "
            f"host-bound or on GPUs without a busy share): {results} of {len(steps)} do.")
    return Section("Recipe ablation", text, ["recipe"], display(
        table, ["recipe", "step", "what", "nodes", "ips", "relative_ips", "vs_baseline",
                "statuses"]))


def _framework_section(ratio: pd.DataFrame | None,
                       runs: pd.DataFrame | None = None) -> Section | None:  # fmt: skip
    """Images/s of PyTorch and JAX per point both ran, and the words on them
    (:func:`framework_text`: which runs found no partner, from ``runs``, the
    ``collect_runs`` frame); the ratio with its bounds, ``1.75 (1.28–2.25)``
    (:func:`ratio_text`). None when neither the ratio table nor those words have anything
    to show (one framework ran, or none did)."""
    ratio = pd.DataFrame() if ratio is None else ratio
    text = framework_text(ratio, runs)
    if not text:
        return None
    lead = ("Images/s of both frameworks per point (in the weak scaling figure: solid "
            "PyTorch, dash-dot JAX); the ratio with its bounds, the slowest JAX measurement "
            "over the fastest PyTorch one and the other way round. " if len(ratio) else "")
    shown = ratio.assign(jax_over_torch=ratio_text(ratio)) if len(ratio) else ratio
    columns = [c for c in ratio.columns if c not in ("ratio_low", "ratio_high")]
    return Section("PyTorch and JAX", lead + text,
                   table=display(shown, columns) if len(ratio) else None)


def ratio_text(ratio: pd.DataFrame) -> pd.Series:
    """Each row's ``jax_over_torch`` with its bounds (``ratio_low``, ``ratio_high``) as
    text, ``"1.75 (1.28–2.25)"``; the ratio alone where the bounds are not known (older
    ratio tables) or round to it; None where there is no ratio (a side completed no run)."""
    low = numeric_column(ratio, "ratio_low")
    high = numeric_column(ratio, "ratio_high")
    values = numeric_column(ratio, "jax_over_torch")
    texts = []
    for value, lo, hi in zip(values, low, high, strict=True):
        text = None if pd.isna(value) else f"{value:.2f}"
        if text and pd.notna(lo) and pd.notna(hi) and f"{lo:.2f}" != f"{hi:.2f}":
            text += f" ({lo:.2f}–{hi:.2f})"
        texts.append(text)
    return pd.Series(texts, index=ratio.index, dtype=object)


def framework_text(ratio: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """The words on a JAX/PyTorch ratio table (a
    :func:`~vitfsdp.analysis.lines.framework_ratio_table`) that the report's PyTorch-and-JAX
    section and ``python -m vitfsdp.analysis`` both give: how many ratios are framework
    results (:func:`_framework_verdict`), which PyTorch recipe they are against
    (:func:`_recipe_text`), where either side's host decided the step
    (:func:`framework_host_text`), what the two programs run differently under one
    strategy name (:func:`_program_caveat`), where the two sides' final losses part
    (:func:`_loss_text`), each side's start-up and compile time
    (:func:`_startup_compile_text`), where runs of a side failed
    (:func:`_failed_text`) and, given ``runs`` (the ``collect_runs`` frame the table came
    from), which completed runs found no partner (:func:`unpaired_text`). Only the last
    where the table is empty; ``""`` where that has nothing to say either."""
    unpaired = unpaired_text(runs) if runs is not None else ""
    if ratio.empty:
        return unpaired
    paired = ratio[numeric_column(ratio, "jax_over_torch").notna()]  # both sides completed
    words = (_framework_verdict(ratio, runs) + _recipe_text(paired)
             + framework_host_text(paired, runs) + _program_caveat(paired, runs)
             + _loss_text(paired, runs) + _startup_compile_text(runs)
             if len(paired) else "")
    return (words + _failed_text(ratio)).strip() + (f" {unpaired}" if unpaired else "")


#: At most this many points are named in :func:`unpaired_text` per framework.
MAX_NAMED_UNPAIRED = 8


def unpaired_text(runs: pd.DataFrame) -> str:
    """Which completed runs of ``runs`` (a ``collect_runs`` frame) the JAX/PyTorch ratio
    table pairs with no run of the other framework
    (:func:`~vitfsdp.analysis.lines.framework_partners`), so that a reader knows the table is
    partial: how many of each framework's, and their points by model, strategy and node
    count (and any other key that varies), e.g. ``"The table is partial: ... 1 of 4
    PyTorch runs (vit_tiny FULL_SHARD at 2 node(s)) and none of the 3 JAX runs."``; up to
    :data:`MAX_NAMED_UNPAIRED` points a framework named. ``""`` where every run pairs, or
    where one framework completed no run (a sweep of one framework pairs nothing by design;
    a point where the other framework's runs all failed has a row that says so).
    """
    partners = framework_partners(runs)
    counts = partners.groupby("framework").size()
    if len(counts) < 2 or bool(partners["paired"].all()):
        return ""
    keys = [c for c in partners.columns if c not in ("framework", "run_dir", "paired")]
    parts = []
    for fw, name in (("torch", "PyTorch"), ("jax", "JAX")):
        alone = partners[(partners["framework"] == fw) & ~partners["paired"]]
        total = int(counts[fw])
        if alone.empty:
            parts.append(f"none of the {total} {name} runs" if total > 1
                         else f"not the one {name} run")
            continue
        points = alone.groupby(keys, dropna=False, sort=False).size()
        named = [" ".join(_point_part(k, v) for k, v in zip(keys, point, strict=True)
                          if k != "nodes" and pd.notna(v))
                 + f" at {point[keys.index('nodes')]:g} node(s)"
                 + (f" ({n} runs)" if n > 1 else "") for point, n in points.items()]
        more = len(named) - MAX_NAMED_UNPAIRED
        if more > 0:
            named = [*named[:MAX_NAMED_UNPAIRED], f"{more} more point{'s' if more > 1 else ''}"]
        which = "; ".join(named)
        parts.append(f"{len(alone)} of {total} {name} run{'s' if total > 1 else ''} ({which})")
    point = ("a run of the other framework at its point, completed or not (the same model, "
             "strategy, node count, world size, GPUs per node and cluster profile)")
    lead = (f"The table is partial: a run without {point} is in no row:"
            if partners["paired"].any() else f"No run has {point}, so there is no ratio:")
    return f"{lead} {' and '.join(parts)}."


#: Why a busy share was not measured, where the runs are not known to say which.
UNMEASURED_WHY = ("on CPU ranks, or on GPUs without NVML or AMD SMI readings, or in records "
                  "older than the field")


def _framework_verdict(ratio: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """How many of the pairs of ``ratio`` (a
    :func:`~vitfsdp.analysis.lines.framework_ratio_table`; its rows with a ratio: both
    sides completed runs) are framework results: apart beyond their spread
    (``difference``, :data:`~vitfsdp.analysis.verdict.BEYOND` with or without a note) with
    both sides measured not host-bound. A pair other work competed with
    (:data:`~vitfsdp.analysis.tables.CONTENDED`) is no result, and is counted as such. A
    host-bound pair (``host_bound`` true, ``difference``
    :data:`~vitfsdp.analysis.verdict.HOST_BOUND`) compares the two host loops, and a pair
    whose busy share was not measured (``host_bound`` NA) may: both are counted apart, the
    latter with why it was not measured (from ``runs``, the ``collect_runs`` frame:
    :func:`~vitfsdp.analysis.lines.busy_missing`). Of the counted pairs, how many are
    ``noisy`` (:func:`_noisy_text`)."""
    paired = ratio[numeric_column(ratio, "jax_over_torch").notna()]
    flag = paired["host_bound"].astype("boolean")
    bound, clear = flag.fillna(False).astype(bool), (flag == False).fillna(False).astype(bool)  # noqa: E712
    unknown = flag.isna()
    kinds = paired["difference"].map(verdict_kind)
    beyond = kinds == BEYOND
    text = ("A ratio is a result only as best.csv's are (apart beyond their spread, on runs "
            "enough: 3 each, or 2 against 5, and beyond the noise check's ratio, with no "
            "other work competing) and where both sides were measured not host-bound: "
            f"{int((beyond & clear).sum())} of {int(clear.sum())} pairs measured not "
            "host-bound are (`difference`). " + _contended_pairs_text(paired[clear],
                                                                       kinds[clear])
            + _noisy_text(paired[clear]))
    if bound.any():
        count = int(bound.sum())
        text += (f"{count} host-bound pair{'s' if count > 1 else ''} (`host_bound`; "
                 f"`difference`: {HOST_BOUND}) compare{'' if count > 1 else 's'} the two "
                 f"host loops, not the frameworks, and {'are' if count > 1 else 'is'} not "
                 "counted. ")
    if unknown.any():
        count = int(unknown.sum())
        why = busy_missing(runs) if runs is not None else ""
        text += (f"At {count} pair{'s' if count > 1 else ''} the device busy share was not "
                 f"measured ({why or UNMEASURED_WHY}): whether a side was host-bound is "
                 "not known, so "
                 f"{'they are' if count > 1 else 'it is'} not counted (a ratio there may "
                 "compare host loops). ")
    return text


def _contended_pairs_text(counted: pd.DataFrame, kinds: pd.Series) -> str:
    """How many of the ``counted`` pairs (rows of a ratio table, ``kinds`` their
    :func:`~vitfsdp.analysis.tables.verdict_kind`) other work competed with, and with how
    many of their runs, e.g. ``"Other work competed with runs of 2 of those 2 (`difference`:
    not a result, 6 of 6 runs; 3 of 6 runs): their images/s measure the contention, not
    the frameworks. "``; ``""`` where none."""
    contended = counted[kinds == CONTENDED]
    if contended.empty:
        return ""
    details = "; ".join(_contended_detail(v).strip(" ()") for v in contended["difference"])
    return (f"Other work competed with runs of {len(contended)} of those {len(counted)} "
            f"(`difference`: not a result, {details}): their images/s measure the "
            "contention, not the frameworks. ")


def _failed_text(ratio: pd.DataFrame) -> str:
    """Where runs of a side failed, by point: ``" No ratio at vit_tiny FULL_SHARD at 2
    node(s) (no result: jax failed (1 of 1 runs)): a side completed no run there
    (failures.csv says why)."`` where a side completed none, and ``" Runs failed at vit_tiny
    DDP at 1 node(s) (jax: 1 of 2 runs failed): the ratio there is of the runs that
    completed."`` where some did; ``""`` where none failed (or the table has no failure
    counts: older ratio tables)."""
    if "torch_failed" not in ratio or "jax_failed" not in ratio:
        return ""
    failed = (numeric_column(ratio, "torch_failed").fillna(0)
              + numeric_column(ratio, "jax_failed").fillna(0)) > 0
    missing = numeric_column(ratio, "jax_over_torch").isna()
    text = ""
    none = ratio[failed & missing]
    if len(none):
        which = "; ".join(f"{name} ({verdict.split('; ')[0]})" for name, verdict in
                          zip(_ratio_points(none), none["difference"], strict=True))
        text += (f" No ratio at {which}: a side completed no run there (failures.csv says "
                 "why).")
    some = ratio[failed & ~missing]
    if len(some):
        which = "; ".join(f"{name} ({_failed_notes(verdict)})" for name, verdict in
                          zip(_ratio_points(some), some["difference"], strict=True))
        text += f" Runs failed at {which}: the ratio there is of the runs that completed."
    return text


def _ratio_points(rows: pd.DataFrame) -> list[str]:
    """Each row of a ratio table named by its key columns, ``"vit_tiny DDP
    ranks_per_node=4 at 1 node(s)"`` (:func:`_point_part`)."""
    keys = [c for c in rows.columns[:list(rows.columns).index("torch_ips")] if c != "nodes"]
    return [" ".join(_point_part(k, r[k]) for k in keys if pd.notna(r[k]))
            + f" at {r['nodes']:g} node(s)" for _, r in rows.iterrows()]


def _noisy_text(counted: pd.DataFrame) -> str:
    """How many of the ``counted`` pairs (rows of a ratio table) are ``noisy``: a side's
    runs (or one run's windows) spread more than :data:`NOISY_SPREAD` of its median, or
    other work competed with one of its runs; ``""`` where none is counted or the table has
    no ``noisy`` column (older ratio tables)."""
    if counted.empty or "noisy" not in counted:
        return ""
    noisy = counted["noisy"].astype("boolean")
    count, total, unknown = int(noisy.fillna(False).sum()), len(counted), int(noisy.isna().sum())
    rule = (f"(`noisy`: on either side the runs, or one run's windows, spread more than "
            f"{NOISY_SPREAD:.0%} of their median, or other work competed with a run"
            + (f"; not known at {unknown}: one run of one window" if unknown else "") + ")")
    disturbed = ": {} difference may measure the disturbance rather than the frameworks"
    if total == 1:
        return (f"The pair not host-bound is {'' if count else 'not '}noisy {rule}"
                f"{disturbed.format('its') if count else ''}. ")
    if not count:
        return f"None of those {total} is noisy {rule}. "
    return (f"{count} of those {total} {'is' if count == 1 else 'are'} noisy {rule}"
            f"{disturbed.format('its' if count == 1 else 'their')}. ")


def _recipe_text(ratio: pd.DataFrame) -> str:
    """Which PyTorch recipe the ratios are against (``torch_recipe`` of ``ratio``: wrapper,
    compile, use_orig_params, AdamW), e.g. ``"PyTorch ran FSDP1 compiled, orig params,
    fused AdamW (`torch_recipe`): every ratio is against that recipe, not PyTorch at large.
    "``; each recipe where the rows ran several; ``""`` where none is recorded."""
    recipes = sorted({r for cell in ratio.get("torch_recipe", pd.Series(dtype=object)).dropna()
                      for r in str(cell).split("; ")})
    if not recipes:
        return ""
    if len(recipes) == 1:
        return (f"PyTorch ran {recipes[0]} (`torch_recipe`): every ratio is against that "
                "recipe, not PyTorch at large. ")
    return (f"PyTorch ran {len(recipes)} recipes (`torch_recipe`: {'; '.join(recipes)}): "
            "each row's ratio is against its own. ")


def framework_host_text(ratio: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """What the JAX/PyTorch ratios of :func:`vitfsdp.analysis.lines.framework_ratio_table`
    compare, in words: where either side was host-bound (its device busy less than
    :data:`HOST_BOUND_BUSY_FRAC` of the timed windows), its host loop, not its kernels; where
    the busy share was not measured (CPU ranks, JAX on ROCm), that it is not known; and,
    whatever the busy shares, where the two ran different attention, that it is part of
    every ratio (:func:`_attention_caveat`)."""
    return _host_text(ratio, runs) + _attention_caveat(ratio)


def _host_text(ratio: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """:func:`framework_host_text`'s sentence on the busy shares; where a share was not
    measured, why (from ``runs``: :func:`~vitfsdp.analysis.lines.busy_missing`; both
    reasons where not given)."""
    bound = ratio[ratio["host_bound"].fillna(False).astype(bool)]
    unknown = ratio["host_bound"].isna()
    if len(bound):
        which = ", ".join(_ratio_points(bound))
        return (f"Host-bound on at least one side ({BUSY_BELOW}): {which}; there the ratio "
                "compares the two host loops, not the frameworks' kernels.")
    why = (busy_missing(runs) if runs is not None else "") or UNMEASURED_WHY
    if unknown.all():
        return (f"How busy the devices were is not measured here ({why}): a ratio may "
                "compare the two host loops, and none is counted as not host-bound.")
    if unknown.any():
        return (f"No point measured host-bound ({BUSY_BELOW}); at "
                f"{int(unknown.sum())} point(s) one side was not measured ({why}), so "
                "whether the host decided its step there is not known.")
    return (f"No point host-bound on either side ({BUSY_BELOW}): the ratios compare the "
            "frameworks' steps on the device.")


def _point_part(key: str, value: object) -> str:
    """One key of a ratio row as :func:`_host_text` names its point: the model and the
    strategy as they are, any other key ``name=value`` (``ranks_per_node=4``)."""
    return str(value) if key in ("model", "strategy") else f"{key}={value}"


def _attention_caveat(ratio: pd.DataFrame) -> str:
    """``" The two ran different attention ..."`` where the two sides ran different attention
    (torch's sdpa against JAX's xla, say); ``" The attention ... was not recorded ..."`` at
    the pairs where a side's (``torch_attention``, ``jax_attention``) is empty (records
    older than the field), since a ratio there may include a kernel difference; else
    ``""``."""
    empty = pd.Series(None, index=ratio.index, dtype=object)
    torch_att, jax_att = ratio.get("torch_attention", empty), ratio.get("jax_attention", empty)
    pairs = {(t, j) for t, j in zip(torch_att, jax_att, strict=True)
             if isinstance(t, str) and isinstance(j, str) and t != j}
    text = ""
    if pairs:
        which = "; ".join(f"PyTorch {t}, JAX {j}" for t, j in sorted(pairs))
        text += (f" The two ran different attention ({which}): the attention kernels' "
                 "difference is part of every ratio.")
    unknown = [name for name, side in (("PyTorch", torch_att), ("JAX", jax_att))
               if not side.map(lambda a: isinstance(a, str) and bool(a)).all()]
    if unknown:
        whose = "each side" if len(unknown) == 2 else unknown[0]
        text += (f" The attention {whose} ran was not recorded (`torch_attention`, "
                 "`jax_attention` empty: records older than the field), so the ratio may "
                 "include a difference of attention kernels.")
    return text


def _program_caveat(ratio: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """What the two frameworks run differently under one strategy name, for the strategies
    of ``ratio``'s rows (``""`` where none applies; docs/jax.md); the precision DDP ran in
    from ``ratio`` where it is a column (it splits lines), else from ``runs`` (the
    ``collect_runs`` frame the table came from: :func:`_ddp_precisions`):

    - FULL_SHARD (a row that pairs by name: no ``torch_strategy``) and HYBRID_<k>GPU:
      JAX's step gathers each FSDP unit's parameters once
      (over its shard group) and keeps them from forward to backward
      (``vitfsdp.jax.sharding``; what torch's SHARD_GRAD_OP does), where torch's FULL_SHARD
      and HYBRID_SHARD gather them again in backward: the ratio includes one all-gather per
      unit a step and the memory of the gathered units.
    - A row with ``torch_strategy`` (JAX's FULL_SHARD against torch's SHARD_GRAD_OP,
      :data:`~vitfsdp.analysis.lines.SAME_PROGRAM`): the same collectives on both sides.
    - World size 1 (a row's ``world_size``, else the one world size ``runs`` ran its
      point at: :func:`_world_sizes`): one device, so no sharding and no collectives; the
      gather sentence above does not hold, and the ratio compares compute and host loop.
    - DDP in bf16: torch runs ``torch.autocast`` (fp32 weights, layer norms and residual
      stream, bf16 matmuls; :func:`vitfsdp.torch_train.autocast_context`), JAX computes in
      bf16 from the patch embedding on (``vitfsdp.jax.model``): the ratio includes the fp32
      residual stream's bytes.
    """
    strategies = set(ratio.get("strategy", pd.Series(dtype=object)).dropna().astype(str))
    bf16_ddp = "DDP" in strategies and bool(_ddp_precisions(ratio, runs) & {"bf16", "auto"})
    text = ""
    single = _world_sizes(ratio, runs) == 1
    by_program = ratio.get("torch_strategy", pd.Series(None, index=ratio.index)).notna()
    sharded = sorted(x for x in set(ratio.loc[~single & ~by_program, "strategy"].dropna()
                                    .astype(str))
                     if x == "FULL_SHARD" or x.startswith("HYBRID_"))
    if single.any():
        names = ", ".join(sorted(set(ratio.loc[single, "strategy"].dropna().astype(str))))
        text += (f" At world size 1{f' ({names})' if names else ''}: one GPU (or rank), no "
                 "sharding and no "
                 "collectives; the ratio compares the step's compute and host loop only.")
    if sharded:
        names = ", ".join(sharded)
        text += (f" Under {names} JAX gathers each unit's parameters once a step and keeps "
                 "them to the backward (as torch's SHARD_GRAD_OP does), where torch gathers "
                 f"them again: those ratios include one all-gather per unit and the memory "
                 "of the gathered units (docs/jax.md).")
    if (by_program & ~single).any():
        pairs = ", ".join(sorted({f"JAX {s} against torch {t}" for s, t in zip(
            ratio.loc[by_program & ~single, "strategy"],
            ratio.loc[by_program & ~single, "torch_strategy"], strict=True)}))
        text += (f" Where `torch_strategy` is set ({pairs}), a row pairs by program, not "
                 "name: JAX gathers each unit's parameters once and keeps them to the "
                 "backward as torch's SHARD_GRAD_OP does, so both sides run the same "
                 "collectives there.")
    if bf16_ddp:
        text += (" Where DDP ran in bf16, torch ran autocast (fp32 weights, layer norms and "
                 "residual stream, bf16 matmuls) and JAX computed in bf16 throughout: those "
                 "DDP ratios include that precision policy.")
    return text


def _world_sizes(ratio: pd.DataFrame, runs: pd.DataFrame | None) -> pd.Series:
    """Each row's world size (ranks): its ``world_size`` where the table has the column
    (it varies at a node count), else the one world size the PyTorch and JAX runs of
    ``runs`` at its model, strategy and node count ran at; NaN where not known (no
    ``runs``, or several)."""
    if "world_size" in ratio:
        return numeric_column(ratio, "world_size")
    keys = [k for k in ("model", "strategy", "nodes") if k in ratio]
    if runs is None or "world_size" not in runs or not keys \
            or not all(k in runs for k in keys):
        return pd.Series(float("nan"), index=ratio.index)
    both = runs[runs["framework"].isin(["torch", "jax"])]
    sizes = both.assign(ws=numeric_column(both, "world_size")).groupby(
        keys, dropna=False)["ws"].agg(lambda w: w.dropna().iloc[0] if w.nunique() == 1
                                      else float("nan"))
    return pd.Series([sizes.get(tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]],
                                float("nan")) for _, r in ratio.iterrows()],
                     index=ratio.index, dtype=float)


def _loss_text(ratio: pd.DataFrame, runs: pd.DataFrame | None = None) -> str:
    """Where the two sides' final losses (``torch_loss``, ``jax_loss``) part
    (:func:`loss_parted`), e.g. ``" The two did not train alike at vit_huge FULL_SHARD at 1
    node(s): final loss PyTorch 3.08, JAX 0.00961 (...)"``; ``""`` where none parts or the
    table has no loss columns (older ratio tables). ``runs`` is not read (the signature of
    the section's other sentences)."""
    if "torch_loss" not in ratio or "jax_loss" not in ratio:
        return ""
    torch_loss, jax_loss = numeric_column(ratio, "torch_loss"), numeric_column(ratio, "jax_loss")
    parted = [loss_parted(t, j) for t, j in zip(torch_loss, jax_loss, strict=True)]
    rows = ratio[parted]
    if rows.empty:
        return ""
    which = "; ".join(f"{name}: final loss PyTorch {t:.3g}, JAX {j:.3g}"
                      for name, t, j in zip(_ratio_points(rows), torch_loss[parted],
                                            jax_loss[parted], strict=True))
    return (f" The two did not train alike at {which} (`torch_loss`, `jax_loss`: one side "
            f"ended at or above {PARTED_LOSS_FLOOR:g} nat and {PARTED_LOSS_FACTOR:g} times "
            "the other's). Their steps may not be the same program (a setting, the data or "
            "the labels differ), so the ratio there is not of like for like.")


def _startup_compile_text(runs: pd.DataFrame | None) -> str:
    """Each framework's median start-up (runs.csv ``startup_s``) and compile time
    (``compile_s``) over its runs of ``runs`` that recorded them, with their range, e.g.
    ``" Outside images/s (median and range over runs): start-up (`startup_s`) PyTorch 4.7
    s (3.1-5.5 s, 4 runs), JAX 17.9 s (13.8-20.1 s, 4 runs); compile (`compile_s`) PyTorch
    in its warm-up window, not timed apart, JAX 6.2 s (3.6-7.4 s, 4 runs)."`` (PyTorch's
    compile: :data:`TORCH_COMPILE`); ``""`` where ``runs`` is None or records neither."""
    if runs is None or not {"startup_s", "compile_s"} & set(runs.columns):
        return ""
    texts = {(column, fw): _median_range(numeric_column(runs[runs["framework"] == fw], column))
             for column in ("startup_s", "compile_s") for fw in ("torch", "jax")}
    if all(t == NOT_RECORDED for t in texts.values()):
        return ""
    texts["compile_s", "torch"] = TORCH_COMPILE  # no PyTorch path records compile_s
    parts = [f"{what} (`{column}`) PyTorch {texts[column, 'torch']}, JAX {texts[column, 'jax']}"
             for column, what in (("startup_s", "start-up"), ("compile_s", "compile"))]
    return f" Outside images/s (median and range over runs): {'; '.join(parts)}."


#: What :func:`_median_range` says of a side without the figure.
NOT_RECORDED = "not recorded"
#: PyTorch's compile time: not a figure of its own (``torch.compile`` compiles each block at
#: its first step, inside the warm-up window no figure counts: vitfsdp.records).
TORCH_COMPILE = "in its warm-up window, not timed apart"


def _median_range(values: pd.Series, digits: int = 1) -> str:
    """The median of ``values`` (seconds, one per run; NaN skipped) with their range and
    count, ``digits`` decimals: ``"17.9 s (13.8-20.1 s, 4 runs)"``, ``"30.2 s (1 run)"``
    (``digits=0``: ``"40 s (12-95 s, 3 runs)"``), or :data:`NOT_RECORDED` where none. The
    one wording of a median and its range in the report's text (start-up, compile)."""
    values = values.dropna()
    if values.empty:
        return NOT_RECORDED
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f} s (1 run)"
    return (f"{values.median():.{digits}f} s ({values.min():.{digits}f}-"
            f"{values.max():.{digits}f} s, {len(values)} runs)")


def _ddp_precisions(ratio: pd.DataFrame, runs: pd.DataFrame | None) -> set[str]:
    """The precisions the DDP pairs of ``ratio`` ran in: its DDP rows' ``precision`` where
    precision splits lines (a column of the table), else the precision the completed DDP
    runs of either framework in ``runs`` resolved (all its DDP runs where none completed);
    ``{"auto"}``, not known, where neither says."""
    if "precision" in ratio:
        ddp = ratio[ratio["strategy"] == "DDP"]
        return set(ddp["precision"].dropna().astype(str))
    if runs is None or "precision" not in runs:
        return {"auto"}
    ddp = runs[(runs["strategy"] == "DDP") & runs["framework"].isin(["torch", "jax"])]
    done = ddp[ddp["status"] == "completed"]
    return set((done if len(done) else ddp)["precision"].dropna().astype(str)) or {"auto"}


def provenance_table(df: pd.DataFrame, sweep_dirs: Sequence[Path] = (),
                     command: str | None = None) -> pd.DataFrame:  # fmt: skip
    """What the report was made from: when, which code (a commit with uncommitted changes
    says that the code is not the commit's: :func:`commit_text`) and libraries, which devices
    and the CPUs of their hosts, which cluster profile, whether ranks shared cores, the sweep
    command of each sweep dir (from its ``multirun.yaml``) and, where given, the analysis
    ``command`` that wrote the report. Columns ``what`` and ``value``, as display text."""
    started = df["started_at"].dropna().astype(str)
    rows = [("report written", datetime.datetime.now(datetime.timezone.utc)
             .strftime("%Y-%m-%d %H:%M UTC")),
            ("runs started", _span(started)),
            ("git commit", _counted(df["git_commit"].map(
                lambda c: commit_text(c, "the runs' code"), na_action="ignore"))),
            ("analysis code", analysis_commit()),
            ("versions", _counted(df["versions"])),
            ("devices", _counted(device_text(df))),
            ("cluster profile", _counted(df["cluster"])),
            ("contention", contention_text(df))]
    for d in sweep_dirs:
        commands = sweep_commands(d)
        rows += [(f"sweep command{f' {i}' if len(commands) > 1 else ''} ({Path(d).name})",
                  f"`{cmd}`") for i, cmd in enumerate(commands, start=1)]
    if command:
        rows.append(("analysis command", f"`{command}`"))
    return pd.DataFrame(rows, columns=["what", "value"])


#: How runs.csv ``git_commit`` and :func:`analysis_commit` mark a checkout with uncommitted
#: changes.
DIRTY = "+dirty"


def commit_text(commit: str, whose: str) -> str:
    """A commit as the provenance table gives it: ``"5e5bf291d51e"``, or with uncommitted
    changes (:data:`DIRTY`) ``"5e5bf291d51e+dirty (uncommitted changes: the runs' code is
    not that commit's)"``, ``whose`` naming the code."""
    if not str(commit).endswith(DIRTY):
        return str(commit)
    return f"{commit} (uncommitted changes: {whose} is not that commit's)"


def device_text(df: pd.DataFrame) -> pd.Series:
    """Each run's device as the provenance table names it: runs.csv ``device_name``, with
    the logical CPUs of rank 0's host where recorded (``host_cpus``), e.g. ``"AMD EPYC 7763
    (host: 128 CPUs)"``; null where neither is recorded."""
    names = df["device_name"].astype("object")
    cpus = numeric_column(df, "host_cpus")
    return pd.Series([(f"{name if pd.notna(name) else 'device not recorded'} "
                       f"(host: {int(n)} CPUs)") if pd.notna(n) else name
                      for name, n in zip(names, cpus, strict=True)],
                     index=df.index, dtype=object)


def contention_text(df: pd.DataFrame) -> str:
    """The provenance table's ``contention`` row: what shared the runs' cores
    (:func:`~vitfsdp.analysis.lines.contention_note`: ranks on shared cores, other work that
    competed, an emulated link) and the runs whose host was loaded beyond its cores and
    their own ranks where other work was not measured
    (:func:`~vitfsdp.analysis.tables.loaded_runs`); where none of that, whether other work
    was measured and judged at all (``host_other_cpus``, the PyTorch trainer's windows or
    the local launcher's ``host.json``, with the host's ``host_cpus``), so that an
    unmeasured host does not read as a quiet one."""
    notes = [n for n in (contention_note(df),) if n]
    loaded = loaded_runs(df)
    if len(loaded):
        load = pd.to_numeric(loaded["host_load_1m"], errors="coerce")
        notes.append(f"{len(loaded)} of {len(df)} runs started or ended with the host's load "
                     f"average ({load.min():.1f}-{load.max():.1f}, host_load_1m) above its "
                     "cores and their own ranks: other work competed")
    if notes:
        return "; ".join(notes)
    # judged only where the host's cores are known too (competed() needs both)
    measured = (numeric_column(df, "host_other_cpus").notna()
                & numeric_column(df, "host_cpus").notna())
    if measured.all() and len(df):
        return ("none: one rank per core or GPU, and other work kept at most "
                f"{numeric_column(df, 'host_other_cpus').max():.1f} cores busy beside the "
                "runs (host_other_cpus)")
    if measured.any():
        return (f"one rank per core or GPU; other work beside the runs measured at "
                f"{int(measured.sum())} of {len(df)} runs, below the bound (host_other_cpus)")
    return ("one rank per core or GPU; other work beside the runs not measured "
            "(host_other_cpus with host_cpus: the PyTorch trainer's windows, else the local "
            "launcher's host.json)")


def analysis_commit() -> str:
    """The commit of the vitfsdp code writing this report (``+dirty`` with local changes, and
    what that means: :func:`commit_text`;
    :func:`vitfsdp.provenance.git_state`), which may differ from the runs' own: what drew the
    figures and judged the differences; :data:`MISSING` where it is not known."""
    state = git_state()
    if not state.get("commit"):
        return MISSING
    return commit_text(f"{state['commit'][:12]}{DIRTY if state.get('dirty') else ''}",
                       "this analysis code")


def _span(times: pd.Series) -> str:
    """The first and last of ISO timestamps, or the one, or :data:`MISSING`."""
    if times.empty:
        return MISSING
    first, last = times.min(), times.max()
    return first if first == last else f"{first} to {last}"


def _counted(values: pd.Series) -> str:
    """The distinct values, each with its run count when there are several."""
    counts = values.dropna().astype(str).value_counts()
    if counts.empty:
        return MISSING
    if len(counts) == 1:
        return counts.index[0]
    return "; ".join(f"{v} ({n} runs)" for v, n in counts.items())


def sweep_command(sweep_dir: str | os.PathLike) -> str | None:
    """The last command that ran a sweep, rebuilt from Hydra's ``multirun.yaml`` in it (the
    sweep's overrides); ``None`` where there is none."""
    overrides = saved_overrides(sweep_dir)
    return None if overrides is None else _command(overrides)


def sweep_commands(sweep_dir: str | os.PathLike) -> list[str]:
    """Every command that ran a sweep in ``sweep_dir``, oldest first, each once
    (:data:`~vitfsdp.core.layout.COMMANDS_FILE`: a later command may have added repeats or
    node counts); the last one (:func:`sweep_command`) where the directory predates that
    record."""
    recorded = list(dict.fromkeys(
        _command(r) for r in read_jsonl(Path(sweep_dir) / COMMANDS_FILE)))
    if recorded:
        return recorded
    last = sweep_command(sweep_dir)
    return [last] if last else []


def _command(overrides: dict) -> str:
    """``python -m vitfsdp.sweep -m <task overrides> <hydra overrides>``, shell-quoted."""
    args = [*(overrides.get("task") or []), *(overrides.get("hydra") or [])]
    return shlex.join(["python", "-m", "vitfsdp.sweep", "-m", *(str(a) for a in args)])


def one_device(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (a points or best frame) with each point of world size 1 (``world_size``)
    shown as one: ``scaling_efficiency`` :data:`ONE_DEVICE`, no ideal (``ideal_ips``), no
    efficiency bounds (``efficiency_range``); ``table`` itself without ``world_size``."""
    if "world_size" not in table or table.empty:
        return table
    alone = numeric_column(table, "world_size") == 1
    out = table.assign(scaling_efficiency=table["scaling_efficiency"].astype(object).where(
        ~alone, ONE_DEVICE))
    if "ideal_ips" in out:
        out["ideal_ips"] = out["ideal_ips"].where(~alone)
    if "efficiency_range" in out:
        out["efficiency_range"] = out["efficiency_range"].where(~alone, MISSING)
    return out


#: What the memory table prints where a point's runs held a model state but did not
#: count its gradients (JAX runs: ``state_grads_gib`` empty), in place of a blank.
NOT_RECORDED = "not recorded"


def memory_rows(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` as the memory table shows them: ``state_grads_gib`` :data:`NOT_RECORDED`
    where the parameters a rank held are known but its gradients are not (a JAX run's
    record), and ``peak_mem_since`` (points.csv's: since when a peak counts, JAX's on a GPU
    since its process started, PyTorch's since each window) only where some point's peak
    is not a window's (else left out: every peak is)."""
    out = points
    if "state_grads_gib" in out and "state_params_gib" in out:
        unknown = out["state_grads_gib"].isna() & out["state_params_gib"].notna()
        out = out.assign(state_grads_gib=out["state_grads_gib"].astype(object).where(
            ~unknown, NOT_RECORDED))
    if "peak_mem_since" in out and not out["peak_mem_since"].astype(str).str.startswith(
            "process").any():
        out = out.drop(columns="peak_mem_since")
    return out


def scaled_at_all(points: pd.DataFrame) -> bool:
    """Whether a point of ``points`` ran on more than one device (``world_size`` > 1, or
    not recorded): where none did, nothing was scaled and the report calls no section weak
    scaling."""
    if points.empty or "world_size" not in points:
        return True
    sizes = numeric_column(points, "world_size")
    return bool((sizes.isna() | (sizes > 1)).any())


def ideal_from(table: pd.DataFrame, df: pd.DataFrame) -> pd.Series:
    """``table``'s ``baseline_nodes`` (a points or best frame) where it is above the model's
    smallest node count in ``df`` (every run, failed ones too): the lines whose ideal starts
    later, whose efficiencies do not compare with the others'; NA elsewhere (Int64, on
    ``table``'s index)."""
    if table.empty or "baseline_nodes" not in table or "nodes" not in df:
        return pd.Series(pd.NA, index=table.index, dtype="Int64")
    smallest = table["model"].map(df.groupby("model", dropna=False)["nodes"].min())
    n0 = table["baseline_nodes"].astype("Int64")
    return n0.where(n0 > smallest.astype("Int64")).astype("Int64")


def _with_range(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with ``ips_range`` (the min-max over repeats as text, where there are) and
    ``efficiency_range`` (the efficiency's bounds, ``47-53%``, where they differ: the
    baseline is its own ideal)."""
    if points.empty:
        return points.assign(ips_range=[], efficiency_range=[])
    ranged = points["num_repeats"] > 1
    ips_range = [f"{format_rate(lo)}-{format_rate(hi)}" if r else MISSING for lo, hi, r in
                 zip(points["ips_repeat_min"], points["ips_repeat_max"], ranged, strict=True)]
    efficiency_range = [f"{lo:.0%}-{hi:.0%}" if pd.notna(lo) and pd.notna(hi) and lo != hi
                        else MISSING for lo, hi in zip(points["efficiency_min"],
                                                       points["efficiency_max"], strict=True)]
    return points.assign(ips_range=ips_range, efficiency_range=efficiency_range)


def _runs_text(df: pd.DataFrame) -> str:
    """How many runs, by status."""
    counts = df["status"].fillna("unknown").value_counts()
    parts = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{len(df)} runs: {parts}."


def repeats_text(df: pd.DataFrame, points: pd.DataFrame) -> str:
    """How many runs measured each completed point and how many timed windows each run
    measured, and what that leaves unmeasured: where points ran more than once, how far their
    runs spread against how far their windows did (the sweep's own measure of the noise
    between runs); where points ran once, how far this sweep's windows spread
    (:func:`window_spread`) and that the noise between their runs is not measured. ``""``
    where no point completed."""
    if points.empty:
        return ""
    repeats = points["num_repeats"].astype(int)
    windows = pd.to_numeric(df.get("num_windows", pd.Series(dtype=float)), errors="coerce")
    windows = windows[df["status"] == "completed"].dropna().astype(int)
    text = (f" Repeats per completed point: {_int_span(repeats)}; timed windows per run: "
            f"{_int_span(windows)} (images/s is their median).")
    window = window_spread(df)
    repeats = judged_count(points).astype(int)  # the runs the spread is over
    pooled = _count_column(points, "runs_share_repeat") > 0
    again = points[(repeats >= 2) & ~pooled]
    if len(again):
        runs = again["ips_repeat_spread"].astype(float)
        widest = again.loc[runs.idxmax()]
        noise = (f"the spread between runs whose numbers were invented ({INVENTED_WORDS})"
                 if invented_runs(df).any() else "the noise between runs, measured")
        text += (f" {len(again)} points ran at least twice: their runs spread {runs.median():.1%} "
                 f"of the median (at most {runs.max():.1%}, {widest['model']} "
                 f"{widest['configuration']} at {widest['nodes']} node(s); "
                 f"`ips_repeat_spread`): {noise}")
        text += (f", against the windows of one run: {_spread_words(window)}." if len(window)
                 else ".")
    text += shared_repeat_text(points[(repeats >= 2) & pooled])
    once = int((repeats < 2).sum())
    if once:
        text += (f" {once} of {len(points)} points ran once: their spread (error bars, "
                 "bounds) is one run's windows, the least their noise can be")
        if len(window) and not len(again):
            text += f"; in this sweep a run's windows spread {_spread_words(window)}"
        text += "; the noise between their runs is not measured"
        text += (", and no difference resting on one of them is called a result." if len(again)
                 else " (on the CPU demo of 2026-11-27 it was larger than the windows': quiet "
                 "sweeps moved a point 5-15% while each run's windows spread 1-4%, "
                 "docs/benchmarks.md, \"The CPU demo, three times quiet and once beside busy "
                 "loops\"), and no difference resting on one run is called a result.")
        text += " `repeat=0,1,2` measures it."
    return text


def shared_repeat_text(pooled: pd.DataFrame) -> str:
    """What the Runs section says of points whose pooled runs share a ``repeat`` label
    (points.csv ``runs_share_repeat`` > 0, ``repeats_differ``: what differs between them,
    :func:`~vitfsdp.analysis.tables.shared_repeats`): they are not known repeats, so their
    spread is not called the noise between runs; ``""`` where there is none."""
    if pooled.empty:
        return ""
    which = "; ".join(
        f"{r.model} {r.configuration} at {r.nodes} node(s): {int(r.runs_share_repeat)} runs, "
        f"spread {r.ips_repeat_spread:.1%}, {r.repeats_differ}" for r in pooled.itertuples())
    return (f" **Not known repeats:** at {len(pooled)} point(s) runs that share a repeat "
            f"label are pooled as repeats ({which}; points.csv `runs_share_repeat`, "
            "`repeats_differ`). Nothing says they were meant as repeats: a setting the "
            "records do not hold (train.seed, say) may differ between them, so their spread "
            "is not the noise between runs, and their images/s are a median over runs that "
            "may not be of one configuration. Give repeated runs distinct `repeat=N`, and "
            "runs of another setting another point.")


#: How the report names invented numbers (:func:`vitfsdp.analysis.lines.invented_runs`).
INVENTED_WORDS = "INVENTED DATA (bench_analysis): not measured"


def invented_section(df: pd.DataFrame) -> Section | None:
    """The report's opening where runs of ``df`` hold invented numbers
    (:func:`~vitfsdp.analysis.lines.invented_runs`: the analysis benchmark's synthetic
    sweep); None where none does."""
    hit = invented_runs(df)
    if not hit.any():
        return None
    return Section(INVENTED_WORDS.split(":")[0],
                   f"{int(hit.sum())} of {len(df)} runs hold invented numbers, not "
                   "measurements: vitfsdp.analysis.synthetic wrote them (`python "
                   "analysis/bench_analysis.py`) with a plausible images/s and memory per "
                   "point and 2% noise, on a device and cluster profile they only imitate, "
                   "to time the analysis and test its output. No figure, table or spread "
                   "below is a result.")


def window_spread(df: pd.DataFrame) -> pd.Series:
    """Each completed run's spread over its timed windows, (fastest - slowest) / median
    images/s (runs.csv ``ips_spread``; from ``ips_max``, ``ips_min`` and ``ips`` where a
    record lacks it), a fraction; runs that measured neither left out (empty for none)."""
    return window_spreads(df)[df["status"] == "completed"].dropna()


def _spread_words(spread: pd.Series) -> str:
    """:func:`window_spread` in words: ``1.2% (median over runs), at most 7.9%
    (`ips_spread`)``."""
    return f"{spread.median():.1%} (median over runs), at most {spread.max():.1%} (`ips_spread`)"


def _int_span(values: pd.Series) -> str:
    """``3`` or ``1-3`` for the least and most of whole numbers; :data:`MISSING` for none."""
    if values.empty:
        return MISSING
    low, high = int(values.min()), int(values.max())
    return f"{low}" if low == high else f"{low}-{high}"


#: The image side (px) an ImageNet-1k epoch of :data:`IMAGENET_TRAIN_IMAGES` is costed at.
IMAGENET_IMG_SIZE = 224


def _cost_text(points: pd.DataFrame, dataset_size: int, df: pd.DataFrame | None = None) -> str:
    """The cost table's assumptions, and, where ``dataset_size`` is ImageNet-1k's
    (:data:`IMAGENET_TRAIN_IMAGES`, the default) but the completed runs of ``df`` (runs.csv
    ``data``, ``img_size``) trained at another image size than
    :data:`IMAGENET_IMG_SIZE`, or on data read from no files, what that leaves out."""
    priced = "price_per_node_hour" in points and points["price_per_node_hour"].notna().any()
    price = ("cost = node-hours x the cluster profile's `price_per_node_hour`" if priced else
             "no `cluster.price_per_node_hour` set: node-hours only")
    text = (f"One epoch of {dataset_size:,} images (`--dataset-size`) at the measured "
            f"throughput: hours = images / (images/s) / 3600; node-hours = hours x nodes; "
            f"{price}. Training steps only (no evaluation, start-up or checkpointing).")
    return text + (_imagenet_caveat(df) if df is not None
                   and dataset_size == IMAGENET_TRAIN_IMAGES else "") + _startup_text(df)


def _cost_caveats(points: pd.DataFrame) -> str:
    """What the cost table's rows rest on, where a proposal would quote them: host-bound
    points (``host_bound``: their epoch costs what the host loop and wrapper cost, not the
    strategy on the device), noisy points (``noisy``: the cost is as uncertain as their
    repeats' spread) and points that ran once (no spread between runs); ``""`` where none."""
    if points.empty:
        return ""
    name = (lambda r: f"{r.model} {r.configuration} at {r.nodes} node(s)")  # noqa: E731
    text = ""
    bound = points[points["host_bound"].fillna(False).astype(bool)] \
        if "host_bound" in points else points.iloc[0:0]
    if len(bound):
        text += (f" **Host-bound** ({BUSY_BELOW}; `host_bound`): "
                 + ", ".join(name(r) for r in bound.itertuples())
                 + ": their cost is that of the host loop and the wrapper, not of the "
                 "strategy on the device; a cheaper-looking host-bound row does not rank.")
    noisy = points[points["noisy"].fillna(False).astype(bool)] \
        if "noisy" in points else points.iloc[0:0]
    if len(noisy):
        text += (f" **Noisy** (repeats spread more than {NOISY_SPREAD:.0%} of their median; "
                 "`noisy`): " + ", ".join(f"{name(r)} ({r.ips_repeat_spread:.0%})"
                                          for r in noisy.itertuples())
                 + ": their cost is as uncertain as that spread, whatever its digits.")
    once = points[judged_count(points) < 2]
    if len(once):
        text += (f" {len(once)} of {len(points)} points ran once (`num_repeats`): no spread "
                 "between runs is measured there.")
    return text


def _startup_text(df: pd.DataFrame | None) -> str:
    """The runs' measured start-up (runs.csv ``startup_s``: rank 0's process start to its
    first step) against what the plan assumes (:data:`vitfsdp.plan.STARTUP_S`), e.g. ``"
    Start-up, measured (`startup_s`): median 41 s (12-95 s, 9 runs), the most at 4
    node(s); the plan assumes 300 s a point for cluster.time=auto and its node-hours."``,
    by framework where both ran (:func:`_startup_spans`); ``""`` where no run measured
    it."""
    if df is None or "startup_s" not in df:
        return ""
    runs = df.assign(startup_s=numeric_column(df, "startup_s")).dropna(subset=["startup_s"])
    if runs.empty:
        return ""
    most = runs.loc[runs["startup_s"].idxmax()]
    return (f" Start-up, measured (`startup_s`, rank 0's process start to its first step: "
            f"imports, rendezvous, build and sharding, a restore, JAX's compilation): "
            f"{_startup_spans(runs)}, the most at "
            f"{most['nodes']:g} node(s); the plan assumes {STARTUP_S} s a point "
            "(cluster.time=auto, its node-hours), and a job's own set-up before the process "
            "(modules, an environment unpacked on the nodes; torchrun's own start before it "
            "starts the ranks) is in neither.")


def _startup_spans(runs: pd.DataFrame) -> str:
    """``"median 41 s (12-95 s, 9 runs)"`` of ``runs``' ``startup_s`` (:func:`_median_range`,
    whole seconds); one such per framework where both PyTorch and JAX runs measured it
    (JAX's start-up holds its compilation, so a pooled median says neither's): ``"PyTorch
    median 5 s (3-6 s, 4 runs); JAX median 18 s (14-20 s, 4 runs)"``."""
    def span(values: pd.Series) -> str:
        return f"median {_median_range(values, digits=0)}"
    if "framework" in runs and {"torch", "jax"} <= set(runs["framework"]):
        return "; ".join(f"{name} {span(runs.loc[runs['framework'] == fw, 'startup_s'])}"
                         for fw, name in (("torch", "PyTorch"), ("jax", "JAX")))
    return span(runs["startup_s"])


def _imagenet_caveat(df: pd.DataFrame) -> str:
    """Where the completed runs did not train at ImageNet's :data:`IMAGENET_IMG_SIZE` px, or
    read no image files (``synthetic``, ``digits``), a sentence saying that the hours of an
    ImageNet-1k epoch extrapolate their throughput, else ``""``."""
    done = df[df["status"] == "completed"] if "status" in df else df
    sizes = sorted({int(v) for v in pd.to_numeric(done.get("img_size", pd.Series(dtype=float)),
                                                  errors="coerce").dropna()})
    data = sorted({str(v) for v in done.get("data", pd.Series(dtype=object)).dropna()})
    named = f"{', '.join(data)} data" if data else "their data"
    if any(size != IMAGENET_IMG_SIZE for size in sizes):
        px = ", ".join(str(size) for size in sizes)
        return (f" **Not an ImageNet epoch:** these runs trained {named} at {px} px, not "
                f"ImageNet-1k at {IMAGENET_IMG_SIZE} px: the hours carry their images/s over "
                f"to {IMAGENET_TRAIN_IMAGES:,} images, and images/s at another size do not "
                f"hold at {IMAGENET_IMG_SIZE} px (a ViT's step grows with its patches per "
                "image), so they are not an ImageNet epoch's hours.")
    unread = [d for d in data if d in ("synthetic", "digits")]
    if unread:
        return (f" The runs read {', '.join(unread)} data held in memory, not ImageNet from "
                "files: loading and decoding images are not in the throughput.")
    return ""


#: What the prefetch section says where a comparison's runs ran on CPU ranks (prefetch.csv
#: ``cpu_ranks``; the torch source it rests on: :func:`~vitfsdp.analysis.tables.prefetch_table`).
CPU_PREFETCH = (
    "ran on CPU ranks (prefetch.csv `cpu_ranks`), where FSDP's streams and events are no-ops "
    "(`torch.cpu.Stream` and `torch.cpu.Event` do nothing: torch/cpu/__init__.py): the "
    "unshard stream does not run beside compute, the rate limiter of `limit_all_gathers` "
    "(`event.synchronize()` in FSDP's `_unshard`) waits for nothing, and gloo's all-gathers "
    "block the thread that issues them. Prefetch and `limit_all_gathers` change only the "
    "order of the collectives there, not their overlap with compute: differences between "
    "these variants are not prefetching's effect (experiment=prefetch_ablation measures it "
    "on GPUs).")


def _prefetch_section(table: pd.DataFrame) -> Section | None:
    """The ablation (``table``: :func:`~vitfsdp.analysis.tables.prefetch_table`) as a wide
    table: one column per prefetch x limit_all_gathers variant, each group's row of cells
    (:func:`_prefetch_cell`: median, min-max, runs) over a row of its variants' verdicts
    against the group's fastest (:func:`_prefetch_verdict_cell`), so that a table pasted
    alone carries its spread and its verdicts; the text counts the verdicts, each kind apart
    (:func:`_verdict_counts`), names variants other work competed with and those with runs
    that did not complete, says that comparisons on CPU ranks (``cpu_ranks``) cannot measure
    prefetching (:data:`CPU_PREFETCH`), and that host-bound was not measured where no
    variant of a comparison measured its busy share (every ``host_bound`` NA:
    :func:`busy_not_measured`), not that they were not host-bound."""
    if table.empty or table.groupby(["model", "nodes", "configuration"]).size().max() < 2:
        return None
    limits = _prefetch_limits(table)  # before the cells' fill: NA host_bound is not False
    bound = table["host_bound"].fillna(False).astype(bool)
    table = table.assign(
        variant=[f"{p}, limit={lim}" for p, lim in zip(table["backward_prefetch"],
                                                       table["limit_all_gathers"], strict=True)],
        host_bound=bound, runs_failed=_count_column(table, "runs_failed"),
        runs_contended=_count_column(table, "runs_contended"))  # fmt: skip
    order = [f"{p}, limit={lim}" for p in PREFETCH_ORDER for lim in (True, False)]
    variants = [v for v in order if v in set(table["variant"])]
    rows = []
    for (model, nodes, configuration), group in table.groupby(
            ["model", "nodes", "configuration"], sort=False):
        by_variant = {r.variant: r for r in group.itertuples()}
        head = {"model": model, "nodes": f"{int(nodes)}"}
        rows.append({**head, "configuration": configuration,
                     **{v: _prefetch_cell(r) for v, r in by_variant.items()}})
        rows.append({**head, "configuration": f"{configuration}: vs fastest",
                     **{v: _prefetch_verdict_cell(r) for v, r in by_variant.items()}})
    shown = pd.DataFrame(rows, columns=["model", "nodes", "configuration", *variants])
    shown = shown.fillna(MISSING)
    text = ("Images/s per strategy under each `strategy.backward_prefetch` and "
            "`strategy.limit_all_gathers` (FSDP1): each cell the median over repeats, its "
            "min–max over repeats (over a one-run variant's timed windows) and n, the runs "
            "that completed; the row under each strategy is each variant's verdict against "
            "its group's fastest (prefetch.csv `vs_best`). The fastest variant of a group is "
            "picked from its k variants, so a slower one is a result only on runs enough for "
            f"k - 1 comparisons (each at most {MAX_SEPARATION_CHANCE:.0%} / (k - 1) by "
            "chance: 4 runs each for 3 variants, 5 for 6).")
    text += _verdict_counts(table)
    slower = table[table["vs_best"].map(verdict_kind) == BEYOND]
    if len(slower):
        which = _variants(slower, lambda r: f"{r.ips_vs_best:.0%} of the fastest")
        text += f" Slower than its group's fastest variant, as a result: {which}."
    text += _prefetch_contended_text(table)
    failed = table[table["runs_failed"] > 0]
    if len(failed):
        which = _variants(failed, lambda r: f"{r.runs_failed} of "
                          f"{r.num_repeats + r.runs_failed} runs failed")
        text += (f" Runs that did not complete: {which}; its images/s are the median of the "
                 "runs that completed (prefetch.csv `runs_failed`; which and why: the "
                 "failures below).")
    if bound.any():
        text += (f" A variant marked host-bound ran with its {BUSY_BELOW}: its images/s "
                 "measure the wrapper and the loop, so it does not say what prefetching does "
                 "to communication.")
    return Section("Prefetch ablation", text + limits, ["prefetch"], shown)


def _variants(rows: pd.DataFrame, what) -> str:
    """``BACKWARD_POST (FULL_SHARD, 2 node(s): <what(row)>), ...``: prefetch.csv rows named
    for the prefetch section's text."""
    return ", ".join(f"{r.variant} ({r.configuration}, {r.nodes} node(s): {what(r)})"
                     for r in rows.itertuples())


def _prefetch_contended_text(table: pd.DataFrame) -> str:
    """The prefetch section's words on contended runs (prefetch.csv ``runs_contended``):
    variants every run of which other work competed with (``figures_contended``) are not a
    result and nothing is ranked against them; the others' contended runs are left out of
    their images/s and verdicts (counted apart); ``""`` where no run was contended."""
    hit = table[table["runs_contended"] > 0]
    if hit.empty:
        return ""
    only = hit[[figures_contended(r) for r in hit.itertuples()]]
    part = hit.drop(only.index)
    text = ""
    if len(only):
        runs = int(only["runs_contended"].sum())
        total = int((only["num_repeats"] + only["runs_failed"]).sum())
        text += (f" **Not a result:** other work competed with {runs} of the {total} runs of "
                 f"{len(only)} of the {len(table)} variants, every run of each (prefetch.csv "
                 "`runs_contended`): their images/s measure the contention, not prefetching, "
                 "and no variant is ranked against one of them; rerun them on a quiet host.")
    if len(part):
        which = _variants(part, lambda r: f"{r.runs_contended} of "
                          f"{r.num_repeats + r.runs_failed}")
        text += (f" Runs beside other work left out: {which} (prefetch.csv "
                 "`runs_contended`): those variants' images/s and verdicts are over their "
                 "other runs (`runs_judged`).")
    return text


def _prefetch_limits(table: pd.DataFrame) -> str:
    """What the ablation's comparisons (groups of ``table``, prefetch.csv) could not
    measure: prefetching itself where every variant ran on CPU ranks (``cpu_ranks``:
    :data:`CPU_PREFETCH`), and the busy share where no variant measured it (every
    ``host_bound`` NA: :func:`busy_not_measured`); each names its comparisons where not
    every one is; ``""`` where neither applies."""
    cpu, unmeasured = prefetch_limits(table, ["model", "nodes", "configuration"])
    text = ""
    if cpu.any():
        text += f" **Not prefetching's effect:** {_which(cpu, 'the comparisons')} " \
                + CPU_PREFETCH
    if unmeasured.any():
        text += (f" {busy_not_measured(bool(cpu[unmeasured].all()))} Host-bound is not "
                 f"known for {_which(unmeasured, 'any variant')} (prefetch.csv `host_bound` "
                 "empty), not that none was.")
    return text


def _which(hit: pd.Series, every: str) -> str:
    """``every`` where all of ``hit`` (booleans by (model, nodes, configuration)) is true,
    else the true ones named: ``vit_tiny FULL_SHARD at 1 node(s)``."""
    if hit.all():
        return every
    return ", ".join(f"{m} {c} at {n} node(s)" for (m, n, c), h in hit.items() if h)


def _count_column(table: pd.DataFrame, column: str) -> pd.Series:
    """``table[column]`` as whole numbers, 0 where absent or null (tables of an older
    analysis)."""
    return numeric_column(table, column).fillna(0).astype(int)


def _prefetch_cell(r) -> str:
    """One variant's images/s in the prefetch table: ``"1,490 (1,317–1,663; n=2)"`` (median,
    min–max over repeats, completed runs), ``"150 (windows 148–152; n=1)"`` for one run,
    ``", 1 failed"`` after n where runs did not complete, ``" (host-bound)"`` after it where
    the host decided the step."""
    n = int(r.num_repeats)
    low, high = ((r.ips_repeat_min, r.ips_repeat_max) if n >= 2
                 else (r.ips_span_low, r.ips_span_high))
    spread = "" if pd.isna(low) or pd.isna(high) or (n < 2 and low == high) else (
        f"{'' if n >= 2 else 'windows '}{format_rate(low)}–{format_rate(high)}; ")
    failed = f", {r.runs_failed} failed" if r.runs_failed else ""
    return (f"{format_rate(r.ips)} ({spread}n={n}{failed})"
            + (" (host-bound)" if r.host_bound else ""))


def _prefetch_verdict_cell(r) -> str:
    """One variant's verdict in the prefetch table: prefetch.csv ``vs_best``, ``fastest``
    before the fastest's own (its notes: failed or contended runs)."""
    verdict = r.vs_best if isinstance(r.vs_best, str) else ""
    if r.ips_vs_best == 1:
        return f"fastest; {verdict}" if verdict else "fastest"
    return verdict or MISSING


def _verdict_counts(table: pd.DataFrame) -> str:
    """How the slower variants of a prefetch table compare with their group's fastest, each
    kind of verdict counted apart, e.g. ``" Against their group's fastest, the 5 slower
    variants: within the spread (no difference): 1; not established (2 runs each; 5 needed
    for 6 variants): 4; beyond the spread: 0."``; a kind that never applies (other work
    competed, within the noise check's ratio) named only where some variant has it."""
    slower = table[table["ips_vs_best"] < 1]
    if slower.empty:
        return ""
    kinds = slower["vs_best"].map(verdict_kind)
    unsettled = slower[kinds.isin([ONE_RUN, FEW_RUNS])]
    counts = []
    if (kinds == CONTENDED).any():
        counts.append(f"not a result, other work competed: {int((kinds == CONTENDED).sum())}")
    if (kinds == HOST_BOUND).any():
        counts.append(f"host-bound (compares host loops): {int((kinds == HOST_BOUND).sum())}")
    if (kinds == UNMEASURED).any():
        counts.append("GPU busy share not measured (host-bound not known): "
                      f"{int((kinds == UNMEASURED).sum())}")
    counts.append(f"within the spread (no difference): {int((kinds == WITHIN).sum())}")
    if (kinds == IN_NOISE).any():
        counts.append(f"within the noise check's ratio: {int((kinds == IN_NOISE).sum())}")
    counts.append(f"not established{_unsettled_words(table, unsettled)}: {len(unsettled)}")
    counts.append(f"beyond the spread: {int((kinds == BEYOND).sum())}")
    return (f" Against their group's fastest, the {len(slower)} slower variant(s): "
            f"{'; '.join(counts)}.")


def _unsettled_words(table: pd.DataFrame, unsettled: pd.DataFrame) -> str:
    """What the not-established variants (``unsettled``, rows of the prefetch ``table``)
    rest on and what would settle them: ``" (2 runs each; 5 needed for 6 variants)"``, the
    runs of each variant and of its group's fastest, and per group size k the fewest runs
    each for a :func:`~vitfsdp.analysis.verdict.separation_chance` of at most
    ``MAX_SEPARATION_CHANCE / (k - 1)``; ``""`` where none is."""
    if unsettled.empty:
        return ""
    group = ["model", "nodes", "configuration"]
    best = table[table["ips_vs_best"] == 1].drop_duplicates(group).set_index(group)
    keys = list(unsettled[group].itertuples(index=False, name=None))
    runs = [*unsettled["num_repeats"].astype(int), *best.loc[keys, "num_repeats"].astype(int)]
    low, high = min(runs), max(runs)
    each = f"{low}" if low == high else f"{low}-{high}"
    sizes = sorted(set(table.groupby(group).size().loc[keys]))
    needed = [f"{_runs_needed(k)} needed for {k} variants" if i == 0
              else f"{_runs_needed(k)} for {k}" for i, k in enumerate(sizes)]
    return f" ({each} run{'s' if high > 1 else ''} each; {', '.join(needed)})"


def _runs_needed(variants: int) -> int:
    """The fewest runs each variant needs for a slower one to be a result against the
    fastest of ``variants`` (:func:`~vitfsdp.analysis.verdict.separation_chance` at most
    ``MAX_SEPARATION_CHANCE / (variants - 1)``): 3 for 2, 4 for 3, 5 for 6."""
    n = 1
    while separation_chance(n, n) > MAX_SEPARATION_CHANCE / max(variants - 1, 1):
        n += 1
    return n


def _failures_section(failed: pd.DataFrame, out_dir: str | os.PathLike | None) -> Section:
    """The points with runs that did not complete (``failed``:
    :func:`~vitfsdp.analysis.tables.failures_table`): how many of their runs ended how, the
    first one's reason (one line) and its log (the full reason and traceback)."""
    if failed.empty:
        return Section("Runs that did not complete", "None: every run completed.")
    text = (f"{len(failed)} run(s) at {len(_failed_points(failed))} point(s); they are marked "
            "in the figures and never counted as results. One row per point; every run: "
            "failures.csv.")
    return Section("Runs that did not complete", text,
                   table=display(below_device(_failed_points(failed, out_dir)),
                                 ["model", "configuration", "nodes", "runs_ended", "last_step",
                                  "ips_reached", "peak_mem_reached_gib", "pred_peak_mem_gib",
                                  "device_memory_gib", "memory_limit_gib", "reason",
                                  "log_link"]))


def _failed_points(failed: pd.DataFrame,
                   out_dir: str | os.PathLike | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per point of ``failed`` (a failures table): ``runs_ended`` (``2 oom, 1
    failed``), the first run's reason, last step, what it reached and its log as a Markdown
    link relative to ``out_dir``."""
    keys = ["model", "configuration", "nodes"]
    rows = []
    for _, runs in failed.groupby(keys, dropna=False, sort=True):
        first = runs.iloc[0].copy()
        counts = runs["status"].fillna("unknown").value_counts()
        first["runs_ended"] = ", ".join(f"{n} {status}" for status, n in counts.items())
        first["log_link"] = _log_link(first.get("log"), out_dir)
        rows.append(first)
    return pd.DataFrame(rows).reset_index(drop=True)


def _log_link(log_path, out_dir: str | os.PathLike | None) -> str | None:
    """``[log](relative/path)`` to a run's log, or ``None`` when it has none."""
    if not isinstance(log_path, str) or not log_path:
        return None
    target = os.path.relpath(log_path, out_dir) if out_dir is not None else log_path
    return f"[{Path(log_path).name}]({Path(target).as_posix()})"


def _calibration_sections(table: pd.DataFrame, df: pd.DataFrame) -> list[Section]:
    """Predicted against measured (``table``:
    :func:`~vitfsdp.analysis.tables.calibration_table` of the runs ``df``), when runs have
    predictions."""
    if table.empty:
        return []
    text = ("The plan's predictions (`python -m vitfsdp.plan`; in a rebuild: this checkout's "
            "plan, recomputed from the export's settings) against every completed run. "
            "Error = (predicted - measured) / measured; memory is compared with the measured "
            "column the plan predicts (`mem_metric`). On CPU ranks a rank's resident memory "
            f"is mostly the {CPU_BASELINE_GIB:g} GiB process baseline the plan assumes for "
            "every rank, so the error over the peak measures that constant; the error over "
            "what a rank holds above it (`above baseline`) is the plan's. Per run: "
            "calibration.csv."
            + source_text(df))
    return [Section("Predicted against measured", text,
                    table=display(calibration_summary(table), ["quantity", "num_runs",
                                                               "median_rel_error",
                                                               "median_abs_rel_error",
                                                               "max_abs_rel_error"])),
            Section("Calibration per run", table=display(table, [
                "model", "configuration", "nodes", "repeat", "mem_metric", "measured_mem_gib",
                "pred_peak_mem_gib", "mem_rel_error", "mem_above_baseline_rel_error",
                "step_time_s", "pred_step_time_s",
                "step_time_rel_error", "ips", "pred_ips", "ips_rel_error"]))]


def source_text(df: pd.DataFrame) -> str:
    """What the plan's predictions rest on (runs.csv ``pred_source``, e.g.
    ``probe:runs/demo/probe.json (<when>; repeats within 4%)`` or ``profile``, the cluster
    profile's data-sheet figures), each with its run count; a
    probe whose repeats spread beyond the bound (``NOISY: ...``) said so, and its predictions
    hold to no better than that spread. ``""`` where no run names a source."""
    sources = df.get("pred_source", pd.Series(dtype=object)).dropna().astype(str)
    if sources.empty:
        return ""
    counts = sources.value_counts()
    text = " Predictions from: " + "; ".join(
        f"{src} ({n} run{'s' if n > 1 else ''})" for src, n in counts.items()) + "."
    if any("NOISY" in src for src in counts.index):
        text += (" **A noisy probe:** its own repeats spread beyond the bound, so its "
                 "predictions, and any error below that spread, are no better than that "
                 "noise; probe again on a quiet allocation.")
    return text


def _measured(points: pd.DataFrame, column: str) -> bool:
    """Whether any point measured ``column`` (the report's tables leave out the others)."""
    return column in points and points[column].notna().any()


def _flops_text(points: pd.DataFrame) -> str:
    """The weak-scaling section's words on FLOP rates, as far as the points measured them:
    each rate column its table shows is defined (:mod:`vitfsdp.core.throughput`: model FLOPs
    3 x forward; hardware FLOPs add the recomputed forward,
    :func:`vitfsdp.models.hardware_flops_per_image`)."""
    if not _measured(points, "tflops_per_gpu"):
        return ""
    text = ", model FLOP rates (3 x forward FLOPs"
    text += ") and MFU (over the device's data-sheet peak)" if _measured(points, "mfu") else (
        "; no MFU: the device's peak is not known, as for CPU ranks)")
    if _measured(points, "hw_tflops_per_gpu"):
        text += ("; hardware FLOP rates (the `(hardware)` column) count what the device ran: "
                 "the model FLOPs plus the forward that activation checkpointing recomputes in "
                 "backward (each checkpointed block's forward but its MLP output projection), "
                 "so they equal the model rates where no block is checkpointed"
                 + ("; HFU is the hardware rate over the same peak" if _measured(points, "hfu")
                    else ""))
    elif _measured(points, "hfu"):
        text += "; HFU adds the forward recomputed under activation checkpointing"
    return text


#: What the measured peak memory counts, by runs.csv ``peak_mem_kind``.
MEMORY_KINDS = {
    "allocated": "the bytes the framework's allocator handed out (torch.cuda.max_memory_"
                 "allocated, reset every window; JAX's peak_bytes_in_use, which JAX cannot "
                 "reset: its peak since the process started, set-up included)",
    "rss": "the rank's resident memory (RSS): the interpreter and its libraries (0.71 GiB "
           "measured before a model is built, docs/plan.md; the plan counts "
           f"{CPU_BASELINE_GIB:g} GiB with a rank's data and threads) as well as the model",
}


def below_device(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``memory_limit_gib`` (runs.csv's) kept only where it says more than
    ``device_memory_gib``: a JAX run's XLA pool, a CPU rank's ``train.memory_limit_gib``; a
    torch run's limit is its device's memory, shown once (the report's tables leave out a
    column null in every row)."""
    if "memory_limit_gib" not in table:
        return table
    limit = pd.to_numeric(table["memory_limit_gib"], errors="coerce")
    device = pd.to_numeric(table.get("device_memory_gib", pd.Series(float("nan"),
                                                                   index=table.index)),
                           errors="coerce")
    return table.assign(memory_limit_gib=limit.where(~(limit == device)))


def _memory_text(points: pd.DataFrame) -> str:
    """The memory section's words, naming only what the points measured."""
    kinds = points.get("peak_mem_kind", pd.Series(dtype=object)).dropna().astype(str).unique()
    kind = "; ".join(MEMORY_KINDS.get(k, k) for k in sorted(kinds))
    parts = [f"Peak memory per GPU (per rank on CPU){f', {kind}' if kind else ''}: the maximum "
             "over ranks and repeats"]
    if _measured(points, "peak_mem_min_gib"):
        parts.append("the minimum over ranks")
    if _measured(points, "state_params_gib"):
        parts.append("the model state a rank held (parameters, gradients and optimizer state "
                     "counted from its local shards; the most any rank held)")
    if _measured(points, "peak_mem_reserved_gib"):
        parts.append("the allocator's peak reserved memory")
    if _measured(points, "device_mem_used_gib"):
        parts.append("the device's used memory (NVML or AMD SMI, other processes included)")
    if _measured(points, "alloc_retries"):
        parts.append("allocator retries and OOMs")
    if _measured(below_device(points), "memory_limit_gib"):
        parts.append("the memory limit a rank ran under where it is not the device's (a JAX "
                     "run's XLA pool; on CPU ranks train.memory_limit_gib, the growth of a "
                     "rank's data segment after its start, not a cap on its RSS)")
    text = ", ".join(parts) + "."
    if "rss" in kinds and "jax" in set(points.get("framework", pd.Series(dtype=object))):
        text += " " + JAX_RSS_NOTE
    return text


#: What a JAX rank's RSS holds beside JAX: its data pipeline is torch's (vitfsdp.jax.train
#: imports torch). Peak RSS of ``python -c 'import ...'`` on the 2-core development VM,
#: 2026-11-29 (Python 3.11, torch 2.14.1 CPU, jax 0.10.2): torch 0.50 GiB, JAX 0.18 GiB
#: (after one array op), both 0.64 GiB.
JAX_RSS_NOTE = ("A JAX rank's RSS counts torch too (its data pipeline is torch's: importing "
                "both takes 0.64 GiB, torch alone 0.50, JAX alone 0.18), so JAX's memory "
                "against PyTorch's on CPU ranks compares more than the frameworks' own.")


def baseline_text(points: pd.DataFrame, df: pd.DataFrame) -> str:
    """A sentence naming the lines whose ideal starts above their panel's smallest node
    count, and why, from the runs ``df``: at each smaller node count of the model the line
    either ran and did not complete, or was not run at all (a sweep that gave it larger node
    counts only); their efficiencies are over another baseline than the other lines' and do
    not compare with them. ``""`` where there is none."""
    if points.empty or "nodes" not in df:
        return ""
    smallest = df.groupby("model", dropna=False)["nodes"].min()
    n0 = points.groupby(["model", "configuration"], dropna=False)["nodes"].min()
    late = [(model, conf, int(n)) for (model, conf), n in n0.items()
            if pd.notna(smallest.get(model)) and n > smallest[model]]
    if not late:
        return ""
    ran = df.assign(configuration=configurations(df)).groupby(
        ["model", "configuration"], dropna=False)["nodes"].agg(set)
    which = ", ".join(f"{conf} of {model} from {n} nodes ({_why_later(df, ran, model, conf, n)})"
                      for model, conf, n in late)
    return (f" Ideal from a larger node count: {which}; these efficiencies are over another "
            "baseline and do not compare with the other lines'.")


def _why_later(df: pd.DataFrame, ran: pd.Series, model: str, conf: str, n0: int) -> str:
    """Why a line's ideal starts at ``n0``: at each smaller node count of its model in
    ``df``, it ``did not complete`` (it has runs there, ``ran``: each line's node counts) or
    ``was not run``, e.g. ``"it did not complete at 1 node and was not run at 2 nodes"``."""
    counts = sorted(c for c in df.loc[df["model"] == model, "nodes"].dropna().unique() if c < n0)
    tried = ran.get((model, conf), set())
    failed = [c for c in counts if c in tried]
    never = [c for c in counts if c not in tried]
    parts = ([f"did not complete at {_nodes_words(failed)}"] if failed else []) + (
        [f"was not run at {_nodes_words(never)}"] if never else [])
    return "it " + " and ".join(parts)


def _nodes_words(counts: list) -> str:
    """``"1 node"``, ``"1 and 2 nodes"``, ``"1, 2 and 4 nodes"``."""
    names = [f"{c:g}" for c in counts]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{listed} node{'' if names == ['1'] else 's'}"


def _sent_text(points: pd.DataFrame) -> str:
    """A sentence for the weak-scaling section where points recorded what their nodes sent
    over an emulated link (network.json), else ``""``."""
    sent = points.get("sent_gb_per_node_max", pd.Series(dtype=float))
    return (" Sent: the bytes the nodes sent over the emulated inter-node link during the "
            "run (start-up included; GB = 10^9 bytes), by the node that sent most and by "
            "all nodes together (network.json of each run)." if sent.notna().any() else "")


def host_bound_text(points: pd.DataFrame, df: pd.DataFrame) -> str:
    """What the device's busy share says of the points, in a reviewer's words: which points
    the host decided (their figures measure the wrapper), or that none did, or that it was
    not measured (CPU ranks) — a leading space and sentences, or ``""`` without points."""
    if points.empty or "device_busy_frac" not in points:
        return ""
    measured = points[points["device_busy_frac"].notna()]
    if measured.empty:
        cpu = (df["device_type"] == "cpu").all() if "device_type" in df else False
        return f" {busy_not_measured(cpu)}"
    flagged = measured[measured["host_bound"].astype(bool)]
    bound = f"{HOST_BOUND_BUSY_FRAC:.0%}"
    if flagged.empty:
        return (f" Every measured point kept its device busy at least {bound} of the timed "
                "windows (on the least busy rank, device_busy_min_frac, else the mean, "
                "device_busy_frac): the host did not leave it idle. Busy counts any "
                "kernel running, a collective's included, so on more than one GPU a rank that "
                "waits in a collective for a slower peer or the network reads busy too: this "
                "rules out the host loop, not the network.")
    listed = ", ".join(f"{r.model} {r.configuration} at {r.nodes} node(s) "
                       f"({_busy_words(r.device_busy_frac, r.device_busy_min_frac)})"
                       for r in flagged.itertuples())
    return (f" **Host-bound: {len(flagged)} of {len(measured)} measured points** kept their "
            f"device busy less than {bound} of the timed windows (on their least busy rank, "
            "device_busy_min_frac, else the mean over ranks, device_busy_frac; ringed "
            "in the figure): the host issued the work slower than the device ran it, so "
            "their images/s, scaling efficiency and any ratio against them measure the "
            "training loop and the wrapper (Python, FSDP's per-unit hooks, kernel launches), "
            f"not the device or the network: {listed}. A larger local batch or fewer FSDP "
            "units (strategy.blocks_per_unit) move the step back onto the device (on an H100 "
            "at batch 32, FSDP1 with compiled blocks stayed host-bound while eager blocks on "
            "flat parameters, 4 blocks a unit, kept the device busy: docs/benchmarks.md).")


def busy_not_measured(cpu: bool) -> str:
    """The report's sentence where no point measured its device's busy share: on CPU ranks
    (``cpu``), or where NVML and AMD SMI were missing or the records are older."""
    return ("Device busy share (device_busy_frac): not measured"
            + (" on CPU ranks, where the host is the device." if cpu else
               " (no NVML or AMD SMI on the nodes, or records older than the field)."))


def _busy_words(mean: float, minimum: float) -> str:
    """``45% busy``, or ``least busy rank 45%, mean 92%`` where the ranks differ."""
    if pd.isna(minimum) or pd.isna(mean) or round(minimum, 2) == round(mean, 2):
        return f"{mean if pd.notna(mean) else minimum:.0%} busy"
    return f"least busy rank {minimum:.0%}, mean {mean:.0%}"


def noisy_points_text(points: pd.DataFrame) -> str:
    """The weak-scaling section's sentence on the points whose repeats disagree
    (:func:`~vitfsdp.analysis.tables.noisy_text`, the terminal's words and rule: spread more
    than :data:`NOISY_SPREAD` of their median), or that none of the points that ran at least
    twice does; ``""`` where no point ran twice (one run's spread is its windows)."""
    repeated = points["noisy"].notna() if "noisy" in points else pd.Series(dtype=bool)
    if not repeated.any():
        return ""
    which, num = noisy_text(points), int(repeated.sum())
    twice = f"{num} point{'s' if num > 1 else ''} that ran at least twice"
    if not which:
        return (f" No point's repeats spread more than {NOISY_SPREAD:.0%} of their median "
                f"(`noisy`, {twice}).")
    count = int(points["noisy"].fillna(False).astype(bool).sum())
    return (f" **Noisy ({count} of {twice}):** "
            f"{which} (`repeat spread`, `noisy`): such a point's images/s is the median of "
            "runs that disagree by that much, and its efficiency bounds and any verdict "
            "against it (best.csv) carry that spread.")


def resumed_runs_text(runs: pd.DataFrame) -> str:
    """The weak-scaling section's sentence on the runs that resumed from a checkpoint
    (:func:`~vitfsdp.analysis.tables.resumed_text`, the terminal's words and rule): which
    points, how many attempts, that their figures pool every attempt's measured windows, and
    where the attempts measured different speeds (``attempts_differ``) that the point's
    images/s pools them and is one to rerun; ``""`` where no run resumed."""
    text = resumed_text(runs)
    return f" **Resumed:** {text[0].upper()}{text[1:]}." if text else ""


def _above_ideal_text(points: pd.DataFrame) -> str:
    """A sentence for the weak-scaling section where an efficiency is flagged (``113%*``)."""
    flagged = points.get("scaling_efficiency", pd.Series(dtype=float)).map(format_efficiency)
    if not flagged.str.endswith("*").any():
        return ""
    causes = points.get("above_ideal_cause", pd.Series(None, index=points.index))
    which = ", ".join(f"{r.model} {r.configuration} at {r.nodes} node(s) ({cause})"
                      for r, cause, f in zip(points.itertuples(), causes, flagged, strict=True)
                      if f.endswith("*") and isinstance(cause, str))
    return (" A scaling efficiency marked with an asterisk is above 100 % of ideal, not "
            "super-linear scaling: its line's baseline was host-bound (its ideal measures a "
            "host loop), contended or ran once, else noise in the baseline or the point "
            f"(points.csv `above_ideal_cause`){f': {which}' if which else ''}.")


#: The FLOP-rate columns, in TFLOP/s per rank, that :func:`flop_formats` rescales.
FLOP_COLUMNS = {"tflops_per_gpu": "model", "hw_tflops_per_gpu": "hardware"}


def flop_formats(df: pd.DataFrame) -> dict[str, tuple[str, str, float]]:
    """The FLOP-rate columns' ``(header, format, factor)`` for :func:`display`, in the unit
    the TFLOP/s figure's axis uses (:func:`~vitfsdp.analysis.schema.flop_unit` of the
    completed runs' ``tflops_per_gpu``): ``GFLOP/s/rank (model)`` x 1e3 for CPU ranks at
    0.00617 TFLOP/s (6.17, not 0.00617), ``TFLOP/s/GPU (model)`` x 1 on GPUs; per rank
    where every run is on CPU ranks."""
    done = df[df["status"] == "completed"] if "status" in df else df
    unit, factor = flop_unit(done.get("tflops_per_gpu", pd.Series(dtype=float)))
    cpu = "device_type" in df and set(df["device_type"].dropna()) == {"cpu"}
    per = "rank" if cpu else "GPU"
    return {column: (f"{unit}/{per} ({kind})", "{:.3g}", factor)
            for column, kind in FLOP_COLUMNS.items()}


def display(table: pd.DataFrame, columns: list[str],
            scaled: Mapping[str, tuple[str, str, float]] | None = None) -> pd.DataFrame:
    """``columns`` of ``table`` as formatted text under readable headers.

    A column that is missing, or null in every row (records older than the field), is left
    out; a null cell prints :data:`MISSING`. Formats and headers: :data:`COLUMN_FORMATS`,
    but for a column of ``scaled``, whose ``(header, format, factor)`` multiply its values
    by ``factor`` first (:func:`flop_formats`: the FLOP rates in the figure's unit).
    """
    cols = [c for c in columns if c in table.columns and table[c].notna().any()
            and not table[c].astype("string").isin(["", MISSING]).all()]
    shown = pd.DataFrame(index=table.index)
    for col in cols:
        header, fmt = COLUMN_FORMATS.get(col, (col, "{}"))
        values = table[col]
        if scaled and col in scaled:
            header, fmt, factor = scaled[col]
            values = pd.to_numeric(values, errors="coerce") * factor
        if col == "scaling_efficiency":  # above 100 %: starred as noise; text as it is
            shown[header] = values.map(lambda x: x if isinstance(x, str)
                                       else format_efficiency(x))
        else:
            shown[header] = values.map(lambda x, fmt=fmt: _fmt(x, fmt))
    return shown.reset_index(drop=True)


def _fmt(value, fmt: str) -> str:
    """One cell: :data:`MISSING` when null, else ``fmt`` (integers cast for ``{:d}``)."""
    if value is None or (not isinstance(value, str) and pd.isna(value)) or value == "":
        return MISSING
    if fmt == "{:d}":
        return str(int(value))
    try:
        return format_rate(value) if fmt == RATE else fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def write_report(sections: list[Section], out_dir: str | os.PathLike,
                 figures: dict[str, Path], title: str = "Scaling study",
                 note: str | None = None) -> dict[str, Path]:  # fmt: skip
    """Write ``report.md`` (relative figure links) and ``report.html`` (PNG embedded).

    Args:
        sections: from :func:`report_sections`.
        out_dir: the analysis directory; the figures must lie in it.
        figures: PNG path of each figure by name (``write_figures``' result); the SVG lies
            beside each. A section's figure not among them (the prefetch figure of a sweep
            without an ablation) is left out, and so is a section that
            :attr:`Section.needs_figure` where none of its figures is (the loss section of
            runs without a loss).
        title: the report's heading.
        note: a sentence every figure caption ends with (:func:`contention_note`: ranks
            that shared cores).

    Returns:
        ``{"md": path, "html": path}``.
    """
    out_dir = Path(out_dir)
    paths = {"md": out_dir / "report.md", "html": out_dir / "report.html"}
    paths["md"].write_text(render_markdown(sections, figures, title, note), encoding="utf-8")
    paths["html"].write_text(render_html(sections, figures, title, note), encoding="utf-8")
    for path in paths.values():
        log.info("wrote %s", path)
    return paths


def render_markdown(sections: list[Section], figures: dict[str, Path], title: str,
                    note: str | None = None) -> str:  # fmt: skip
    """The report as Markdown; figures by their file names (relative to the report), each
    caption ending with ``note``."""
    lines = [f"# {title}", ""]
    for s in (s for s in sections if s.shown(figures)):
        lines += [f"## {s.title}", ""]
        if s.text:
            lines += [s.text, ""]
        for name in _written(s, figures):
            text = caption(name, note, drawn_kinds(Path(figures[name]).read_bytes()))
            png = Path(figures[name]).name
            lines += [f"![{name}]({png})", "", f"*{text}* ([SVG]({Path(png).stem}.svg))", ""]
        if s.table is not None and not s.table.empty:
            lines += [_markdown_table(s.table), ""]
    return "\n".join(lines)


def _markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a Markdown pipe table, a ``|`` in a header or cell escaped
    (``median \\|error\\|``) so that it does not end the cell."""
    def escape(value):
        return value.replace("|", "\\|") if isinstance(value, str) else value
    escaped = table.rename(columns=lambda c: escape(str(c)))
    return escaped.map(escape).to_markdown(index=False)


def caption(name: str, note: str | None = None, drawn: Sequence[str] | None = None) -> str:
    """A figure's caption: :data:`CAPTIONS` (the figure's one-device caption where it drew
    every point on one device: ``figures.captions.SINGLE_DEVICE``), then the words for each
    kind of mark in ``drawn`` (:data:`MARK_CAPTIONS`, the figure's own words first:
    ``figures.captions.FIGURE_MARK_CAPTIONS``; read from the PNG by :func:`drawn_kinds`),
    ending with ``note`` when given."""
    from vitfsdp.analysis.figures import captions  # the figures' own words

    drawn = drawn or ()
    text = CAPTIONS.get(name, name)
    if captions.SINGLE_DEVICE in drawn:
        text = captions.SINGLE_DEVICE_CAPTIONS.get(name, text)
    words = {**MARK_CAPTIONS, **captions.FIGURE_MARK_CAPTIONS.get(name, {})}
    marks = [text_ for kind, text_ in words.items() if kind in drawn]
    if marks:
        text = f"{text[:-1] if text.endswith('.') else text}; {'; '.join(marks)}."
    return f"{text} {note[0].upper()}{note[1:]}." if note else text


def drawn_kinds(png: bytes) -> list[str] | None:
    """The kinds of mark a figure drew, from its PNG's text chunk (``figures.DRAWN_KEY``);
    ``None`` for a PNG without one (drawn by an older version)."""
    key = DRAWN_KEY.encode("latin-1") + b"\0"
    pos = 8  # after the signature: chunks of length, type, data, CRC
    while pos + 8 <= len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + length]
        if kind == b"tEXt" and data.startswith(key):
            value = data[len(key):].decode("latin-1")
            return [k for k in value.split(",") if k]
        if kind == b"IDAT":  # text chunks written by matplotlib come before the image
            return None
        pos += 12 + length
    return None


def _written(section: Section, figures: dict[str, Path]) -> list[str]:
    """The section's figures that were written (``figures``: ``write_figures``' result)."""
    return [name for name in section.figures if name in figures]


def render_html(sections: list[Section], figures: dict[str, Path], title: str,
                note: str | None = None) -> str:  # fmt: skip
    """The report as one HTML page: its Markdown text rendered (code, emphasis, links), every
    figure embedded as a base64 PNG shown at its natural (print) size, tables as HTML."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for s in (s for s in sections if s.shown(figures)):
        body.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.text:
            body.append(f"<p>{inline_html(s.text)}</p>")
        for name in _written(s, figures):
            png = Path(figures[name]).read_bytes()
            width = round(min(_png_width_px(png) * CSS_PX_PER_IN / DPI * SCREEN_SCALE,
                              _png_width_px(png)))
            data = base64.b64encode(png).decode("ascii")
            text = html.escape(caption(name, note, drawn_kinds(png)))
            body.append(f'<figure><img alt="{text}" width="{width}" '
                        f'src="data:image/png;base64,{data}">'
                        f"<figcaption>{text}</figcaption></figure>")
        if s.table is not None and not s.table.empty:
            body.append(_html_table(s.table))
    style = ("body{font-family:sans-serif;margin:2em;padding:0 1em}"
             "table{border-collapse:collapse;font-size:0.85em;margin:1em 0}"
             "th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
             "td.text,th.text{text-align:left}img{max-width:100%;height:auto}"
             "code{font-size:0.9em;background:#f4f4f4;padding:0 2px}"
             "figure{margin:1em 0}figcaption{font-size:0.85em;color:#444;max-width:45em}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def _html_table(table: pd.DataFrame) -> str:
    """A display table as HTML, each header and cell rendered by :func:`inline_html`."""
    text = [not _numeric(table[c]) for c in table.columns]  # left-aligned columns
    def cell(tag: str, value, left: bool) -> str:
        attr = ' class="text"' if left else ""
        return f"<{tag}{attr}>{inline_html(str(value))}</{tag}>"
    head = "".join(cell("th", c, left) for c, left in zip(table.columns, text, strict=True))
    rows = ["<tr>" + "".join(cell("td", v, left) for v, left in zip(row, text, strict=True))
            + "</tr>" for row in table.itertuples(index=False)]
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


#: A table cell that reads as a number: digits with separators, sign, unit or ``x``.
_NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s*(%|x|\*)*")


def _numeric(column: pd.Series) -> bool:
    """Whether a display column holds numbers (every cell a number or :data:`MISSING`):
    right-aligned; text columns are left-aligned."""
    values = [str(v) for v in column if str(v) != MISSING]
    return bool(values) and all(_NUMBER.fullmatch(v) for v in values)


#: The inline Markdown the report's text and cells use: `code`, [text](link), *emphasis*.
_INLINE = re.compile(r"`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)|\*([^*\s][^*]*)\*")


def inline_html(text: str) -> str:
    """Inline Markdown as HTML, everything else escaped: ```code``` becomes ``<code>``,
    ``[text](link)`` a link, ``*text*`` emphasis."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        code, label, href, em = m.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif label is not None:
            out.append(f'<a href="{html.escape(href)}">{html.escape(label)}</a>')
        else:
            out.append(f"<em>{html.escape(em)}</em>")
        pos = m.end()
    return "".join(out) + html.escape(text[pos:])


def _png_width_px(png: bytes) -> int:
    """A PNG's width in pixels, from its IHDR chunk."""
    return struct.unpack(">I", png[16:20])[0]
