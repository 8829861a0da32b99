"""``python -m vitfsdp.plan``: the predicted table of a sweep, before anything is queued.

    python -m vitfsdp.plan -m model=vit_base,vit_15b cluster=frontier \\
        strategy=DDP,FULL_SHARD,HYBRID_8GPU nodes=1,8 precision=bf16 [--csv FILE] [--json]
    python -m vitfsdp.plan --calibrate SWEEP_DIR [SWEEP_DIR ...]

The overrides are a sweep's: Hydra's parser expands comma lists and ranges into points
(``-m`` is accepted for symmetry with ``vitfsdp.sweep``), each point is composed from
``conf/`` and validated by :func:`vitfsdp.config.to_run_config`. Keys a profile requires for
submitting (``cluster.required``, e.g. the account) are not needed to plan.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from vitfsdp.plan import predict

#: Table columns, in order: (Prediction field or point key, header).
COLUMNS = (
    ("point", "point"), ("params_gib", "params"), ("grads_gib", "grads"),
    ("optimizer_gib", "optim"), ("buffers_gib", "buffers"), ("activations_gib", "acts"),
    ("activations_other_gib", "acts(ckpt toggled)"), ("overhead_gib", "overhead"),
    ("peak_mem_gib", "peak GiB"), ("device_memory_gib", "device GiB"), ("fits", "fits"),
    ("compute_s", "compute s"), ("all_gather_gib", "AG GiB"), ("reduce_scatter_gib", "RS GiB"),
    ("all_reduce_gib", "AR GiB"), ("comm_s", "comm s"), ("exposed_comm_s", "exposed s"),
    ("step_time_s", "step s"), ("ips", "ips"),
)  # fmt: skip


def expand(overrides: list[str]) -> list[list[str]]:
    """The points of a sweep's overrides, as Hydra's basic sweeper expands them (comma
    lists, ``range(...)``, ``choice(...)``), in its order.

    Raises:
        ValueError: an override does not parse.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as e:
        raise ValueError(str(e).splitlines()[0]) from None
    return [point for batch in BasicSweeper.split_arguments(parsed, None) for point in batch]


def compose_points(overrides: list[str]) -> list[tuple[list[str], object]]:
    """(point overrides, validated RunConfig) for every point of ``overrides``.

    Raises:
        ValueError: a point does not compose or validate; the message names the point.
    """
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    from vitfsdp.config import CONF_DIR, check_group_choices, register_configs, to_run_config

    check_group_choices(overrides)
    register_configs()
    points = []
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        for point in expand(overrides):
            try:
                cfg = compose("config", point)
                with open_dict(cfg):
                    cfg.cluster.required = []  # planning submits nothing: no account needed
                points.append((point, to_run_config(cfg)))
            except (ValueError, OmegaConfBaseException) as e:
                raise ValueError(f"point {' '.join(point)}: {str(e).splitlines()[0]}") from None
    return points


def plan_table(overrides: list[str]) -> pd.DataFrame:
    """One row per point: its overrides, model, strategy, nodes and every Prediction field."""
    rows = []
    points = compose_points(overrides)
    common = set.intersection(*(set(point) for point, _ in points)) if len(points) > 1 else set()
    for point, cfg in points:
        p = predict(cfg)
        label = " ".join(o for o in point if o not in common) or " ".join(point) or "(defaults)"
        rows.append({"point": label, "overrides": " ".join(point), "model": cfg.model.name,
                     "strategy": cfg.strategy.name, "nodes": cfg.nodes,
                     "world_size": cfg.world_size, **p.as_dict()})
    return pd.DataFrame(rows)


def format_plan(df: pd.DataFrame) -> str:
    """The terminal table (GiB and seconds to 2-3 digits) and a line on its assumptions."""
    shown = df[[c for c, _ in COLUMNS]].rename(columns=dict(COLUMNS))
    shown["fits"] = df["fits"].map({True: "yes", False: "NO"}).fillna("unknown")
    text = shown.to_string(index=False, float_format=lambda x: f"{x:.3g}", na_rep="-")
    unknown = []
    if df["step_time_s"].isna().any():
        unknown.append("step time needs cluster.peak_tflops")
    if df["comm_s"].isna().any():
        unknown.append("communication needs cluster.intra_node_gbps/inter_node_gbps")
    notes = ("memory per rank in GiB (peak = allocated + overhead); communication per rank and "
             "step, FSDP/DDP overlap it with compute (docs/plan.md)")
    return text + "\n" + notes + (f"; unknown: {', '.join(unknown)}" if unknown else "")


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit status (2 for a refused point or option)."""
    parser = argparse.ArgumentParser(prog="python -m vitfsdp.plan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="sweep overrides (key=a,b ...)")
    parser.add_argument("-m", "--multirun", action="store_true", help="accepted, as in sweep")
    parser.add_argument("--csv", type=Path, help="also write the table to this CSV file")
    parser.add_argument("--json", action="store_true", help="print JSON records, not a table")
    parser.add_argument("--calibrate", nargs="+", type=Path, metavar="SWEEP_DIR",
                        help="predicted vs measured for every completed run; fit efficiency")
    args = parser.parse_args(argv)
    try:
        if args.calibrate:
            from vitfsdp.plan.calibrate import calibrate

            print(calibrate(args.calibrate, args.overrides))
            return 0
        df = plan_table(args.overrides)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.csv:
        df.to_csv(args.csv, index=False)
    print(json.dumps(df.to_dict("records"), indent=1) if args.json else format_plan(df))
    return 0


if __name__ == "__main__":
    sys.exit(main())
