"""Whether two measured throughputs differ, in one set of words for every table that
compares points: a difference is a result only where their spans do not overlap, both sides
ran often enough that two sets of runs of one configuration would separate so completely
at most :data:`MAX_SEPARATION_CHANCE` of the time (3 runs each), and their ratio exceeds
what the sweep's noise check saw one computation do (the project's rule: one run is not a
result)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vitfsdp.core.flags import FLAG_WORDS, read_flag  # noqa: F401  (the analysis reads them here)

#: What :func:`~vitfsdp.analysis.tables.best_table` and the other tables say of two points'
#: images/s.
BEYOND, WITHIN = "beyond the spread", "within the spread: no difference"
#: What :func:`judge` says of a win beyond the spread where either point ran once: one
#: run's windows are the least its noise can be, not the noise between runs, which on the
#: CPU demo of 2026-11-27 moved 1-node points 5-15% between quiet sweeps while each run's
#: windows spread 1-4% (docs/benchmarks.md, "The CPU demo, three times quiet and once beside
#: busy loops"); other sweeps' windows spread more (the report's Runs section quotes each
#: sweep's own, :func:`vitfsdp.analysis.report.window_spread`).
ONE_RUN = "one run: not established"
#: ... and of a win no larger than the noise check's: the same computation under two names
#: differed as much in this sweep (:func:`vitfsdp.analysis.tables.observed_noise`).
IN_NOISE = "within observed noise"
#: ... and of a win beyond the spread where both points repeated, but too few times: two
#: sets of runs of one configuration separate that completely by chance more often than
#: :data:`MAX_SEPARATION_CHANCE` (2 runs each: 1 time in 3).
FEW_RUNS = "too few runs: not established"
#: The largest :func:`separation_chance` a result may rest on: 3 runs each (1 in 10).
MAX_SEPARATION_CHANCE = 0.10
#: Every verdict that is not a result, in the order the report lists them.
NOT_RESULTS = (WITHIN, IN_NOISE, ONE_RUN, FEW_RUNS)
#: What a comparison says in place of a ranking where other work competed with runs of a
#: point compared (:func:`contended_verdict`): their images/s measure the contention, not
#: the configuration: best.csv's ``difference``, prefetch.csv's ``vs_best`` and the
#: JAX/PyTorch ratio's ``difference`` alike.
CONTENDED = "not a result: other work competed"
#: What the JAX/PyTorch ratio says where a side has no completed run at a point both
#: frameworks ran (:func:`~vitfsdp.analysis.lines.framework_ratio_table`): no images/s to
#: compare, e.g. ``"no result: jax failed (1 of 1 runs)"``.
NO_RESULT = "no result"
#: What a comparison says in place of a ranking where a point compared was host-bound
#: (:func:`vitfsdp.core.throughput.any_host_bound` True): its images/s measure the host's
#: loop and the wrapper, not the devices (:func:`host_bound_verdict`): best.csv's
#: ``difference``, prefetch.csv's ``vs_best`` and the JAX/PyTorch ratio's ``difference``.
HOST_BOUND = "host-bound: compares host loops and wrappers, not the devices"
#: What a comparison says in place of a ranking where a point compared ran on GPUs whose
#: busy share was not measured (no NVML or AMD SMI readings, records older than the field)
#: and none was measured host-bound (:func:`unmeasured_verdict`): whether the host decided
#: its step is not known, so its images/s may measure the host's loop, and the table does
#: not rank it as a device comparison. CPU ranks, where the host is the device, keep their
#: verdicts.
UNMEASURED = "GPU busy share not measured: host-bound not known, not ranked"
#: What a comparison says in place of a ranking where the two points' final losses part
#: (:func:`loss_parted`): they did not train alike (another program, data or labels), so
#: their images/s are not of like for like (:func:`unlike_verdict`): best.csv's
#: ``difference``.
NOT_LIKE_FOR_LIKE = "not like-for-like (loss differs)"
#: What a comparison says in place of a ranking where a point compared pooled runs that
#: share a ``repeat`` label (points.csv ``runs_share_repeat`` > 0: a rerun under another
#: seed, a setting the records do not hold): its runs are not known to be repeats, so its
#: median and spread are not one configuration's (:func:`pooled_verdict`): best.csv's
#: ``difference`` and the JAX/PyTorch ratio's.
NOT_KNOWN_REPEATS = "not known repeats"
#: What an efficiency above 100 % of ideal is put down to where its line's baseline gives
#: a cause (:func:`above_ideal_cause`), else noise.
ABOVE_IDEAL_CAUSES = ("host-bound baseline", "contended baseline", "one-run baseline", "noise")


def separation_chance(runs_a: int, runs_b: int) -> float:
    """The chance that ``runs_a`` and ``runs_b`` runs of one configuration (independent,
    from one continuous distribution, so every order of the pooled runs is equally likely)
    come out with one side's runs all above the other's, either way round:
    ``2 / C(runs_a + runs_b, runs_a)``. It is the two-sided p-value of the exact
    Mann-Whitney test at its extreme, U = 0 (Mann and Whitney, 1947, Ann. Math. Statist.
    18(1): 50-60): the evidence two non-overlapping spans carry, whatever their gap.

    Examples: 1 and 1 run: 1.0; 2 and 2: 1/3; 3 and 3: 1/10; 5 and 5: 1/126.

    Raises:
        ValueError: either count is below 1.
    """
    if runs_a < 1 or runs_b < 1:
        raise ValueError(f"runs_a={runs_a}, runs_b={runs_b}: each side needs a run")
    return min(1.0, 2 / math.comb(runs_a + runs_b, runs_a))


def differs(low_a: float, high_a: float, low_b: float, high_b: float) -> str:
    """:data:`BEYOND` where two spans of images/s do not overlap, else :data:`WITHIN`."""
    return BEYOND if low_a > high_b or low_b > high_a else WITHIN


def judge(a: tuple[float, float, int], b: tuple[float, float, int], ratio: float,
          noise: float = np.nan, max_chance: float = MAX_SEPARATION_CHANCE) -> str:  # fmt: skip
    """Whether one point's images/s differ from another's, in the words of the study's
    tables (best.csv, prefetch.csv, the JAX/PyTorch ratios).

    Args:
        a, b: each point's ``(low, high, runs)``: the span of its measurements in images/s
            (:func:`span`) and how many runs it completed.
        ratio: the faster point's images/s over the slower's (>= 1).
        noise: the largest ratio between two points that compute the same thing
            (:func:`vitfsdp.analysis.tables.observed_noise`); NaN where the sweep has no
            such pair.
        max_chance: the largest :func:`separation_chance` a result may rest on; a caller
            that compares the fastest of ``k`` with each of the other ``k - 1`` passes
            ``MAX_SEPARATION_CHANCE / (k - 1)`` (Bonferroni), so the group as a whole keeps
            :data:`MAX_SEPARATION_CHANCE`.

    Returns:
        :data:`WITHIN` where the spans overlap; else :data:`IN_NOISE` where ``ratio`` is at
        most ``noise``; else :data:`ONE_RUN` where either point ran once; else
        :data:`FEW_RUNS` where their :func:`separation_chance` exceeds ``max_chance``;
        else :data:`BEYOND`, the one verdict the report
        calls a speed-up.
    """
    if differs(a[0], a[1], b[0], b[1]) == WITHIN:
        return WITHIN
    if pd.notna(noise) and ratio <= noise:
        return IN_NOISE
    if min(a[2], b[2]) < 2:
        return ONE_RUN
    if separation_chance(int(a[2]), int(b[2])) > max_chance:
        return FEW_RUNS
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


def contended_verdict(contended: int, total: int, whose: str = "") -> str:
    """:data:`CONTENDED` with its count, e.g. ``"not a result: other work competed (2 of 2
    runs)"``, or of another point the verdict rests on (``whose``: ``"the fastest"``):
    ``"not a result: other work competed with the fastest (3 of 3 runs)"``."""
    return f"{CONTENDED}{f' with {whose}' if whose else ''} ({contended} of {total} runs)"


def host_bound_verdict(ratio: float) -> str:
    """:data:`HOST_BOUND` with how far apart the two points are, ``ratio`` the faster's
    images/s over the slower's (>= 1): ``"host-bound: compares host loops and wrappers, not
    the devices (2.00x apart)"``."""
    return f"{HOST_BOUND} ({ratio:.2f}x apart)"


