"""``python -m vitfsdp.probe``: the site measurement the plan predicts from (see
:mod:`vitfsdp.probe`).

    python -m vitfsdp.probe -m model=vit_base strategy=DDP,FULL_SHARD nodes=1,2,4 \\
        --out SWEEP_DIR_OR_FILE.json

Writes ``probe.json`` into ``--out`` (a directory; or the file named, e.g. a site file that
``cluster.probe=`` names), with a line per world size: here one world size after another;
on a Slurm profile every world size's job submitted at once (:func:`probe_on_slurm`), with a
line per change of a job's state. A probe
never overwrites another: each is kept as ``probes/<name>-<UTC time>.json`` beside it, with
the host's load average at its start and end; where ``probe.json`` (or the file named)
already exists it stays what the plan reads, so the predictions recorded from it do not
change, unless ``--replace`` makes the new probe the one read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vitfsdp.core.atomic import write_atomic
from vitfsdp.core.hangup import exit_on_hangup
from vitfsdp.core.locks import locked
from vitfsdp.launch.local import paste_override
from vitfsdp.plan import predict
from vitfsdp.plan.__main__ import compose_points
from vitfsdp.plan.memory import fsdp_units, model_sizes
from vitfsdp.plan.probed import PROBE_FILE, SCHEMA, Probe, ProbeWorld
from vitfsdp.probe import world_specs
from vitfsdp.progress import format_eta
from vitfsdp.records import read_json

log = logging.getLogger("vitfsdp.probe")

#: Lines of a failed world size's log kept as its reason.
TAIL_LINES = 8


def probe_world(spec: dict, work_dir: Path, timeout_s: float, network=None) -> dict:
    """Run one world size's measurement here and return its ``worlds`` entry: as
    ``torchrun`` processes (a simulated node is ``ranks_per_node`` of them, as the local
    launcher runs points; with ``network``, ``cluster.network``, set to emulate and root,
    each node's ranks in their own network namespace on the shaped link, as the sweep's
    points run: :func:`run_local`), stopped after ``timeout_s`` seconds. A failed or
    timed-out run gives ``status: failed`` and the log's tail as the reason. (On a Slurm
    profile the world sizes are jobs: :func:`probe_on_slurm`.)"""
    spec_path, out_path = write_spec(spec, work_dir)
    log_path = work_dir / f"probe_w{spec['world_size']}.log"
    start = time.perf_counter()
    # the launchers where a world is launched: `python -m vitfsdp.probe --help` starts
    # without them
    from vitfsdp.launch.local import tail

    worker = ["-m", "vitfsdp.probe.worker", str(spec_path), str(out_path)]
    try:
        code, net_record = run_local(worker, spec["nodes"], spec["ranks_per_node"], log_path,
                                     timeout_s, network)
    except RuntimeError as e:  # the emulated network could not be made: recorded
        code, net_record, why = 1, None, f"emulated network: {e}"
    else:
        why = ("timed out" if code is None else f"exit status {code}") + ": " + " | ".join(
            tail(log_path, TAIL_LINES).splitlines())
    entry = world_entry(spec, code == 0, why, time.perf_counter() - start, work_dir)
    return entry | ({"network": net_record} if net_record is not None else {})


def write_spec(spec: dict, work_dir: Path) -> tuple[Path, Path]:
    """Write the worker's ``spec`` into ``work_dir``: (its path, the path of the worker's
    output)."""
    world = spec["world_size"]
    spec_path = work_dir / f"probe_spec_w{world}.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    return spec_path, work_dir / f"probe_w{world}.json"


def world_entry(spec: dict, ok: bool, why: str, wall_s: float, work_dir: Path) -> dict:
    """The ``worlds`` entry of ``spec``'s world size: the worker's output where the run
    succeeded (``ok``) and wrote it (its files then removed), else ``status: failed`` with
    ``why``."""
    spec_path, out_path = (work_dir / f"probe_{k}w{spec['world_size']}.json"
                           for k in ("spec_", ""))
    if ok and out_path.exists():
        entry = json.loads(out_path.read_text(encoding="utf-8"))
        out_path.unlink()
        spec_path.unlink()
        return entry
    return {"world_size": spec["world_size"], "nodes": spec["nodes"],
            "ranks_per_node": spec["ranks_per_node"], "status": "failed", "wall_s": wall_s,
            "reason": why}


def run_local(worker: list[str], nodes: int, ranks_per_node: int, log_path: Path,
              timeout_s: float, network=None) -> tuple[int | None, dict | None]:
    """Run ``python <worker...>`` as ``nodes`` x ``ranks_per_node`` torchrun processes here
    and wait for them: at most ``timeout_s`` seconds, then every process is stopped (SIGTERM,
    SIGKILL 30 s later: :func:`vitfsdp.launch.local.run_until_done`).

    Where ``network`` (``cluster.network``, :class:`vitfsdp.launch.netns.NetworkConfig`)
    asks to emulate and this host can (root), each node is a torchrun of its own in its own
    network namespace with a static rendezvous on node 0's address, exactly as
    :func:`vitfsdp.launch.local.run_point` runs a point; else one ``torchrun --standalone``
    of every rank on this host's loopback.

    Returns:
        (exit status, the network's record for probe.json): the status is the first non-zero
        one of the nodes' torchruns, 0 when all succeeded, ``None`` when timed out; the
        record (:func:`vitfsdp.launch.netns.record`) is ``None`` where no emulation was
        asked.

    Raises:
        RuntimeError: the emulated network could not be made (an ``ip``/``tc`` failure).
    """
    # the launchers where a world is launched (see probe_world)
    from vitfsdp.launch import netns
    from vitfsdp.launch.agent import AGENT  # torchrun's agent, imports paused
    from vitfsdp.launch.local import static_rendezvous_args

    env = dict(os.environ)
    run = [sys.executable, *AGENT]
    standalone = [[*run, "--standalone", f"--nproc_per_node={nodes * ranks_per_node}", *worker]]
    if network is None or not network.emulate:
        return _run_logged(standalone, [env], log_path, timeout_s), None
    reason = netns.unavailable_reason()
    if reason:
        log.warning("cluster.network.emulate=true but %s: the network is not emulated; the "
                    "probe's nodes share this host's loopback", reason)
        return _run_logged(standalone, [env], log_path, timeout_s), netns.record(
            network, nodes, False, reason)
    with netns.EmulatedNetwork(nodes, network.inter_node_gbit_s,
                               network.node_cpus) as net:
        cmds = [net.wrap(k, [*run, *static_rendezvous_args(nodes, k, net.addresses[0]),
                             f"--nproc_per_node={ranks_per_node}", *worker])
                for k in range(nodes)]
        code = _run_logged(cmds, [{**env, **net.env(k)} for k in range(nodes)], log_path,
                           timeout_s)
    return code, netns.record(network, nodes, True, None, net.node_cpus_reason)


def _run_logged(cmds: list[list[str]], envs: list[dict], log_path: Path,
                timeout_s: float) -> int | None:
    """:func:`vitfsdp.launch.local.run_until_done` of ``cmds``, their output to ``log_path``,
    polled every 0.5 s, stopped after ``timeout_s`` seconds: the exit status of the first
    process that failed, 0, or ``None`` on the timeout."""
    # the launchers where a world is launched (see probe_world)
    from vitfsdp.launch.local import run_until_done

    with open(log_path, "w", encoding="utf-8") as out:
        return run_until_done(cmds, envs, out, poll_s=0.5, timeout_s=timeout_s)


#: The framework probe: the sweep's strategy on the smallest model, through the real training
#: loop (``vitfsdp.train``), whose step is mostly what the loop and the wrapper add.
FRAMEWORK_MODEL = ["model=vit_tiny", "model.img_size=16", "train.local_batch_size=1",
                   "train.steps=12", "train.warmup_steps=4", "train.log_every=8",
                   "data=synthetic", "train.activation_checkpointing=false",
                   "train.memory_limit_gib=0", "train.checkpoint_every=0"]


def framework_overrides(point: list[str]) -> list[str]:
    """``point``'s overrides with the model, data and loop replaced by
    :data:`FRAMEWORK_MODEL` (its strategy, engine, precision, kernels and world kept)."""
    replaced = {o.split("=", 1)[0].lstrip("+~") for o in FRAMEWORK_MODEL}
    kept = [o for o in point if o.split("=", 1)[0].lstrip("+~") not in replaced
            and not o.startswith(("hydra.", "repeat="))]
    return [*kept, *FRAMEWORK_MODEL]


def framework_runs(points: list[tuple[list[str], object]]) -> list[dict]:
    """The framework runs of one world size's ``points`` that its probe worker trains in its
    own processes (:func:`vitfsdp.probe.worker._framework_runs`): one per strategy and FSDP
    engine of the PyTorch points, ``{"strategy", "engine", "overrides"}`` (the overrides of
    :func:`framework_overrides`). JAX points are left to :func:`probe_framework`, which
    launches theirs."""
    out, seen = [], set()
    for point, cfg in points:
        key = (cfg.strategy.name, cfg.engine)
        if cfg.framework != "torch" or key in seen:
            continue
        seen.add(key)
        out.append({"strategy": key[0], "engine": key[1],
                    "overrides": framework_overrides(point)})
    return out


def framework_points(points: list[tuple[list[str], object]]) -> list[tuple[tuple, list, object]]:
    """The framework runs of one world size's ``points``: one per framework, strategy and
    FSDP engine (JAX's loop is not torch's), ``(key, overrides, cfg)`` with ``key``
    ``(framework, strategy, engine)`` and the overrides of :func:`framework_overrides`."""
    out, seen = [], set()
    for point, cfg in points:
        key = (cfg.framework, cfg.strategy.name, cfg.engine)
        if key not in seen:
            seen.add(key)
            out.append((key, framework_overrides(point), cfg))
    return out


def probe_framework(points: list[tuple[list[str], object]], world: dict, work_dir: Path,
                    runs: dict | None = None) -> list:  # fmt: skip
    """Per strategy of ``points`` (one world size): a real training run of the smallest model
    (:data:`FRAMEWORK_MODEL`) at this world size, its measured step against the step this
    world's measurements predict for it; the difference is the loop's and the wrapper's own
    time, per FSDP unit (blocks + root) for FSDP, per step for DDP (docs/plan.md, "The
    probe"). PyTorch runs were trained by the world's probe worker in its own processes
    (``world["framework_runs"]``, :func:`framework_runs`); ``runs`` (``{key: {"status",
    "step_s", "reason"}}``, keys of :func:`framework_points`) are runs already done (a Slurm
    probe's JAX jobs: :func:`probe_on_slurm`); any other (JAX) is launched here as a local
    point is (:func:`_launch_framework`).

    The entries go into ``world["framework"]`` as they are made, the runs already measured
    first, so a signal while a run is launched keeps them (:func:`record_interrupted`
    records the rest ``interrupted``); the list is also returned."""
    measured = {("torch", r["strategy"], r["engine"]): r  # framework_runs: PyTorch's only
                for r in world.pop("framework_runs", None) or []} | (runs or {})
    probe = Probe("(this probe)", world["device"]["type"],
                  {world["world_size"]: ProbeWorld.from_json(world)})
    out = world["framework"] = []
    todo = sorted(framework_points(points), key=lambda t: t[0] not in measured)
    for key, overrides, cfg in todo:
        run = measured.get(key) or _launch_framework(cfg, overrides, work_dir)
        out.append(framework_entry(key, overrides, run, probe))
    return out


def framework_entry(key: tuple, overrides: list[str], run: dict, probe: Probe) -> dict:
    """``world["framework"]``'s entry of the run ``run`` (``{"status", "step_s", "reason"}``)
    of ``key`` (:func:`framework_points`): its loop+wrapper time against ``probe``'s
    prediction where it completed; else its status (``failed``, or ``interrupted`` by a
    signal) and reason."""
    framework, strategy, engine = key
    head = {"framework": framework, "strategy": strategy, "engine": engine}
    if run.get("status") != "completed" or not run.get("step_s"):
        status = "interrupted" if run.get("status") == "interrupted" else "failed"
        return head | {"status": status, "reason": run.get("reason") or "no step measured"}
    (_, tiny), = compose_points(overrides)
    predicted = predict(tiny, probe=probe,
                        device=probe.device_type.replace("cuda", "gpu")).step_time_s
    units = fsdp_units(model_sizes(tiny.model, tiny.num_classes),
                       tiny.strategy.blocks_per_unit)[0] + 1
    is_fsdp = tiny.strategy.is_fsdp
    return head | {"status": "completed", "is_fsdp": is_fsdp, "step_s": run["step_s"],
                   "predicted_s": predicted, "units": units,
                   "overhead_s": max(0.0, run["step_s"] - predicted) / (units if is_fsdp else 1),
                   "per": "unit" if is_fsdp else "step"}


def framework_dir(cfg, work_dir: Path) -> Path:
    """Where the framework run of ``cfg`` (a framework model's point) keeps its records."""
    jax = "_jax" if cfg.framework == "jax" else ""
    return work_dir / f"framework_w{cfg.world_size}_{cfg.strategy.name}_{cfg.engine}{jax}"


def _launch_framework(cfg, overrides: list[str], work_dir: Path) -> dict:
    """Run the framework model ``overrides`` at ``cfg``'s world size here, as a local point
    of the sweep is run (torchrun), and wait: ``{"status", "step_s", "reason"}``."""
    # the launchers where a run is launched: `python -m vitfsdp.probe --help` starts without
    from vitfsdp.launch.local import run_point

    run_dir = framework_dir(cfg, work_dir)
    code = run_point(overrides, run_dir, cfg.world_size, log_path=run_dir.with_suffix(".log"),
                     nodes=cfg.nodes, network=cfg.cluster.network)
    return framework_result(code, run_dir)


def framework_result(code: int, run_dir: Path) -> dict:
    """``{"status", "step_s", "reason"}`` of the framework run in ``run_dir`` that exited
    with ``code``: its summary's step time, or why there is none (the log's tail)."""
    from vitfsdp.launch.local import tail  # the launchers where a run was launched

    summary = read_json(run_dir / "summary.json") or {}
    if code != 0 or not summary.get("step_time_s"):
        why = tail(run_dir.with_suffix(".log"), 3).replace("\n", " | ")
        return {"status": "failed", "reason": summary.get("reason") or f"exit {code}: {why}"}
    return {"status": "completed", "step_s": summary["step_time_s"]}


#: Where every probe is kept, beside the file the plan reads.
HISTORY_DIR = "probes"


def history_path(path: Path, when: datetime.datetime) -> Path:
    """The file a probe started at ``when`` is kept as: ``probes/<stem>-<UTC time>.json``
    beside ``path``."""
    stamp = when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    return path.parent / HISTORY_DIR / f"{path.stem}-{stamp}.json"


def write_probe(path: Path, worlds: list[dict], cluster: str, gpus_per_node: int,
                load: dict | None = None) -> dict:
    """Write a probe file (atomically) from the measured ``worlds`` entries; ``load``: the
    host's load average (1, 5, 15 min) at the probe's ``start`` and ``end``."""
    import torch  # for its version only: the CLI starts without it

    done = [w for w in worlds if w.get("status") == "completed"]
    failed = [w for w in worlds if w.get("status") != "completed"]
    device = (done[0].get("device") if done else None) or {"type": "cpu", "name": None}
    data = {"schema": SCHEMA, "status": "completed" if done else "failed",
            "reason": "; ".join(f"world {w['world_size']}: {w.get('reason')}" for w in failed)
            or None,
            "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "host": platform.node(), "backend": done[0].get("backend") if done else None,
            "device": device, "versions": {"torch": torch.__version__,
                                           "python": platform.python_version()},
            "cluster": cluster, "gpus_per_node": gpus_per_node, "load": load,
            "worlds": worlds}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1))
    return data


def merge_world(path: Path, entry: dict, cluster: str, gpus_per_node: int) -> dict:
    """Add one world size's ``entry`` to the probe file ``path`` (created if missing; an
    earlier entry of the same world size is replaced) and rewrite it atomically, under a
    lock file beside it, so that packs of several node counts running at once each add
    theirs (``cluster.probe=allocation``, :mod:`vitfsdp.launch.pack`). The lock is a soft
    one (:func:`vitfsdp.core.locks.locked` with ``shared_fs``: a file created exclusively),
    which holds on the shared file systems of clusters where ``flock`` may not. Returns the
    file's data.

    Raises:
        TimeoutError: another pack's step held the lock for 5 minutes (or a killed one left
            it behind: remove ``<path>.lock``).
    """
    with locked(str(path) + ".lock", shared_fs=True, timeout=300):
        worlds = []
        if path.exists():
            try:
                worlds = json.loads(path.read_text(encoding="utf-8")).get("worlds", [])
            except (OSError, ValueError):
                log.warning("probe: %s unreadable; rewritten with this world size only", path)
        worlds = sorted([w for w in worlds if w.get("world_size") != entry["world_size"]]
                        + [entry], key=lambda w: w["world_size"])
        return write_probe(path, worlds, cluster, gpus_per_node)


def summary_line(w: dict) -> str:
    """One line of a world size's figures for the terminal."""
    if w.get("status") != "completed":
        return f"world {w['world_size']}: FAILED ({w.get('reason')})"
    best = max((g["tflops"] for g in w["gemm"]), default=0.0)
    coll = ", ".join(f"{c['op']}/{c['ranks']}r{c['nodes']}n {c['busbw_gbps']:.2f} GB/s "
                     f"{c['latency_us']:.0f} us" for c in w.get("collectives", []))
    ov = (w.get("overlap") or {}).get("fraction")
    return (f"world {w['world_size']} ({w['nodes']} node(s) x {w['ranks_per_node']}): "
            f"GEMM up to {best * 1e3:.1f} GFLOP/s per rank, triad "
            f"{w['memory']['triad_gbps']:.1f} GB/s, AdamW "
            f"{w['optimizer']['s_per_param'] * 1e9:.2f} ns/param"
            + (f", overlap {ov:.2f}" if ov is not None else "")
            + (f"; {coll}" if coll else "") + f" [{w.get('wall_s', 0):.0f} s]"
            + spread_text(w.get("spread"))
            + "".join(f"; {f['strategy']}{' jax' if f.get('framework') == 'jax' else ''} "
                      f"loop+wrapper {f['overhead_s'] * 1e3:.1f} ms/{f['per']}"
                      for f in w.get("framework", []) if f.get("status") == "completed"))


def spread_text(spread: dict | None) -> str:
    """The world's repeat spread for its summary line (``""`` for a probe older than
    repeats): ``; repeats agree within 3% (median item; worst 12%)``, or, above the bound,
    ``; NOISY: ...`` saying that its figures and the plan's predictions from them hold to
    about that much."""
    if not spread or spread.get("median") is None:
        return ""
    median, worst, bound = spread["median"], spread["max"], spread["bound"]
    if not spread["noisy"]:
        return (f"; {spread['repeats']} repeats agree within {median:.0%} (median item; "
                f"worst {worst:.0%})")
    return (f"; NOISY: {spread['repeats']} repeats spread {median:.0%} (median item; worst "
            f"{worst:.0%}) > {bound:.0%}: the machine moved under the probe, its figures and "
            "the plan's predictions from them hold to about that much; probe again when it is "
            "quiet")


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit status (0 when at least one world size was measured, 1 when
    every one failed, 2 for a refused point or option).

    Raises:
        SystemExit: 128 + the signal's number (130: Ctrl-C) on a SIGHUP, SIGTERM or Ctrl-C,
            after every Slurm job still queued or running was cancelled (or a local world's
            processes stopped) and the kept probe written: the world sizes and framework
            runs measured, the rest recorded with the signal (:func:`probe_on_slurm`,
            :func:`record_interrupted`); 2 from argparse for a refused option (``--timeout``
            or ``--queue-timeout`` not finite and > 0).
    """
    parser = argparse.ArgumentParser(prog="python -m vitfsdp.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="sweep overrides (key=a,b ...)")
    parser.add_argument("-m", "--multirun", action="store_true", help="accepted, as in sweep")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for probe.json, or a .json file "
                             "(default runs/probe/<time>)")
    parser.add_argument("--timeout", type=timeout_seconds, default=1800.0,
                        help="seconds one world size may take before it is stopped and "
                             "recorded failed (default 1800; finite, > 0); on a Slurm profile "
                             "each job (the world size's, and each JAX point's framework run) "
                             "counted from its start (sacct's Start), not its submission: the "
                             "queue wait is not counted (after Slurm requeues a job, from "
                             "its restart; a job neither sacct nor squeue knows, from its "
                             "submission); the job is then cancelled and the reason says how "
                             "long it pended and ran")
    parser.add_argument("--queue-timeout", type=queue_timeout_seconds, default=None,
                        metavar="SECONDS",
                        help="Slurm profiles: cancel a job still waiting in the queue this "
                             "many seconds after its submission (or its requeue by Slurm) "
                             "and record it failed, the "
                             "reason naming the job, its state and the wait (finite, > 0; "
                             "default: no bound, the wait shown every few minutes)")
    parser.add_argument("--replace", action="store_true",
                        help="make this probe the one the plan reads where probe.json (or the "
                             "file named) exists; without it the earlier one stays and this "
                             "one is only kept under probes/")
    args = parser.parse_args(argv)
    # SIGTERM/SIGHUP: the Slurm jobs still queued or running are cancelled
    # (slurm.run_jobs), a local world's processes stopped, the world sizes recorded; a
    # second one is ignored meanwhile
    exit_on_hangup(once=True)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    try:
        points = compose_points(args.overrides)
        cfgs = [cfg for _, cfg in points]
        tiny = [cfg for p in points for _, cfg in compose_points(framework_overrides(p[0]))]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    slurm = {cfg.world_size: cfg for cfg in cfgs if cfg.cluster.launcher == "slurm"}
    out = args.out or Path("runs/probe") / datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    path = out if out.suffix == ".json" else out / PROBE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = history_path(path, datetime.datetime.now(datetime.timezone.utc))
    load = {"start": list(os.getloadavg()), "end": None}

    def keep(worlds: list[dict]) -> dict:  # the probe so far, kept under probes/
        return write_probe(kept, sorted(worlds, key=lambda w: w["world_size"]),
                           cfgs[0].cluster.name, cfgs[0].cluster.gpus_per_node, load)

    device = "cuda" if any(c.expected_device_type() == "cuda" for c in cfgs) else "cpu"
    specs = world_specs(cfgs, device, extra=tiny)
    for i, spec in enumerate(specs, 1):
        spec["label"] = f"[probe {i}/{len(specs)}]"
    worlds: list[dict] = []
    # the framework runs' records are not the sweep's: kept out of its run directories
    # (under the output's own directory: a Slurm job's nodes must see them)
    try:
        with tempfile.TemporaryDirectory(prefix=".probe-framework-", dir=path.parent) as tmp:
            if slurm:
                print(slurm_wait_line(len(slurm), args.timeout, jax_jobs(points),
                                      max_at_once(slurm.values()), args.queue_timeout),
                      flush=True)
                probe_on_slurm([s for s in specs if s["world_size"] in slurm], points, slurm,
                               (path.parent, Path(tmp)), args.timeout, worlds, keep,
                               args.queue_timeout)
            elif args.queue_timeout is not None:
                log.info("[probe] --queue-timeout applies to Slurm jobs; here (%s) nothing "
                         "queues", cfgs[0].cluster.name)
            probe_here([s for s in specs if s["world_size"] not in slurm], points,
                       (path.parent, Path(tmp)), args.timeout, worlds, keep)
    except SystemExit:  # a signal: what was measured, and why the rest was not, is kept
        _say(f"[probe] probe kept as {kept}")
        raise
    load["end"] = list(os.getloadavg())
    data = keep(worlds)
    measured = f"{sum(w.get('status') == 'completed' for w in worlds)}/{len(worlds)}"
    print(publish(kept, path, args.replace, data["status"] == "completed", measured))
    return 0 if data["status"] == "completed" else 1


def _header(spec: dict) -> str:
    """The line that starts a world size: its shape and what it measures."""
    return (f"{spec['label']} world size {spec['world_size']} ({spec['nodes']} node(s) x "
            f"{spec['ranks_per_node']}): {len(spec['gemms'])} GEMM shapes, {len(spec['ops'])} "
            f"ops, {len(spec['collectives'])} collective curves ...")


def probe_here(specs: list[dict], points: list, dirs: tuple[Path, Path], timeout_s: float,
               worlds: list[dict], keep: Callable[[list], dict]) -> None:  # fmt: skip
    """Measure the world sizes of ``specs`` here, one after another (:func:`probe_world`,
    then :func:`probe_framework`), each entry appended to ``worlds`` and the kept probe
    rewritten (``keep(worlds)``) after each. ``dirs``: (the probe file's directory, the
    framework runs' directory).

    Raises:
        SystemExit: 128 + the signal's number on a SIGTERM or SIGHUP, 130 on Ctrl-C: the
            world size's processes stopped, it is recorded (:func:`record_interrupted`) and
            the probe kept first.
    """
    started = time.monotonic()
    for i, spec in enumerate(specs):
        print(_header(spec), flush=True)
        at = [p for p in points if p[1].world_size == spec["world_size"]]
        spec["framework"] = framework_runs(at)  # trained by the worker, after it measured
        spec["framework_dir"] = str(dirs[1].resolve())
        try:
            worlds.append(probe_world(spec, dirs[0], timeout_s,
                                      at[0][1].cluster.network if at else None))
            if worlds[-1].get("status") == "completed":
                probe_framework(at, worlds[-1], dirs[1])
        except (KeyboardInterrupt, SystemExit) as e:  # Ctrl-C, SIGTERM, SIGHUP
            record_interrupted(e, spec, worlds, at)
            keep(worlds)
            _say(f"{spec['label']} {summary_line(worlds[-1])} ({len(specs) - i - 1} world "
                 "size(s) not started)")
            raise SystemExit(getattr(e, "code", 130)) from e
        print(f"{spec['label']} {summary_line(worlds[-1])}", flush=True)
        print(f"{spec['label']} "
              f"{eta_line(time.monotonic() - started, specs[:i + 1], specs[i + 1:])}",
              flush=True)
        keep(worlds)


def probe_on_slurm(specs: list[dict], points: list, slurm: dict, dirs: tuple[Path, Path],
                   timeout_s: float, worlds: list[dict], keep: Callable[[list], dict],
                   queue_timeout_s: float | None = None) -> None:  # fmt: skip
    """Measure the world sizes of ``specs`` as Slurm jobs (``slurm``: a point's RunConfig
    per world size), all submitted at once (:func:`max_at_once` queued at a time), and a
    world size's JAX framework runs as jobs of their own once it is measured
    (:func:`vitfsdp.probe.slurm.run_jobs`, each job at most ``timeout_s`` seconds from its
    start and, where ``queue_timeout_s`` is set, that long in the queue); then the framework
    figures of each world size measured (:func:`probe_framework`). The entries are appended
    to ``worlds``, and the kept probe written (``keep(worlds)``). ``dirs``: (the probe
    file's directory, the framework runs' directory).

    Raises:
        SystemExit: 128 + the signal's number on a SIGTERM or SIGHUP, 130 on Ctrl-C: every
            job still queued or running was cancelled; the world sizes measured are kept,
            with the framework runs done, the rest recorded (a world size ``failed``, a
            framework run ``interrupted``, the reason naming the job) and the probe kept.
    """
    from vitfsdp.probe import slurm as slurm_jobs  # submitit where jobs are submitted

    for spec in specs:
        print(_header(spec), flush=True)
    run = SlurmProbe(points, slurm, dirs)
    stopped = None
    try:
        slurm_jobs.run_jobs(run.world_jobs(specs), timeout_s, max_at_once(slurm.values()),
                            then=run.ended, queue_timeout_s=queue_timeout_s)
    except slurm_jobs.Interrupted as e:
        stopped = e
    for spec in specs:
        worlds.append(run.entry(spec))
        _say(f"{spec['label']} {summary_line(worlds[-1])}")
    keep(worlds)
    if stopped is not None:
        _say(f"[probe] stopped by {slurm_jobs.signal_name(stopped.code)}: every job still "
             "queued or running cancelled")
        raise SystemExit(stopped.code) from stopped


class SlurmProbe:
    """The jobs of a Slurm probe (:func:`probe_on_slurm`) and what became of them: a job per
    world size, then per measured world size one per JAX framework run.

    Args:
        points: the sweep's (overrides, RunConfig) pairs.
        slurm: a point's RunConfig per world size (its Slurm profile and nodes).
        dirs: (the probe file's directory: specs, outputs, job logs; the framework runs'
            directory).
    """

    def __init__(self, points: list, slurm: dict, dirs: tuple[Path, Path]):
        self.points, self.slurm, (self.work_dir, self.fw_dir) = points, slurm, dirs
        self.jobs: dict[int, object] = {}  # world size -> its ProbeJob
        self.entries: dict[int, dict] = {}  # world size -> its worlds entry, once ended
        self.framework: dict[int, dict] = {}  # world size -> {key: (ProbeJob, run dir)}
        self.specs: dict[int, dict] = {}  # id(ProbeJob) -> spec, of world sizes' jobs

    def at(self, world: int) -> list:
        """The points of world size ``world``."""
        return [p for p in self.points if p[1].world_size == world]

    def world_jobs(self, specs: list[dict]) -> list:
        """A :class:`vitfsdp.probe.slurm.ProbeJob` per world size of ``specs``, their specs
        written; a world size whose job cannot be made is recorded failed with why."""
        from vitfsdp.probe.slurm import world_job  # the Slurm launcher where jobs are made

        for spec in specs:
            world = spec["world_size"]
            spec["framework"] = framework_runs(self.at(world))  # the worker trains them
            spec["framework_dir"] = str(self.fw_dir.resolve())
            spec_path, out_path = write_spec(spec, self.work_dir)
            try:
                job = world_job(self.slurm[world], spec_path, out_path,
                                self.work_dir / f"slurm_w{world}")
            except ValueError as e:
                self.entries[world] = world_entry(spec, False, str(e), 0.0, self.work_dir)
                continue
            self.jobs[world], self.specs[id(job)] = job, spec
        return list(self.jobs.values())

    def ended(self, job) -> list:
        """``run_jobs``' ``then``: a world size's job ``job`` ended: its entry, and the jobs
        of its JAX framework runs where it was measured."""
        # the Slurm launcher where jobs are made
        from vitfsdp.probe.slurm import framework_job, world_result

        spec = self.specs.get(id(job))
        if spec is None:  # a framework run's job
            return []
        ok, why = world_result(job)
        world = spec["world_size"]
        entry = self.entries[world] = world_entry(
            spec, ok, why, time.monotonic() - job.submitted_s, self.work_dir)
        if entry.get("status") != "completed":
            return []
        runs = self.framework[world] = {
            key: (framework_job(cfg, overrides, framework_dir(cfg, self.fw_dir)),
                  framework_dir(cfg, self.fw_dir))
            for key, overrides, cfg in framework_points(self.at(world)) if key[0] == "jax"}
        return [j for j, _ in runs.values()]

    def entry(self, spec: dict) -> dict:
        """``spec``'s world size's entry once the jobs are done or stopped: the measured
        one with its framework figures, or failed with its job's reason."""
        world = spec["world_size"]
        entry = self.entries.get(world)
        if entry is None:  # its job did not end by itself: timed out or interrupted
            job = self.jobs[world]
            wall = time.monotonic() - job.submitted_s if job.submitted_s else 0.0
            return world_entry(spec, False, job.outcome or "not run", wall, self.work_dir)
        if entry.get("status") == "completed":
            runs = {key: _job_run(j, run_dir)
                    for key, (j, run_dir) in self.framework.get(world, {}).items()}
            probe_framework(self.at(world), entry, self.fw_dir, runs=runs)
        return entry


def _job_run(job, run_dir: Path) -> dict:
    """``{"status", "step_s", "reason"}`` of a framework run's ``job`` (a
    :class:`vitfsdp.probe.slurm.ProbeJob` that ended, or was stopped) in ``run_dir``."""
    from vitfsdp.launch.local import tail  # the launchers where a run was launched
    from vitfsdp.probe.slurm import world_result  # the Slurm launcher where jobs ran

    if job.outcome:
        return {"status": "interrupted" if job.interrupted else "failed",
                "reason": job.outcome}
    code = 0 if world_result(job)[0] else 1  # the run's own records say why; never waits
    run_dir.with_suffix(".log").write_text(tail(run_dir / "logs" / "task0.log", 20))
    return framework_result(code, run_dir)


def max_at_once(cfgs) -> int | None:
    """The most jobs a Slurm probe queues at once for points ``cfgs``: the smallest
    ``cluster.max_jobs`` or ``cluster.max_queued_jobs`` set (None: no limit)."""
    caps = [cap for cfg in cfgs for cap in (cfg.cluster.max_jobs, cfg.cluster.max_queued_jobs)
            if cap is not None]
    return min(caps) if caps else None


def slurm_wait_line(worlds: int, timeout_s: float, jax: int = 0,
                    at_once: int | None = None,
                    queue_timeout_s: float | None = None) -> str:  # fmt: skip
    """What a probe on a Slurm profile holds: ``worlds`` world sizes' jobs, submitted at once
    (at most ``at_once`` queued at a time, :func:`max_at_once`), and ``jax`` JAX framework
    jobs (:func:`jax_jobs`), a world size's submitted once it is measured, each run for at
    most ``timeout_s`` seconds from its start, its queue wait bounded by ``queue_timeout_s``
    (None: unbounded, shown as it goes). The bound is ``timeout_s`` (+ ``queue_timeout_s``)
    per round of ``at_once`` world sizes, and as many for the JAX runs, e.g. ``[probe]
    Slurm: 5 job(s) (5 world size(s)), submitted at once and waited for here, each at most
    --timeout 1800 s from its start (no --queue-timeout: the queue wait is not bounded; a
    line every 4 min says how long a job has waited): up to 0:30:00 of running, plus the
    queue waits; in a tmux or screen session the probe outlives a dropped login (a SIGHUP
    or SIGTERM cancels every job still queued or running and records them)``."""
    from vitfsdp.probe.slurm import WAIT_LINE_S  # no submitit: the constant only

    what = f"{worlds} world size(s)" + (f" + {jax} JAX framework run(s)" if jax else "")
    rounds = math.ceil(worlds / (at_once or worlds or 1)) + math.ceil(jax / (at_once or jax or 1))
    how = ("submitted at once" if at_once is None else
           f"submitted at once, at most {at_once} queued at a time (cluster.max_jobs, "
           "cluster.max_queued_jobs)")
    if queue_timeout_s is None:
        queue = ("no --queue-timeout: the queue wait is not bounded; a line every "
                 f"{WAIT_LINE_S / 60:g} min says how long a job has waited")
        bound = f"up to {format_eta(rounds * timeout_s)} of running, plus the queue waits"
    else:
        queue = f"after at most --queue-timeout {queue_timeout_s:g} s in the queue"
        bound = f"up to {format_eta(rounds * (timeout_s + queue_timeout_s))}"
    return (f"[probe] Slurm: {worlds + jax} job(s) ({what}), {how} and waited for here, each at "
            f"most --timeout {timeout_s:g} s from its start ({queue}"
            + ("; a world size's JAX runs once it is measured" if jax else "")
            + f"): {bound}; in a tmux or screen session the "
            "probe outlives a dropped login (a SIGHUP or SIGTERM cancels every job still queued "
            "or running and records them)")


def jax_jobs(points: list[tuple[list[str], object]]) -> int:
    """How many framework jobs of its own a Slurm probe submits for ``points``
    (:meth:`SlurmProbe.ended`): one per world size, strategy and engine of the JAX points
    (PyTorch's run inside the world size's job). At most that many: none where a world size
    failed."""
    return len({(cfg.world_size, cfg.strategy.name, cfg.engine) for _, cfg in points
                if cfg.framework == "jax" and cfg.cluster.launcher == "slurm"})


def timeout_seconds(text: str) -> float:
    """``--timeout``'s type: seconds, finite and > 0.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints it and exits 2)."""
    return _seconds(text, "seconds one world size may take", "--timeout 1800 (the default)")


def queue_timeout_seconds(text: str) -> float:
    """``--queue-timeout``'s type: seconds, finite and > 0.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse prints it and exits 2)."""
    return _seconds(text, "seconds a Slurm job may wait in the queue",
                    "--queue-timeout 14400, or leave it out to wait as long as the queue "
                    "takes")


def _seconds(text: str, what: str, example: str) -> float:
    """``text`` as seconds, finite and > 0, else argparse's error naming ``what`` and
    ``example``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: {what}, a finite number > 0; e.g. "
                                         f"{example}")
    return value


def record_interrupted(e: BaseException, spec: dict, worlds: list[dict],
                       points: list | None = None) -> None:  # fmt: skip
    """Record in ``worlds`` the world size of ``spec`` (its points ``points``) that a
    Ctrl-C, SIGTERM or SIGHUP (``e``) stopped while measured here: ``status: failed`` with
    the reason; where its measurement was done and a framework run was stopped, the world
    stays completed with the framework runs already measured, and each one not yet done is
    recorded ``interrupted`` with the reason."""
    from vitfsdp.probe.slurm import signal_name  # no submitit: the name only

    code = getattr(e, "code", 130)
    why = getattr(e, "reason", None) or f"interrupted by {signal_name(code)}"
    if not (worlds and worlds[-1]["world_size"] == spec["world_size"]):
        worlds.append({"world_size": spec["world_size"], "nodes": spec["nodes"],
                       "ranks_per_node": spec["ranks_per_node"], "status": "failed",
                       "reason": why})
        return
    world = worlds[-1]
    if world.get("status") != "completed":
        return
    done = world.setdefault("framework", [])
    keys = {(f.get("framework", "torch"), f["strategy"], f["engine"]) for f in done}
    for key, _, _ in framework_points(points or []):
        if key not in keys:
            done.append({"framework": key[0], "strategy": key[1], "engine": key[2],
                         "status": "interrupted", "reason": why})


def _say(line: str) -> None:
    """Print ``line`` where a terminal may have gone (SIGHUP): a closed one is passed over."""
    try:
        print(line, flush=True)
    except (OSError, ValueError):
        pass


def eta_line(elapsed_s: float, done: list[dict], left: list[dict]) -> str:
    """The probe's progress after the world sizes ``done`` took ``elapsed_s`` seconds
    (wall time, start-up and the framework runs included), with ``left`` to go: the time
    left at the pace so far, scaled by ranks (each world size's ranks share this host's
    cores in a local probe, as a local sweep's points do: :class:`vitfsdp.progress.
    SweepProgress`), e.g. ``52 s so far; ETA ~0:01:44 for 1 world size left (measured: 52 s
    for 2 ranks, scaled by ranks)``. Specs are :func:`vitfsdp.probe.world_specs`' dicts
    (``world_size``)."""
    so_far = f"{elapsed_s:.0f} s so far"
    if not left:
        return so_far + "; done"
    ranks_done = sum(s["world_size"] for s in done)
    eta = elapsed_s / ranks_done * sum(s["world_size"] for s in left) if ranks_done else None
    return (f"{so_far}; ETA ~{format_eta(eta)} for {len(left)} world size(s) left (measured: "
            f"{elapsed_s:.0f} s for {ranks_done} rank(s), scaled by ranks)")


def publish(kept: Path, path: Path, replace: bool, completed: bool, measured: str) -> str:
    """Make the probe kept as ``kept`` the one the plan reads at ``path`` where there is none
    yet (or with ``replace``, and only a completed one); the line that says what was done,
    its commands shell-quoted."""
    what = f"probe kept as {kept} ({measured} world size(s) measured)"
    earlier = read_json(path) if path.exists() else None
    if not completed and earlier is None:  # nothing there, and this one is not whole
        some = not measured.startswith("0/")
        return (f"{what}; no {path} yet: the plan keeps the profile's data sheets"
                + (f"; to plan from the world sizes it measured: "
                   f"{paste_override('cluster.probe', str(kept))}" if some else "")
                + "; probe again once the failed world sizes can run")
    if not completed or (earlier is not None and not replace):
        since = f" (probed {earlier.get('created_at')})" if earlier else ""
        return (f"{what}; {path}{since} stays the one the plan reads, so recorded predictions "
                f"do not change; to use this one: {paste_override('cluster.probe', str(kept))}, or "
                "rerun with --replace")
    write_atomic(path, kept.read_bytes())
    return f"{what}; wrote {path}: plan with {paste_override('cluster.probe', str(path))}"



if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
