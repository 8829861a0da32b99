"""Whether two measured throughputs differ, in one set of words for every table that
compares points: a difference is a result only where both sides ran at least twice, their
spans do not overlap and their ratio exceeds what the sweep's noise check saw one
computation do (the project's rule: one run is not a result)."""

from __future__ import annotations

import numpy as np
import pandas as pd

#: What :func:`~vitfsdp.analysis.tables.best_table` and the other tables say of two points'
#: images/s.
BEYOND, WITHIN = "beyond the spread", "within the spread: no difference"
#: What :func:`judge` says of a win beyond the spread where either point ran once: one
#: run's windows are the least its noise can be, not the noise between runs, which on the
#: CPU demo moved 1-node points 5-15% between quiet sweeps while each run's windows spread
#: 1-4% (docs/benchmarks.md, "The CPU demo, three times quiet and once beside busy loops").
ONE_RUN = "one run: not established"
#: ... and of a win no larger than the noise check's: the same computation under two names
#: differed as much in this sweep (:func:`vitfsdp.analysis.tables.observed_noise`).
IN_NOISE = "within observed noise"


def differs(low_a: float, high_a: float, low_b: float, high_b: float) -> str:
    """:data:`BEYOND` where two spans of images/s do not overlap, else :data:`WITHIN`."""
    return BEYOND if low_a > high_b or low_b > high_a else WITHIN


def judge(a: tuple[float, float, int], b: tuple[float, float, int], ratio: float,
          noise: float = np.nan) -> str:  # fmt: skip
    """Whether one point's images/s differ from another's, in the words of the study's
    tables (best.csv, prefetch.csv, the JAX/PyTorch ratios).

    Args:
        a, b: each point's ``(low, high, runs)``: the span of its measurements in images/s
            (:func:`span`) and how many runs it completed.
        ratio: the faster point's images/s over the slower's (>= 1).
        noise: the largest ratio between two points that compute the same thing
            (:func:`vitfsdp.analysis.tables.observed_noise`); NaN where the sweep has no
            such pair.

    Returns:
        :data:`WITHIN` where the spans overlap; else :data:`IN_NOISE` where ``ratio`` is at
        most ``noise``; else :data:`ONE_RUN` where either point ran once; else
        :data:`BEYOND`, the one verdict the report calls a speed-up.
    """
    if differs(a[0], a[1], b[0], b[1]) == WITHIN:
        return WITHIN
    if pd.notna(noise) and ratio <= noise:
        return IN_NOISE
    if min(a[2], b[2]) < 2:
        return ONE_RUN
    return BEYOND


def span(runs: pd.Series, run_low: pd.Series, run_high: pd.Series, window_low: pd.Series,
         window_high: pd.Series, value: pd.Series) -> tuple[pd.Series, pd.Series]:  # fmt: skip
    """(low, high) images/s a point's measurements span, the one rule of every table: the
    min and max over its runs where it ran at least twice, else over its one run's timed
    windows (the least its noise can be), else its ``value`` alone.

    Args:
        runs: completed runs per point.
        run_low, run_high: the slowest and fastest run's images/s.
        window_low, window_high: the slowest and fastest window over the point's runs.
        value: the point's images/s (its median).

    Returns:
        Two float Series on ``runs``' index.
    """
    repeated = runs.fillna(1) >= 2
    low = run_low.where(repeated, window_low.fillna(value))
    high = run_high.where(repeated, window_high.fillna(value))
    return low.astype(float), high.astype(float)


def compare(a: tuple[float, float, int], b: tuple[float, float, int], value_a: float,
            value_b: float, noise: float = np.nan) -> str:  # fmt: skip
    """:func:`judge` of two points in either order: the faster of ``value_a`` and
    ``value_b`` (images/s) first, the ratio theirs (>= 1); ``""`` where either value is not
    a positive number."""
    if not (value_a > 0 and value_b > 0):
        return ""
    if value_a >= value_b:
        return judge(a, b, value_a / value_b, noise)
    return judge(b, a, value_b / value_a, noise)
