"""A recipe ablation: the images/s each cumulative recipe step reaches, relative to the
recipe's baseline, PyCls style (``recipe.csv`` and ``recipe.png``).

A recipe is a family of experiment presets named ``<recipe>`` (the baseline, step 0) and
``<recipe>_<n>_<what>`` (step ``n``, which adds ``what`` to step ``n - 1``), e.g.
``pycls_recipe``, ``pycls_recipe_1_amp_fp16``, ``pycls_recipe_2_fsdp`` (conf/experiment/);
each run records its preset in run.json's ``config.experiment``. A sweep over those presets
(``-m experiment=pycls_recipe,pycls_recipe_1_amp_fp16,...``) is a recipe ablation; runs of
other presets, or of none, are left out.
"""

from __future__ import annotations

import re

import pandas as pd

from vitfsdp.analysis.lines import competed_flags, judged_busy
from vitfsdp.analysis.verdict import (
    compare,
    contended_verdict,
    gpu_unmeasured,
    judged_runs,
    left_out_note,
    ranked,
    span,
    with_notes,
)
from vitfsdp.core.throughput import any_host_bound, host_bound

#: ``<recipe>_<step>_<what>``: a recipe step's preset name (the baseline is ``<recipe>``).
STEP_NAME = re.compile(r"^(?P<recipe>.+?)_(?P<step>\d+)_(?P<what>.+)$")
#: Columns of :func:`recipe_table`, in order.
RECIPE_COLUMNS = (
    "recipe", "step", "what", "experiment", "model", "nodes", "world_size", "num_runs",
    "num_completed", "runs_contended", "runs_judged", "figures_contended", "statuses", "ips",
    "ips_min", "ips_max", "ips_span_low", "ips_span_high", "baseline_ips", "relative_ips",
    "relative_min", "relative_max", "vs_baseline", "device_busy_frac", "host_bound",
    "device_type",
)  # fmt: skip


def recipe_steps(experiments: pd.Series) -> pd.DataFrame:
    """``recipe``, ``step`` (0 = baseline) and ``what`` of each experiment name that belongs
    to a recipe: a name ``<recipe>_<n>_<what>`` whose ``<recipe>`` is itself among the
    names, or such a ``<recipe>`` (step 0, ``what`` = ``baseline``); other names get NaN."""
    names = pd.Series(experiments.astype("object"), index=experiments.index)
    parsed = [STEP_NAME.match(n) if isinstance(n, str) else None for n in names]
    recipes = {m["recipe"] for m in parsed if m is not None} & set(names.dropna())
    rows = []
    for name, m in zip(names, parsed, strict=True):
        if m is not None and m["recipe"] in recipes:
            rows.append((m["recipe"], int(m["step"]), m["what"]))
        elif name in recipes:
            rows.append((name, 0, "baseline"))
        else:
            rows.append((None, None, None))
    return pd.DataFrame(rows, columns=["recipe", "step", "what"], index=experiments.index)