def unmeasured_verdict(ratio: float) -> str:
    """:data:`UNMEASURED` with how far apart the two points are (``ratio`` >= 1):
    ``"GPU busy share not measured: host-bound not known, not ranked (1.50x apart)"``."""
    return f"{UNMEASURED} ({ratio:.2f}x apart)"


def unlike_verdict(loss: float, other_loss: float, ratio: float) -> str:
    """:data:`NOT_LIKE_FOR_LIKE` with both final losses (nats, the faster point's first)
    and how far apart the two points are (``ratio`` >= 1): ``"not like-for-like (loss
    differs): final loss 0.0096 against 3.08, not ranked (1.39x apart)"``."""
    return (f"{NOT_LIKE_FOR_LIKE}: final loss {loss:.3g} against {other_loss:.3g}, not "
            f"ranked ({ratio:.2f}x apart)")


def pooled_verdict(ratio: float, *sides: str) -> str:
    """:data:`NOT_KNOWN_REPEATS` with whose runs share a repeat label (``sides``, each e.g.
    ``"the fastest's 2 runs (final loss 0.317-3.24)"``, :func:`loss_range` after it) and how
    far apart the two points are (``ratio`` >= 1): ``"not known repeats: the fastest's 2
    runs (final loss 0.317-3.24) share a repeat label, not ranked (1.07x apart)"``."""
    return (f"{NOT_KNOWN_REPEATS}: {' and '.join(sides)} share a repeat label, not ranked "
            f"({ratio:.2f}x apart)")


