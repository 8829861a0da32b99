"""One world size of the probe: ``python -m vitfsdp.probe.worker SPEC OUT`` under torchrun
or srun (one process per GPU, as a training run). Every rank measures what SPEC lists
(:mod:`vitfsdp.probe.measure`), all at once; then, where SPEC lists ``framework`` runs,
trains each (the smallest model, per strategy) through the real training loop
(:func:`vitfsdp.torch_train.run`) in the same processes and process group, so that the
framework probe costs its steps, not a launch of its own. Rank 0 writes OUT, one ``worlds``
entry of probe.json (:mod:`vitfsdp.plan.probed`) with the runs' measured steps under
``framework_runs``. Progress goes to the log, one line per item.
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import time
from pathlib import Path

from vitfsdp import startup_gc

with startup_gc.paused():  # the collector off for torch's import (vitfsdp.startup_gc)
    import torch
    import torch.distributed as dist

from vitfsdp import distributed
from vitfsdp.core import nodecpu
from vitfsdp.core.atomic import write_atomic
from vitfsdp.core.throughput import NOISY_SPREAD
from vitfsdp.probe import measure

log = logging.getLogger("vitfsdp.probe")

#: Smallest message of a collective curve, bytes, and the ratio between sizes.
MIN_SIZE, SIZE_RATIO = 4096, 4


def curve_sizes(max_bytes: int) -> list[int]:
    """Message sizes of one collective's curve: from :data:`MIN_SIZE` by :data:`SIZE_RATIO`
    up to ``max_bytes``, which is always the last."""
    sizes, s = [], MIN_SIZE
    while s < max_bytes:
        sizes.append(s)
        s *= SIZE_RATIO
    return [*sizes, max(int(max_bytes), MIN_SIZE)]


def _gemms(spec: dict, device, out: dict) -> None:
    for m, n, k, dtype in spec["gemms"]:
        t = measure.gemm_time(m, n, k, dtype, device, device)
        out["gemm"].append({"m": m, "n": n, "k": k, "dtype": dtype, "time_s": t,
                            "tflops": 2 * m * n * k / t / 1e12})


def _ops(spec: dict, device, out: dict) -> None:
    for op, shape, dtype in spec["ops"]:
        f, b = measure.op_times(op, tuple(shape), dtype, device, device)
        out["ops"].append({"op": op, "shape": list(shape), "dtype": dtype,
                           "forward_s": f, "backward_s": b})


def _collectives(spec: dict, device, rank: int, out: dict) -> None:
    world, rpn = spec["world_size"], spec["ranks_per_node"]
    groups_made: dict[tuple[int, int], object] = {}
    for op, ranks, nodes, dtype, max_bytes in spec["collectives"]:
        layout = measure.layout_groups(world, rpn, ranks, nodes)
        if layout is None:
            log.warning("probe: no layout of %d ranks on %d node(s) in a world of %d",
                        ranks, nodes, world)
            continue
        if (ranks, nodes) not in groups_made:  # every rank creates every group, in order
            made = [dist.new_group(g) for g in layout]
            groups_made[(ranks, nodes)] = next(grp for g, grp in zip(layout, made, strict=True)
                                               if rank in g)
        group = groups_made[(ranks, nodes)]
        points = []
        for size in curve_sizes(max_bytes):
            t = measure.collective_time(op, size, dtype, group, ranks, device)
            points.append({"size_bytes": size, "time_s": t,
                           "busbw_gbps": measure.bus_gbps(op, size, t, ranks)})
        out["collectives"].append({
            "op": op, "ranks": ranks, "nodes": nodes, "dtype": dtype, "groups": len(layout),
            "points": points, "latency_us": points[0]["time_s"] * 1e6,
            "busbw_gbps": points[-1]["busbw_gbps"]})
        log.info("probe: %s over %d rank(s) on %d node(s): %.0f us at %d B, %.2f GB/s bus "
                 "at %d B", op, ranks, nodes, points[0]["time_s"] * 1e6, points[0]["size_bytes"],
                 points[-1]["busbw_gbps"], points[-1]["size_bytes"])


def _framework_runs(spec: dict, env, device, work_dir: Path) -> list[dict]:
    """Train each of ``spec["framework"]`` (``{"strategy", "engine", "overrides"}``: the
    framework probe's model at this world size, :func:`vitfsdp.probe.__main__.framework_overrides`)
    with :func:`vitfsdp.torch_train.run` in this process group, its records in
    ``work_dir/framework_w<world>_<strategy>_<engine>/``; per run ``{"strategy", "engine",
    "status", "step_s", "reason"}`` (``step_s``: the summary's measured seconds per step).
    A failed run aborts the process group (:class:`vitfsdp.failures.RunFailed`): it is
    recorded and the runs after it are recorded ``failed`` as not run."""
    with startup_gc.paused():  # the collector off for the imports (vitfsdp.startup_gc)
        # the trainer (torch and timm) only where the framework is probed
        from vitfsdp import failures, torch_train
    from vitfsdp.plan.__main__ import compose_points  # Hydra: where the framework is probed

    out, broken = [], None
    for item in spec["framework"]:
        row = {"strategy": item["strategy"], "engine": item["engine"]}
        if broken:
            out.append(row | {"status": "failed", "step_s": None,
                              "reason": f"not run: an earlier framework run failed ({broken})"})
            continue
        (_, cfg), = compose_points(item["overrides"])
        run_dir = work_dir / f"framework_w{env.world_size}_{item['strategy']}_{item['engine']}"
        try:
            summary = torch_train.run(cfg, env, device, run_dir)
        except failures.RunFailed as e:
            broken = str(e).splitlines()[0] if str(e) else type(e).__name__
            out.append(row | {"status": "failed", "step_s": None, "reason": broken})
            continue
        out.append(row | {"status": summary.get("status", "completed"),
                          "step_s": summary.get("step_time_s"), "reason": summary.get("reason")})
        log.info("probe: framework run %s/%s: %s s a step", item["strategy"], item["engine"],
                 summary.get("step_time_s"))
    return out


def run(spec: dict, work_dir: Path | None = None) -> dict:
    """Measure ``spec`` on this rank (every rank calls it); the ``worlds`` entry. The
    framework runs of ``spec`` (if any) keep their records under ``work_dir`` (default: a
    ``.probe-framework`` directory here)."""
    env = distributed.discover()
    device = distributed.pick_device(spec.get("device", "auto"), env.local_rank,
                                     spec.get("gpu_expected"))
    start = time.perf_counter()
    out: dict = {"world_size": env.world_size, "nodes": spec["nodes"],
                 "ranks_per_node": spec["ranks_per_node"], "status": "completed",
                 "reason": None, "device": {"type": device.type, "name": _device_name(device)},
                 "backend": distributed.backend_for(device), "threads": torch.get_num_threads(),
                 "gemm": [], "ops": [], "collectives": []}
    with distributed.process_group(env, device, spec.get("timeout_s", 600.0)):
        nodecpu.join()  # measure within the node's CPU quota, as the ranks train
        _gemms(spec, device, out)
        log.info("probe: %d GEMM shape(s) measured", len(out["gemm"]))
        _ops(spec, device, out)
        opt = spec["optimizer"]
        t = measure.optimizer_time(opt["num_params"], opt["impl"], device, device)
        out["optimizer"] = {"impl": opt["impl"], "num_params": opt["num_params"], "time_s": t,
                            "s_per_param": t / opt["num_params"]}
        out["memory"] = measure.stream_gbps(spec.get("stream_elements", 1 << 24), device, device)
        if env.world_size > 1:
            _collectives(spec, device, env.rank, out)
            o = spec["overlap"]
            out["overlap"] = measure.overlap_fraction(o["m"], o["n"], o["k"], o["dtype"],
                                                      o["size_bytes"], None, env.world_size,
                                                      device)
        out["spread"] = measure.spread_summary(NOISY_SPREAD)
        out["wall_s"] = time.perf_counter() - start
        if spec.get("framework"):
            out["framework_runs"] = _framework_runs(spec, env, device,
                                                    work_dir or Path(".probe-framework"))
    return out


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def spec_of_request(request: dict) -> dict:
    """The spec of a pack's probe request (``{"cluster", "nodes", "points": [overrides]}``,
    :func:`vitfsdp.launch.pack.probe_request`): the points composed as the sweep composed
    them, their shapes at the pack's world size (:func:`vitfsdp.probe.world_specs`).

    Raises:
        ValueError: a point does not compose, or the points span several world sizes.
    """
    # Hydra composes the points only where a pack asks for it
    from vitfsdp.plan.__main__ import compose_points
    from vitfsdp.probe import world_specs

    cfgs = [cfg for point in request["points"] for _, cfg in compose_points(point)]
    device = "cuda" if any(c.expected_device_type() == "cuda" for c in cfgs) else "cpu"
    specs = world_specs(cfgs, device)
    if len(specs) != 1:
        raise ValueError(f"a pack's probe request spans world sizes "
                         f"{[s['world_size'] for s in specs]}; a pack has one")
    return specs[0] | {"cluster": request.get("cluster", "?")}


def main(argv: list[str] | None = None) -> int:
    """``SPEC OUT``: measure, rank 0 writes OUT (JSON). ``SPEC --merge PROBE_JSON`` (the
    probe step of a pack, ``cluster.probe=allocation``): rank 0 adds this world size's entry
    to PROBE_JSON instead (:func:`vitfsdp.probe.__main__.merge_world`). Returns the exit
    status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    spec_path, out_path = [a for a in (argv if argv is not None else sys.argv[1:])
                           if a != "--merge"][:2]
    merge = "--merge" in (argv if argv is not None else sys.argv[1:])
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    if "points" in spec:  # a pack's request (vitfsdp.launch.pack.probe_request)
        spec = spec_of_request(spec)
    result = run(spec, Path(spec["framework_dir"]) if spec.get("framework_dir") else None)
    if distributed.discover().rank == 0:
        if merge:
            # the probe file's writer, where a pack's step merges into it
            from vitfsdp.probe.__main__ import merge_world

            merge_world(Path(out_path), result, spec.get("cluster", "?"),
                        spec["ranks_per_node"])
            return 0
        write_atomic(out_path, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
