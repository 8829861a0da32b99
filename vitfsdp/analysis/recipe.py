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

from vitfsdp.analysis.verdict import compare, span

#: ``<recipe>_<step>_<what>``: a recipe step's preset name (the baseline is ``<recipe>``).
STEP_NAME = re.compile(r"^(?P<recipe>.+?)_(?P<step>\d+)_(?P<what>.+)$")
#: Columns of :func:`recipe_table`, in order.
RECIPE_COLUMNS = (
    "recipe", "step", "what", "experiment", "model", "nodes", "world_size", "num_runs",
    "num_completed", "statuses", "ips", "ips_min", "ips_max", "ips_span_low",
    "ips_span_high", "baseline_ips", "relative_ips", "relative_min", "relative_max",
    "vs_baseline",
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
        :data:`RECIPE_COLUMNS`: ``ips`` the median images/s (global) over the step's
        completed runs at that node count and ``ips_min``/``ips_max`` their range over
        repeats; ``ips_span_low``/``ips_span_high`` what ``vs_baseline`` compares (the span
        over repeats, else over the one run's timed windows:
        :func:`~vitfsdp.analysis.verdict.span`); ``relative_ips`` = ``ips`` /
        ``baseline_ips`` (the baseline's median at the same node count; NaN where the
        baseline did not complete there), with
        ``relative_min``/``relative_max`` from the range; ``vs_baseline``: whether the step
        differs from the baseline at all (:func:`vitfsdp.analysis.verdict.judge` of their
        spans, over repeats, else one run's windows; ``noise`` the sweep's noise check's
        ratio; empty for the baseline); ``statuses`` counts the runs that did not complete
        (``"1 oom"``). Empty (with these columns) when the runs hold no recipe.
    """
    steps = recipe_steps(df["experiment"]) if "experiment" in df else None
    if steps is None or steps["recipe"].isna().all():
        return pd.DataFrame(columns=list(RECIPE_COLUMNS))
    runs = df.join(steps)[steps["recipe"].notna() & df["nodes"].notna()]
    done = runs["status"].eq("completed") & runs["ips"].notna()
    keys = ["recipe", "step", "what", "experiment", "nodes"]
    windows = {c: runs[c].where(done) if c in runs else runs["ips"].where(done)
               for c in ("ips_min", "ips_max")}
    table = runs.assign(_ips=runs["ips"].where(done), _done=done, _win_lo=windows["ips_min"],
                        _win_hi=windows["ips_max"]).groupby(keys).agg(
        model=("model", "first"), world_size=("world_size", "first"),
        num_runs=("run_dir", "count"), num_completed=("_done", "sum"),
        ips=("_ips", "median"), ips_min=("_ips", "min"), ips_max=("_ips", "max"),
        win_lo=("_win_lo", "min"), win_hi=("_win_hi", "max"))
    table = table.reset_index()
    table["ips_span_low"], table["ips_span_high"] = span(
        table["num_completed"], table["ips_min"], table["ips_max"], table["win_lo"],
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
    spans = spans[spans["step"] == 0][["ips", "ips_span_low", "ips_span_high", "num_completed"]]
    table["vs_baseline"] = [_versus(r, spans, noise) for r in table.itertuples()]
    table = table.sort_values(["recipe", "step", "nodes"], kind="stable")
    return table[list(RECIPE_COLUMNS)].reset_index(drop=True)


def _versus(row, baseline: pd.DataFrame, noise: float) -> str:
    """A step's :func:`~vitfsdp.analysis.verdict.judge` against its baseline at the same
    node count; ``""`` for the baseline itself or where either did not complete."""
    if row.step == 0 or (row.recipe, row.nodes) not in baseline.index or pd.isna(row.ips):
        return ""
    base = baseline.loc[(row.recipe, row.nodes)]
    return compare((row.ips_span_low, row.ips_span_high, int(row.num_completed)),
                   (base["ips_span_low"], base["ips_span_high"], int(base["num_completed"])),
                   row.ips, base["ips"], noise)


def _not_completed(runs: pd.DataFrame) -> str:
    """``"1 oom, 1 failed"``: the runs of a step that did not complete, by status."""
    bad = runs[runs["status"] != "completed"]["status"].value_counts()
    return ", ".join(f"{count} {status}" for status, count in bad.items())