def loss_range(low: float, high: float) -> str:
    """The final losses (nats) of a point's runs as words where they part
    (:func:`loss_parted`: its median is a loss no run reached), ``" (final loss
    0.317-3.24)"``; ``""`` where they do not, or are not known."""
    return f" (final loss {low:.3g}-{high:.3g})" if loss_parted(low, high) else ""


def gpu_unmeasured(busy: object, device_type: object) -> bool:
    """Whether a point ran on a GPU (``device_type`` recorded and not ``cpu``) without a
    busy share (``busy``: its ``device_busy_frac``, or its ``host_bound`` flag; None, NaN
    or NA where not measured)."""
    known = busy is not None and busy is not pd.NA and not (
        isinstance(busy, float) and busy != busy)
    return not known and isinstance(device_type, str) and device_type not in ("", "cpu")


def ranked(verdict: str, bound: object, ratio: float, unmeasured: bool = False) -> str:
    """``verdict`` (:func:`judge`'s), or :func:`host_bound_verdict` in its place where
    ``bound`` (:func:`vitfsdp.core.throughput.any_host_bound` of the points compared) is
    True: a host-bound comparison ranks host loops, whatever its spans say; else
    :func:`unmeasured_verdict` where ``unmeasured`` (a point compared ran on a GPU without
    a busy share, :func:`gpu_unmeasured`). ``""`` stays ``""`` (nothing compared)."""
    if verdict and _true(bound):
        return host_bound_verdict(ratio)
    if verdict and unmeasured:
        return unmeasured_verdict(ratio)
    return verdict


def judged_runs(contended: pd.Series, point: list[pd.Series]) -> pd.Series:
    """Which runs a point's images/s (median, spread) and every verdict on it are taken
    over, on ``contended``'s index: its runs other work did not compete with where it has
    any, else all of them (the point's figures then rest on contended runs only, and its
    verdicts say so: :func:`contended_verdict`). Contended runs left out stay in runs.csv
    and are counted (points.csv ``runs_contended``).

    Args:
        contended: bool per completed run (:func:`vitfsdp.analysis.lines.competed_flags`).
        point: the columns that name a run's point (line columns and ``nodes``).
    """
    clean = ~contended.astype(bool)
    has_clean = clean.groupby(point, dropna=False).transform("any")
    return clean | ~has_clean.astype(bool)


