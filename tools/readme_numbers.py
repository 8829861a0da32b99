"""Write the demo's measured numbers into README.md from a run of the demo, so they are never
typed by hand and never drift from what ``make demo`` measures.

    make demo                                          # runs/demo: the sweep and its analysis
    python tools/readme_numbers.py runs/demo           # rewrite README.md's marked spans
    python tools/readme_numbers.py runs/demo --check   # exit 1 where README.md differs
    python tools/readme_numbers.py runs/demo1 runs/demo2 runs/demo3   # demos as repeats

The numbers come from the analysis's own points table
(:func:`vitfsdp.analysis.tables.points_table` of :func:`vitfsdp.analysis.collect.collect_runs`:
what ``analysis/points.csv`` holds, one row per point, repeats aggregated). Each lands in a
span of README.md between two HTML comments, which Markdown renders as nothing::

    <!-- readme-numbers:fsdp-peak-gib -->1.03, 0.96, 0.92 GiB<!-- /readme-numbers -->

Several sweep directories of the same demo are read as repeats of each point (the analysis
combines runs that differ only in their directory as it combines ``repeat=N``): a figure
is then their median and its spread the min-max over all of them, which is what a new run
of the demo varies by (one run's windows spread less than runs do: quiet, the 1-node point
of the same demo measured 10.4 and 12.4 images/s on two days). Every span is one of
:data:`SPANS`, and every one of :data:`SPANS` must be in the file; the text outside the
spans is left byte for byte. ``--check`` compares a run with the numbers printed: a figure
printed with its spread (the efficiency: ``0.30 (0.28-0.33)``) agrees when the run's value
lies within it, the plan's median error when it is at most the printed worst, measured
memory within :data:`GIB_TOLERANCE`, other spans must read the same, the day is not
compared (:func:`check_span`). Exit
status: 0 written (or, with ``--check``, agreeing), 1 with ``--check`` when a span disagrees
(each printed), 2 for bad input (a sweep without the demo's points, an unknown or missing
span), in one line.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from vitfsdp.analysis.collect import collect_runs
from vitfsdp.analysis.tables import points_table
from vitfsdp.records import write_text_atomic

README = Path(__file__).resolve().parent.parent / "README.md"
#: A marked span: its name and its text.
SPAN = re.compile(
    r"<!-- readme-numbers:(?P<name>[\w-]+) -->(?P<text>.*?)<!-- /readme-numbers -->", re.S)


def peak_gib(points: pd.DataFrame, strategy: str) -> list[float]:
    """The measured peak memory per rank (``peak_mem_gib``: allocated GPU memory, or resident
    memory on CPU ranks) of ``strategy``'s points, in GiB, by node count ascending.

    Raises:
        ValueError: the sweep has no completed point of ``strategy``, or more than one at a
            node count (another study than the demo's).
    """
    rows = points[points["strategy"] == strategy].sort_values("nodes")
    if rows["nodes"].duplicated().any():
        raise ValueError(f"{strategy} has more than one point at a node count: not the demo's "
                         "sweep (python -m vitfsdp.sweep experiment=demo)")
    values = pd.to_numeric(rows["peak_mem_gib"], errors="coerce").dropna()
    if values.empty:
        raise ValueError(f"no completed {strategy} point with a peak memory; run the demo "
                         "(make demo) and give its sweep directory")
    return values.tolist()


def gib_list(values: Sequence[float]) -> str:
    """``1.03, 0.96, 0.92 GiB``."""
    return ", ".join(f"{v:.2f}" for v in values) + " GiB"


def gib_range(values: Sequence[float]) -> str:
    """``1.26 GiB``, or ``1.26-1.29 GiB`` where the values differ at two decimals."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"{low} GiB" if low == high else f"{low}-{high} GiB"


def host_cores(runs: pd.DataFrame) -> str:
    """``2 CPU cores (Intel(R) Xeon(R) Processor)``: the cores of the host the runs' ranks
    shared (``host_cpus``) and the CPU model they ran on (``device_name``, where recorded;
    the demo's figures differ from one CPU to another)."""
    cpus = pd.to_numeric(runs["host_cpus"], errors="coerce").dropna()
    if cpus.empty:
        raise ValueError("no run records its host's CPU count (run.json host_cpus)")
    names = sorted(set(runs["device_name"].dropna().astype(str))) \
        if "device_name" in runs else []
    model = f" ({' / '.join(names)})" if names else ""
    return f"{int(cpus.max())} CPU cores{model}"


def measured_on(runs: pd.DataFrame) -> str:
    """The day the sweep's last run started (``run.json`` ``started_at``), ``YYYY-MM-DD``."""
    started = pd.to_datetime(runs["started_at"], errors="coerce", utc=True).dropna()
    if started.empty:
        raise ValueError("no run records when it started (run.json started_at)")
    return started.max().strftime("%Y-%m-%d")


def _by_strategy(points: pd.DataFrame, column: str) -> dict[str, pd.Series]:
    """``column`` of each strategy's points, by node count ascending (``{}`` where absent).

    Raises:
        ValueError: more than one point of a strategy at a node count (not the demo's sweep).
    """
    out = {}
    if column not in points:
        return out
    for strategy, rows in points.sort_values("nodes").groupby("strategy", sort=False):
        if rows["nodes"].duplicated().any():
            raise ValueError(f"{strategy} has more than one point at a node count: not the "
                             "demo's sweep (python -m vitfsdp.sweep experiment=demo)")
        out[str(strategy)] = pd.to_numeric(rows[column], errors="coerce").set_axis(
            rows["nodes"].to_numpy())
    return out


#: The demo's strategies in the order the README names them.
DEMO_STRATEGIES = ("FULL_SHARD", "HYBRID_2GPU", "DDP")


def _at_nodes(points: pd.DataFrame, column: str, what: str,
              nodes: int | None = None) -> dict[str, float]:
    """``column`` of each demo strategy's point at ``nodes`` nodes (None: its largest node
    count).

    Raises:
        ValueError: a demo strategy has no value there (``what`` names the figure).
    """
    found = _by_strategy(points, column)
    out = {}
    for strategy in DEMO_STRATEGIES:
        values = found.get(strategy)
        where = "its largest node count" if nodes is None else f"{nodes} node(s)"
        value = None if values is None or values.empty else (
            values.iloc[-1] if nodes is None else values.get(nodes))
        if value is None or pd.isna(value):
            raise ValueError(f"no {what} for {strategy} at {where}; run the demo (make demo) "
                             "and give its sweep directory")
        out[strategy] = float(value)
    return out


def _median_and_bounds(tables: Sequence[pd.DataFrame], columns: tuple[str, str, str],
                       whats: tuple[str, str, str], digits: int,
                       nodes: int | None = None) -> str:
    """``FULL_SHARD 0.33 (0.31-0.35), HYBRID_2GPU ...``: per demo strategy, the median over
    the demos' points tables of ``columns[0]`` at ``nodes`` (:func:`_at_nodes`), and in
    brackets the lowest ``columns[1]`` to the highest ``columns[2]`` of them all, with
    ``digits`` decimals.

    Raises:
        ValueError: a strategy has no value there (``whats``: each column's name in it).
    """
    found: tuple[dict, dict, dict] = ({}, {}, {})
    for table in tables:
        for out, column, what in zip(found, columns, whats, strict=True):
            for strategy, value in _at_nodes(table, column, what, nodes).items():
                out.setdefault(strategy, []).append(value)
    values, lows, highs = found
    return ", ".join(f"{k} {statistics.median(v):.{digits}f} "
                     f"({min(lows[k]):.{digits}f}-{max(highs[k]):.{digits}f})"
                     for k, v in values.items())


def _tables(points: pd.DataFrame | Sequence[pd.DataFrame]) -> list[pd.DataFrame]:
    """One points table, or several demos' tables, as a list."""
    return [points] if isinstance(points, pd.DataFrame) else list(points)


def efficiency(points: pd.DataFrame | Sequence[pd.DataFrame]) -> str:
    """``FULL_SHARD 0.33 (0.31-0.35), HYBRID_2GPU ...``: weak-scaling efficiency (images/s
    over the 1-node point's x nodes, the points table's ``scaling_efficiency``) at each
    strategy's largest node count, and in brackets its bounds (``efficiency_min`` to
    ``efficiency_max``, :func:`vitfsdp.analysis.tables.efficiency_bounds`: the point's
    measurements over the 1-node point's, each with its spread over repeats, else over its
    run's windows). Given the points tables of several demos, each demo's efficiency over
    its own 1-node point: their median, and the span from the lowest bound to the highest of
    theirs (what a new run of the demo varies by).

    Raises:
        ValueError: a demo strategy has no efficiency at its largest node count.
    """
    return _median_and_bounds(_tables(points),
                              ("scaling_efficiency", "efficiency_min", "efficiency_max"),
                              ("weak-scaling efficiency", "efficiency bound",
                               "efficiency bound"), 2)


def one_node_ips(points: pd.DataFrame | Sequence[pd.DataFrame]) -> str:
    """``FULL_SHARD 8.2 (7.4-9.2), HYBRID_2GPU ...``: images/s of each strategy's 1-node point,
    the baseline its weak-scaling efficiency divides by and what tells one machine's speed
    from another's (the CPU's name does not: two "AMD EPYC" VMs measured FULL_SHARD 8.2 and
    15.8 here, docs/benchmarks.md). Given several demos' points tables: the median of theirs,
    and in brackets the slowest window of any to the fastest (``ips_window_min``,
    ``ips_window_max``).

    Raises:
        ValueError: a demo strategy has no 1-node point with images/s.
    """
    columns = ("ips", "ips_window_min", "ips_window_max")
    return _median_and_bounds(_tables(points), columns, columns, 1, nodes=1)


#: ``NAME value (low-high)`` in a span's text: a figure printed with its spread.
WITH_SPREAD = re.compile(r"(?P<name>[\w-]+) (?P<value>[\d.]+) \((?P<low>[\d.]+)-(?P<high>[\d.]+)\)")
#: The plan's error as :func:`prediction_error` prints it.
PREDICTION = re.compile(r"median (?P<median>\d+)%, worst (?P<worst>\d+)%")
#: Spans ``--check`` leaves alone: the day a run was measured differs for every new run.
UNCHECKED = ("demo-measured",)
#: Spans of measured memory (GiB), which ``--check`` compares number by number within
#: :data:`GIB_TOLERANCE`.
GIB_SPANS = ("fsdp-peak-gib", "ddp-peak-gib")
#: How far a new run's measured peak resident memory may lie from the printed one (GiB): two
#: quiet demos of 2026-11-27 differed by 0.01 at every point (allocator and page cache);
#: five times that, still far below what a strategy changes (0.04-0.16 GiB of state).
GIB_TOLERANCE = 0.05
#: The span of the 1-node points' images/s (:func:`one_node_ips`): the machine's speed.
SPEED_SPAN = "demo-1node-ips"
#: What ``--check`` adds where a new run's 1-node points lie outside the printed ones.
SPEED_HINT = ("this machine runs the demo at another speed: the efficiencies divide by these "
              "points and compare only with runs on a machine as fast")
#: A number in a span's text.
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def check_span(name: str, printed: str, new: str) -> str | None:
    """Whether a new run's text ``new`` of span ``name`` agrees with the ``printed`` one:
    ``None`` where it does, else one line saying how it does not. A figure printed with its
    spread (``NAME value (low-high)``) agrees when the new run's value of the same NAME lies
    within ``[low, high]`` (the 1-node points' images/s, :data:`SPEED_SPAN`, outside theirs:
    :data:`SPEED_HINT` too); the plan's error agrees when the new median is at most the
    printed worst; every other span must read the same (identity: the host, the link;
    counted bytes), measured memory (:data:`GIB_SPANS`) within :data:`GIB_TOLERANCE`, except
    :data:`UNCHECKED`."""
    if name in UNCHECKED or printed == new:
        return None
    if name in GIB_SPANS:
        old, now = ([float(x) for x in NUMBER.findall(t)] for t in (printed, new))
        if len(old) == len(now):  # a value per node count: each against its own
            ok = all(abs(a - b) <= GIB_TOLERANCE for a, b in zip(old, now, strict=True))
        else:  # a range (1.19-1.20 GiB) against one value, or the other way round
            ok = bool(old and now) and min(old) - GIB_TOLERANCE <= min(now) and \
                max(now) <= max(old) + GIB_TOLERANCE
        if ok:
            return None
        return f"{name}: {printed!r} -> {new!r} (more than {GIB_TOLERANCE} GiB apart)"
    worst, median = PREDICTION.search(printed), PREDICTION.search(new)
    if worst and median:  # the plan's error: the new median within the printed 0-worst
        ok = int(median["median"]) <= int(worst["worst"])
        return None if ok else (f"{name}: median {median['median']}% outside the printed "
                                f"0-{worst['worst']}%")
    spans = {m["name"]: (float(m["low"]), float(m["high"])) for m in WITH_SPREAD.finditer(printed)}
    values = {m["name"]: float(m["value"]) for m in WITH_SPREAD.finditer(new)}
    if not spans or set(spans) != set(values):
        return f"{name}: {printed!r} -> {new!r}"
    outside = [f"{k} {values[k]:.2f} outside {lo:.2f}-{hi:.2f}"
               for k, (lo, hi) in spans.items() if not lo <= values[k] <= hi]
    if outside and name == SPEED_SPAN:
        outside.append(SPEED_HINT)
    return f"{name}: {'; '.join(outside)}" if outside else None


def sent_per_step(runs: pd.DataFrame) -> str:
    """``FULL_SHARD 302 MB, ...``: the most bytes one node sent over its emulated link (the
    point's network.json, runs.csv ``sent_gb_per_node_max``) divided by the run's steps
    (``last_step``: warm-up included, as the link's counter counts them), at each demo
    strategy's largest node count (the median over repeats).

    Raises:
        ValueError: a strategy's run there recorded no bytes (the network was not emulated).
    """
    rows = runs.assign(per_step=pd.to_numeric(runs.get("sent_gb_per_node_max"), errors="coerce")
                       / pd.to_numeric(runs.get("last_step"), errors="coerce"))
    out = []
    for strategy in DEMO_STRATEGIES:
        mine = rows[rows["strategy"] == strategy]
        largest = mine[mine["nodes"] == mine["nodes"].max()]["per_step"].dropna()
        if largest.empty:
            raise ValueError(f"no bytes sent over the link recorded for {strategy} at its "
                             "largest node count; run make demo as root (network.json)")
        out.append(f"{strategy} {largest.median() * 1e3:.0f} MB")
    return ", ".join(out)


def model_state(points: pd.DataFrame) -> str:
    """``DDP 0.32, 0.32, 0.32 GiB; FULL_SHARD 0.16, 0.08, 0.04 GiB; ...``: each rank's
    parameters, gradients and AdamW state (runs.csv ``state_*_gib``: the most any rank held)
    by node count, per strategy.

    Raises:
        ValueError: no point recorded its model state.
    """
    parts = ("state_params_gib", "state_grads_gib", "state_optimizer_gib")
    if not all(c in points for c in parts):
        raise ValueError("no point records its model state (summary.json model_state_bytes); "
                         "run the demo with this version")
    total = points.assign(state_gib=points[list(parts)].apply(pd.to_numeric,
                                                             errors="coerce").sum(axis=1,
                                                                                  min_count=3))
    found = _by_strategy(total, "state_gib")
    out = []
    for strategy in ("DDP", "FULL_SHARD", "HYBRID_2GPU"):
        values = found.get(strategy, pd.Series(dtype=float)).dropna()
        if values.empty:
            raise ValueError(f"no {strategy} point records its model state")
        out.append(f"{strategy} " + gib_list(values.tolist()))
    return "; ".join(out)


def link(runs: pd.DataFrame) -> str:
    """``0.5 Gbit/s``: the emulated link's rate the runs' nodes were apart on (run.json
    ``network``, the analysis's ``network`` column).

    Raises:
        ValueError: no run's network was emulated, or the runs used different rates.
    """
    rates = set()
    for text in runs.get("network", pd.Series(dtype=object)).dropna().astype(str):
        m = re.search(r"emulated ([\d.]+) Gbit/s link", text)
        if m:
            rates.add(m.group(1))
    if len(rates) != 1:
        raise ValueError("the demo's runs were not on one emulated link (found "
                         f"{sorted(rates) or 'none'}); run make demo as root")
    return f"{rates.pop()} Gbit/s"


def prediction_error(frame: pd.DataFrame, unit: str = "points") -> str:
    """``median 16%, worst 29% over 9 points``: the plan's predicted images/s against the
    measured (``|pred_ips / ips - 1|`` of each row of ``frame``, the points table or every
    run; the prediction from the sweep's probe.json, which make demo writes; ``unit`` names
    the rows), or a sentence saying there is none."""
    pred = pd.to_numeric(frame.get("pred_ips"), errors="coerce")
    ips = pd.to_numeric(frame.get("ips"), errors="coerce")
    err = pd.Series(pred / ips - 1).abs().dropna()  # a missing column: NaN, so empty
    if err.empty:
        return "no prediction (no probe.json in the sweep's directory)"
    return f"median {err.median():.0%}, worst {err.max():.0%} over {len(err)} {unit}"


#: Span name -> its text from (every run, the points table of them all, each demo's own
#: points table).
SPANS: dict[str, Callable[[pd.DataFrame, pd.DataFrame, list[pd.DataFrame]], str]] = {
    "demo-measured": lambda runs, points, demos: measured_on(runs),
    "demo-host": lambda runs, points, demos: host_cores(runs),
    "fsdp-peak-gib": lambda runs, points, demos: gib_list(peak_gib(points, "FULL_SHARD")),
    "ddp-peak-gib": lambda runs, points, demos: gib_range(peak_gib(points, "DDP")),
    "demo-link": lambda runs, points, demos: link(runs),
    SPEED_SPAN: lambda runs, points, demos: one_node_ips(demos),
    "demo-efficiency": lambda runs, points, demos: efficiency(demos),
    "demo-sent": lambda runs, points, demos: sent_per_step(runs),
    "demo-state": lambda runs, points, demos: model_state(points),
    "demo-prediction": lambda runs, points, demos: prediction_error(
        runs[runs["status"] == "completed"], "runs"),
}


def numbers(sweep_dirs: Path | Sequence[Path]) -> dict[str, str]:
    """Every span's text from the runs below ``sweep_dirs`` (one demo, or several read as
    repeats of each point).

    Raises:
        ValueError: a directory holds no runs, or not the demo's points.
    """
    dirs = [sweep_dirs] if isinstance(sweep_dirs, (str, Path)) else list(sweep_dirs)
    each = [collect_runs(d) for d in dirs]  # each demo read once
    # several demos: each one's runs labelled as a repeat of its own (the analysis warns of
    # unlabelled repeats otherwise)
    runs = each[0] if len(each) == 1 else pd.concat(
        [r.assign(repeat=i) for i, r in enumerate(each)], ignore_index=True)
    demos = [points_table(r) for r in each]  # each efficiency over its own 1-node point
    points = demos[0] if len(demos) == 1 else points_table(runs)
    return {name: make(runs, points, demos) for name, make in SPANS.items()}


def rewrite(text: str, values: dict[str, str]) -> str:
    """``text`` with each marked span's text replaced by ``values[name]``.

    Raises:
        ValueError: a span whose name is not in ``values``, or a name of ``values`` with no
            span in ``text``.
    """
    found = [m["name"] for m in SPAN.finditer(text)]
    unknown = sorted(set(found) - set(values))
    if unknown:
        raise ValueError(f"span {unknown[0]} is not one this script fills; known: "
                         f"{', '.join(values)}")
    missing = [name for name in values if name not in found]
    if missing:
        raise ValueError(f"no span {missing[0]} in the file; mark where it goes with "
                         f"<!-- readme-numbers:{missing[0]} -->...<!-- /readme-numbers -->")
    return SPAN.sub(lambda m: f"<!-- readme-numbers:{m['name']} -->{values[m['name']]}"
                              "<!-- /readme-numbers -->", text)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (module docstring)."""
    parser = argparse.ArgumentParser(prog="python tools/readme_numbers.py",
                                     description="Write the demo's measured numbers into "
                                                 "README.md's marked spans.")
    parser.add_argument("sweep_dirs", type=Path, nargs="+", metavar="sweep_dir",
                        help="the demo's sweep directory (runs/demo); several: read as "
                             "repeats of each point")
    parser.add_argument("--readme", type=Path, default=README, help="default: README.md")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 where a span differs")
    args = parser.parse_args(argv)
    try:
        text = args.readme.read_text()
        new = rewrite(text, numbers(args.sweep_dirs))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    old = {m["name"]: m["text"] for m in SPAN.finditer(text)}
    now = {m["name"]: m["text"] for m in SPAN.finditer(new)}
    # in SPANS' order, not the file's: the machine's speed before the efficiencies it explains
    changed = {name: now[name] for name in SPANS if old[name] != now[name]}
    if args.check:
        disagree = [line for name, value in changed.items()
                    if (line := check_span(name, old[name], value))]
        for line in disagree:
            print(line)
        return 1 if disagree else 0
    for name, value in changed.items():
        print(f"{name}: {old[name]!r} -> {value!r}")
    if changed:
        write_text_atomic(args.readme, new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