def recipe_table(df: pd.DataFrame, noise: float = float("nan")) -> pd.DataFrame:
    """One row per recipe step and node count of a ``collect_runs`` frame.

    Returns:
        :data:`RECIPE_COLUMNS`: ``num_completed`` the step's completed runs at that node
        count, ``runs_contended`` its runs of any status other work competed with
        (:func:`~vitfsdp.analysis.lines.competed_flags`), ``runs_judged`` the completed runs
        its figures and verdict are over (those other work did not compete with where it
        has any: :func:`~vitfsdp.analysis.verdict.judged_runs`, points.csv's rule) and
        ``figures_contended`` (true where every one of them was contended); ``ips`` the
        median images/s (global) over those runs and ``ips_min``/``ips_max`` their range;
        ``ips_span_low``/``ips_span_high`` what ``vs_baseline`` compares (the span over
        repeats, else over the one run's timed windows:
        :func:`~vitfsdp.analysis.verdict.span`); ``relative_ips`` = ``ips`` /
        ``baseline_ips`` (the baseline's median at the same node count; NaN where the
        baseline did not complete there), with
        ``relative_min``/``relative_max`` from the range; ``vs_baseline``: whether the step
        differs from the baseline at all (:func:`vitfsdp.analysis.verdict.judge` of their
        spans, over repeats, else one run's windows; ``noise`` the sweep's noise check's
        ratio; empty for the baseline; where every run of the step, or else of its baseline,
        was contended, :func:`~vitfsdp.analysis.verdict.contended_verdict` in place of any
        ranking, ``"not a result: other work competed with the baseline (3 of 3 runs)"``;
        where either was host-bound, :func:`~vitfsdp.analysis.verdict.host_bound_verdict`,
        and where neither was but either ran on GPUs without a busy share,
        :func:`~vitfsdp.analysis.verdict.unmeasured_verdict`; contended runs left out noted,
        ``"; the baseline: 1 run beside other work left out"``); ``device_busy_frac`` the
        median busy share of the judged runs (the least busy rank's where recorded,
        :func:`~vitfsdp.analysis.lines.judged_busy`), ``host_bound``
        (:func:`vitfsdp.core.throughput.host_bound` of it; NA where not measured) and
        ``device_type`` (what the runs ran on); ``statuses`` counts the runs that did not complete
        (``"1 oom"``). Empty (with these columns) when the runs hold no recipe.
    """
    steps = recipe_steps(df["experiment"]) if "experiment" in df else None
    if steps is None or steps["recipe"].isna().all():
        return pd.DataFrame(columns=list(RECIPE_COLUMNS))
    runs = df.join(steps)[steps["recipe"].notna() & df["nodes"].notna()]
    done = runs["status"].eq("completed") & runs["ips"].notna()
    keys = ["recipe", "step", "what", "experiment", "nodes"]
    contended = competed_flags(runs)
    judged = pd.Series(False, index=runs.index)
    judged[done] = judged_runs(contended[done], [runs.loc[done, k] for k in keys])
    windows = {c: runs[c].where(judged) if c in runs else runs["ips"].where(judged)
               for c in ("ips_min", "ips_max")}
    table = runs.assign(
        _ips=runs["ips"].where(judged), _done=done, _judged=judged, _contended=contended,
        _judged_contended=judged & contended, _busy=judged_busy(runs).where(judged),
        _win_lo=windows["ips_min"], _win_hi=windows["ips_max"],
        _device=runs.get("device_type", pd.Series(None, index=runs.index)),
    ).groupby(keys).agg(
        model=("model", "first"), world_size=("world_size", "first"),
        num_runs=("run_dir", "count"), num_completed=("_done", "sum"),
        runs_contended=("_contended", "sum"), runs_judged=("_judged", "sum"),
        judged_contended=("_judged_contended", "sum"),
        ips=("_ips", "median"), ips_min=("_ips", "min"), ips_max=("_ips", "max"),
        win_lo=("_win_lo", "min"), win_hi=("_win_hi", "max"),
        device_busy_frac=("_busy", "median"), device_type=("_device", "first"))
    table = table.reset_index()
    table["figures_contended"] = (table["runs_judged"] > 0) & (
        table["judged_contended"] == table["runs_judged"])
    table["host_bound"] = table["device_busy_frac"].map(host_bound).astype("boolean")
    table["ips_span_low"], table["ips_span_high"] = span(
        table["runs_judged"], table["ips_min"], table["ips_max"], table["win_lo"],
        table["win_hi"], table["ips"])
    table["statuses"] = [_not_completed(runs[(runs["experiment"] == e) & (runs["nodes"] == n)])
                         for e, n in zip(table["experiment"], table["nodes"], strict=True)]
    base = table[table["step"] == 0].set_index(["recipe", "nodes"])["ips"]
    table["baseline_ips"] = [base.get((r, n)) for r, n in
                             zip(table["recipe"], table["nodes"], strict=True)]
    baseline = pd.to_numeric(table["baseline_ips"], errors="coerce")
    for col, src in (("relative_ips", "ips"), ("relative_min", "ips_min"),
                     ("relative_max", "ips_max")):
        table[col] = table[src] / baseline
    spans = table.set_index(["recipe", "nodes"])
    spans = spans[spans["step"] == 0][["ips", "ips_span_low", "ips_span_high", "runs_judged",
                                       "runs_contended", "figures_contended", "num_runs",
                                       "host_bound", "device_type"]]
    table["vs_baseline"] = [_versus(r, spans, noise) for r in table.itertuples()]
    table = table.sort_values(["recipe", "step", "nodes"], kind="stable")
    return table[list(RECIPE_COLUMNS)].reset_index(drop=True)


def _versus(row, baseline: pd.DataFrame, noise: float) -> str:
    """A step's ``vs_baseline`` against its baseline at the same node count (see
    :func:`recipe_table`); ``""`` for the baseline itself or where either did not
    complete."""
    if row.step == 0 or (row.recipe, row.nodes) not in baseline.index or pd.isna(row.ips):
        return ""
    base = baseline.loc[(row.recipe, row.nodes)]
    if pd.isna(base["ips"]):
        return ""
    if row.figures_contended:
        verdict = contended_verdict(int(row.runs_contended), int(row.num_runs))
    elif base["figures_contended"]:
        verdict = contended_verdict(int(base["runs_contended"]), int(base["num_runs"]),
                                    "the baseline")
    else:
        ratio = max(row.ips / base["ips"], base["ips"] / row.ips)
        unmeasured = (gpu_unmeasured(row.host_bound, row.device_type)
                      or gpu_unmeasured(base["host_bound"], base["device_type"]))
        verdict = ranked(compare((row.ips_span_low, row.ips_span_high, int(row.runs_judged)),
                                 (base["ips_span_low"], base["ips_span_high"],
                                  int(base["runs_judged"])), row.ips, base["ips"], noise),
                         any_host_bound(row.host_bound, base["host_bound"]), ratio, unmeasured)
    sides = ((row.figures_contended, row.runs_contended, ""),
             (base["figures_contended"], base["runs_contended"], "the baseline"))
    return with_notes(verdict, *(left_out_note(0 if only else int(count), whose)
                                 for only, count, whose in sides))


def _not_completed(runs: pd.DataFrame) -> str:
    """``"1 oom, 1 failed"``: the runs of a step that did not complete, by status."""
    bad = runs[runs["status"] != "completed"]["status"].value_counts()
    return ", ".join(f"{count} {status}" for status, count in bad.items())
