"""The plan's memory and step time for the points of a recorded sweep, recomputed by the
plan of this checkout, against what those runs measured.

    python tools/plan_check.py RUNS_CSV [--cluster cuda8]

RUNS_CSV is an analysis's runs.csv (e.g. docs/data/gpu-h100-2026-11-26-sweep-runs.csv, the
one-GPU calibration sweep): each completed run's model, strategy, activation checkpointing,
local batch, precision, nodes and ranks per node (or world size), with framework,
kernels.compile and kernels.fused_attn where recorded, are composed into a RunConfig as the
sweep would, and the plan's allocated peak and printed peak are put beside the measured
``peak_mem_gib`` (allocated on a GPU) and the column the plan's peak is compared with
(vitfsdp.plan.mem_metric: ``peak_mem_reserved_gib``; for JAX on a GPU ``peak_mem_gib``, what
XLA had in use, not its pool); the step
time from the data sheets of the ``--cluster`` profile as it ships (no probe: its peak,
``plan_efficiency`` and memory bandwidth, and the host term of vitfsdp/plan/timing.py) beside
the measured ``step_time_s``. This lets a change to the plan be checked against GPU records
without a GPU. The composition is vitfsdp.plan.exported.compose_row's, the one an analysis
rebuilt from an export uses for its ``pred_*`` columns. Prints the table and two summary
lines (memory, step time); exit status 2 on bad arguments, a file without those columns or
a run whose point cannot be composed (one line naming the column or the point).
"""

import sys

import pandas as pd

GIB = 2**30
COLUMNS = ("model", "strategy", "train.activation_checkpointing", "local_batch_size",
           "precision", "nodes", "peak_mem_gib", "peak_mem_reserved_gib", "step_time_s",
           "status")


def main(argv: list[str]) -> int:
    """Print the table of measured and predicted memory and step time; 2 on bad arguments."""
    cluster = "cuda8"
    if len(argv) == 3 and argv[1] == "--cluster":
        argv, cluster = argv[:1], argv[2]
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        usage = next(ln.strip() for ln in __doc__.splitlines() if "tools/plan_check.py" in ln)
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    runs = pd.read_csv(argv[0], low_memory=False)
    missing = [c for c in COLUMNS if c not in runs]
    if "ranks_per_node" not in runs and "world_size" not in runs:
        missing.append("ranks_per_node (or world_size)")
    if missing:
        print(f"{argv[0]}: no column {', '.join(missing)} (an analysis's runs.csv has them)",
              file=sys.stderr)
        return 2
    from vitfsdp.plan import mem_metric, memory_breakdown, recorded_prediction
    from vitfsdp.plan.exported import compose_row, row_device

    rows = []
    for _, r in runs[runs["status"] == "completed"].iterrows():
        try:
            cfg = compose_row(r, cluster)
            p, _ = recorded_prediction(cfg, row_device(r))
        except ValueError as e:
            print(f"{argv[0]}: {e}", file=sys.stderr)
            return 2
        allocated = memory_breakdown(cfg, "gpu")["allocated"] / GIB
        peak, metric = p.peak_mem_gib, mem_metric(p.device, cfg.framework)
        rows.append({"model": r["model"], "framework": cfg.framework, "strategy": r["strategy"],
                     "ckpt": str(cfg.train.activation_checkpointing).lower(),
                     "fused_attn": str(cfg.kernels.fused_attn).lower(),
                     "allocated": r["peak_mem_gib"], "pred_allocated": allocated,
                     "alloc_error": allocated / r["peak_mem_gib"] - 1,
                     "measured": r[metric], "pred_peak": peak,
                     "peak_error": peak / r[metric] - 1,
                     "step_s": r["step_time_s"], "pred_step_s": p.step_time_s,
                     "host_s": p.host_s, "step_error": p.step_time_s / r["step_time_s"] - 1})
    df = pd.DataFrame(rows)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    alloc, peak = df["alloc_error"].abs(), df["peak_error"].abs()
    print(f"{len(df)} runs; allocated: median |error| {alloc.median():.1%}, max {alloc.max():.1%}; "
          f"peak against reserved (JAX: in use): median {peak.median():.1%}, max {peak.max():.1%}, "
          f"{(peak <= 0.15).sum()} of {len(df)} within 15%")
    step = df["step_error"].abs()
    print(f"step time from the {cluster} profile's data sheets and the host term, no probe: "
          f"median |error| {step.median():.1%}, max {step.max():.1%}, "
          f"{(df['step_error'] < 0).sum()} of {len(df)} short")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