def left_out_note(contended: int, whose: str = "") -> str:
    """``"2 runs beside other work left out"`` (``whose``: ``"the fastest: 1 run beside
    other work left out"``): a point's contended runs that its figures and verdict are not
    taken over (:func:`judged_runs`); ``""`` where none."""
    if not contended:
        return ""
    return (f"{f'{whose}: ' if whose else ''}{contended} run{'s' if contended > 1 else ''} "
            "beside other work left out")


def above_ideal_cause(baseline_host_bound: object, baseline_contended: object,
                      baseline_runs: object) -> str:
    """Why a weak-scaling efficiency may read above 100 % of ideal
    (:data:`ABOVE_IDEAL_CAUSES`): its line's baseline was host-bound (the baseline's
    images/s measure its host loop, so the ideal drawn from it is low), its baseline's
    figures rest on contended runs only, the baseline ran once (one run's median, no spread
    between runs), else noise in the baseline or the point (not super-linear scaling: every
    rank does the same work)."""
    if _true(baseline_host_bound):
        return ABOVE_IDEAL_CAUSES[0]
    if _true(baseline_contended):
        return ABOVE_IDEAL_CAUSES[1]
    if baseline_runs is not None and pd.notna(baseline_runs) and int(baseline_runs) < 2:
        return ABOVE_IDEAL_CAUSES[2]
    return ABOVE_IDEAL_CAUSES[3]


def _true(flag: object) -> bool:
    """Whether a flag reads True (:func:`read_flag`)."""
    return read_flag(flag) is True


def failed_note(failed: int, total: int, whose: str = "") -> str:
    """``"1 of 3 runs failed"`` (``whose``: ``"jax: 1 of 3 runs failed"``), what a verdict
    adds where a point compared had runs that did not complete (its images/s are the median
    of the others); ``""`` where none failed."""
    if not failed:
        return ""
    return f"{f'{whose}: ' if whose else ''}{failed} of {total} runs failed"


def with_notes(verdict: str, *notes: str) -> str:
    """``verdict`` and each non-empty note, ``"; "`` between them."""
    return "; ".join(part for part in (verdict, *notes) if part)


#: Final losses "part" (:func:`loss_parted`) where the higher is at least this (nats) ...
PARTED_LOSS_FLOOR = 1.0
#: ... and at least this many times the lower.
PARTED_LOSS_FACTOR = 10.0


def loss_parted(torch_loss: float, jax_loss: float) -> bool:
    """Whether two final training losses (nats, runs.csv ``loss``) say the two sides did
    not train alike: the higher is at least :data:`PARTED_LOSS_FLOOR` (1 nat: the right
    class gets under 1/e of the probability on average, so that side has not learned the
    data) and at least :data:`PARTED_LOSS_FACTOR` times the lower (the other side has).
    A factor alone would flag noise: near zero, runs of one program part by several times
    (in the committed H100 sweep, ViT-H FULL_SHARD runs that differ only in activation
    checkpointing, which changes no arithmetic, ended at 0.021 and 0.082; DDP ones at
    0.026 and 0.134); a floor alone would flag two sides at chance
    alike (a short CPU run of both, 5.75 against 5.75 at 1000 classes). Chance,
    ln(num_classes), is no bound: synthetic data repeats its batches, so a side that
    learned the batch's labels but not the images sits near ln(local batch), far below
    ln(num_classes) (the H100 pair's PyTorch run: 3.08, near ln 32 = 3.47, against ln 1000
    = 6.91, while JAX reached 0.0096). False where either is not known (NaN)."""
    if pd.isna(torch_loss) or pd.isna(jax_loss):
        return False
    high, low = max(torch_loss, jax_loss), min(torch_loss, jax_loss)
    return bool(high >= PARTED_LOSS_FLOOR and high >= PARTED_LOSS_FACTOR * low)
