"""A site's measured figures (``probe.json``, written by ``python -m vitfsdp.probe``), read
for the plan: per-shape GEMM and op times, AdamW time per parameter, collective time against
message size, and how much of a collective hides behind compute.

The schema (``"schema": "vitfsdp.probe/1"``; units in the names; docs/plan.md, "The probe"):

.. code-block:: text

    {"schema", "status": completed | failed, "reason", "created_at", "host", "backend",
     "device": {"type": cpu | cuda, "name"}, "versions": {...}, "cluster", "gpus_per_node",
     "worlds": [                      # one per world size probed (all ranks busy at once)
       {"world_size", "nodes", "ranks_per_node", "status", "reason", "wall_s",
        "gemm": [{"m", "n", "k", "dtype", "time_s", "tflops"}],     # (M×K)·(K×N), mean of ranks
        "ops": [{"op", "shape", "dtype", "forward_s", "backward_s"}],  # layer_norm, gelu ...
        "optimizer": {"impl", "num_params", "time_s", "s_per_param"},
        "memory": {"copy_gbps", "triad_gbps"},                      # STREAM-style kernels
        "collectives": [{"op", "ranks", "nodes", "dtype", "groups",
                         "points": [{"size_bytes", "time_s", "busbw_gbps"}],
                         "latency_us", "busbw_gbps"}],
        "overlap": {"compute_s", "comm_s", "together_s", "fraction"},
        "network": {"emulate", "emulated", "inter_node_gbit_s", ...}}]}  # local launcher only

``network`` is present where the sweep asked for nodes apart (``cluster.network.emulate``,
:mod:`vitfsdp.launch.netns`): the probe's ranks then ran on the same emulated link as the
points, and a point planned from a probe measured on another network gets a note.

A lookup at a world size the probe has not measured takes the nearest one that was (by
ratio), and says so in the notes it returns beside its figure (a prediction carries them);
a shape not measured takes the measured shape of the same pass closest in FLOPs, scaled by
FLOPs. Nothing here is fitted: every figure is a measurement, interpolated.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from vitfsdp.core.layout import PROBE_FILE  # the probe file's name in a sweep directory

#: The schema this module reads.
SCHEMA = "vitfsdp.probe/1"

#: What a lookup had to approximate, one sentence each (empty where it read a measurement).
Notes: TypeAlias = frozenset[str]
NO_NOTES: Notes = frozenset()


def _nearest(values, target: float):
    """The item of ``values`` closest to ``target`` by ratio (log distance)."""
    return min(values, key=lambda v: abs(math.log(max(v, 1e-30) / max(target, 1e-30))))


def interpolate(points: list[tuple[float, float]], size: float) -> float:
    """Time of a collective of ``size`` bytes from measured ``(size_bytes, time_s)`` points
    (sorted by size): linear between the two neighbours, below the smallest its time (the
    latency floor), above the largest the last segment's slope (its bandwidth) extended.

    Raises:
        ValueError: no points.
    """
    if not points:
        raise ValueError("no measured points to interpolate")
    sizes = [s for s, _ in points]
    if size <= sizes[0]:
        return points[0][1]
    i = bisect.bisect_left(sizes, size)
    if i >= len(points):
        if len(points) == 1:
            return points[0][1] * size / sizes[0]
        (s0, t0), (s1, t1) = points[-2], points[-1]
        slope = max((t1 - t0) / (s1 - s0), t1 / s1 * 0.5) if s1 > s0 else t1 / s1
        return t1 + slope * (size - s1)
    (s0, t0), (s1, t1) = points[i - 1], points[i]
    return t0 + (t1 - t0) * (size - s0) / (s1 - s0)


@dataclass
class ProbeWorld:
    """The measurements at one world size (see the module docstring)."""

    world_size: int
    nodes: int
    gemm: dict[tuple[int, int, int, str], float]  # (m, n, k, dtype) -> seconds
    ops: dict[tuple[str, tuple, str], tuple[float, float]]  # (op, shape, dtype) -> (fwd, bwd) s
    s_per_param: float | None  # AdamW step, seconds per parameter of the shard
    collectives: dict[tuple[str, int, int, str], list[tuple[float, float]]]
    overlap: float | None  # fraction of the shorter of compute and transfer that hides
    # (strategy, engine) -> (seconds, per: unit | step): the loop's and wrapper's own time
    framework: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)
    network: dict | None = None  # the emulated network measured on (netns.record), if asked

    @classmethod
    def from_json(cls, w: dict) -> ProbeWorld:
        """Parse one entry of ``worlds``."""
        gemm = {(g["m"], g["n"], g["k"], g["dtype"]): g["time_s"] for g in w.get("gemm", [])}
        ops = {(o["op"], tuple(o["shape"]), o["dtype"]): (o["forward_s"], o["backward_s"])
               for o in w.get("ops", [])}
        coll = {(c["op"], c["ranks"], c["nodes"], c["dtype"]):
                sorted((p["size_bytes"], p["time_s"]) for p in c["points"])
                for c in w.get("collectives", []) if c.get("points")}
        opt = w.get("optimizer") or {}
        ov = w.get("overlap") or {}
        fw = {(f.get("framework", "torch"), f["strategy"], f["engine"]): (f["overhead_s"],
                                                                          f["per"])
              for f in w.get("framework", []) if f.get("status") == "completed"}
        return cls(w["world_size"], w.get("nodes", 1), gemm, ops, opt.get("s_per_param"),
                   coll, ov.get("fraction"), fw, w.get("network"))


@dataclass
class Probe:
    """A probe file, parsed; lookups for the plan (:mod:`vitfsdp.plan.timing`). Each lookup
    returns its figure and its :data:`Notes` (what it had to approximate): a probe is shared
    by every point planned from its file (:func:`cached_probe`) and holds no per-point
    state."""

    path: str
    device_type: str  # cpu | cuda
    worlds: dict[int, ProbeWorld]
    created_at: str | None = None  # when it was measured (ISO 8601, UTC); None: not recorded
    #: The world sizes' repeat spreads (probe worker ``spread``: each item timed three
    #: times); None where the probe predates repeats.
    spreads: tuple[dict, ...] = ()

    def worst_spread(self) -> float | None:
        """The largest median spread of the world sizes' repeats, a fraction of the median
        ((max - min) / median of each item's three timings; 0.34 for 34%): how far apart the
        probe's own figures lay while it measured. None where no world recorded a spread."""
        known = [s["median"] for s in self.spreads if s and s.get("median") is not None]
        return max(known) if known else None

    def spread_text(self) -> str | None:
        """What the predictions from this probe hold to: the largest median spread of its
        world sizes' repeats, ``repeats within 4%``, or ``NOISY: repeats spread 35% > 10%``
        where a world size's exceeds its bound; None where no world recorded a spread."""
        known = [s for s in self.spreads if s and s.get("median") is not None]
        if not known:
            return None
        worst = max(known, key=lambda s: s["median"])
        if any(s.get("noisy") for s in known):
            return f"NOISY: repeats spread {worst['median']:.0%} > {worst['bound']:.0%}"
        return f"repeats within {worst['median']:.0%}"

    def world(self, world_size: int) -> tuple[ProbeWorld, Notes]:
        """The measurements at ``world_size``, or at the nearest probed world size."""
        if world_size in self.worlds:
            return self.worlds[world_size], NO_NOTES
        near = _nearest(self.worlds, world_size)
        return self.worlds[near], frozenset({f"world size {world_size} not probed: figures "
                                             f"of {near}"})

    def gemm_s(self, world_size: int, m: int, n: int, k: int, dtype: str
               ) -> tuple[float, Notes]:
        """Seconds of one (M×K)·(K×N) matmul in ``dtype`` (measured at that shape, or the
        measured shape nearest in FLOPs, scaled by FLOPs), and the notes.

        Raises:
            KeyError: no GEMM measured at that world size.
        """
        w, notes = self.world(world_size)
        if (m, n, k, dtype) in w.gemm:
            return w.gemm[(m, n, k, dtype)], notes
        same = {key: t for key, t in w.gemm.items() if key[3] == dtype} or w.gemm
        if not same:
            raise KeyError(f"probe {self.path}: no GEMM measured at world size {w.world_size}")
        flops = m * n * k
        key = _nearest({kk[0] * kk[1] * kk[2]: kk for kk in same}, flops)
        ref = next(kk for kk in same if kk[0] * kk[1] * kk[2] == key)
        return same[ref] * flops / key, notes | {
            f"GEMM {m}x{n}x{k} {dtype} not probed: scaled from {ref[:3]}"}

    def op_s(self, world_size: int, op: str, shape: tuple, dtype: str
             ) -> tuple[tuple[float, float], Notes]:
        """(forward, backward) seconds of a non-matmul op at ``shape`` (at another shape of
        the same op, scaled by elements), and the notes.

        Raises:
            KeyError: ``op`` not measured.
        """
        w, notes = self.world(world_size)
        if (op, tuple(shape), dtype) in w.ops:
            return w.ops[(op, tuple(shape), dtype)], notes
        same = [(key, t) for key, t in w.ops.items() if key[0] == op]
        if not same:
            raise KeyError(f"probe {self.path}: op {op} not measured")
        size = math.prod(shape)
        key, (f, b) = min(same, key=lambda kt: abs(math.log(math.prod(kt[0][1]) / size)))
        scale = size / math.prod(key[1])
        return (f * scale, b * scale), notes | {
            f"{op} {tuple(shape)} not probed: scaled from {key[1]}"}

    def optimizer_s(self, world_size: int, num_params: int) -> tuple[float, Notes]:
        """Seconds of one AdamW step over ``num_params`` parameters (0 if not measured), and
        the notes."""
        w, notes = self.world(world_size)
        return (w.s_per_param or 0.0) * num_params, notes

    def collective_s(self, world_size: int, op: str, size_bytes: float, ranks: int,
                     nodes: int, dtype: str) -> tuple[float, Notes]:
        """Seconds of one collective (``size_bytes`` = the whole gathered or reduced buffer,
        nccl-tests' S) over ``ranks`` ranks on ``nodes`` nodes, latency included, and the
        notes.

        Raises:
            KeyError: no ``op`` measured at that world size.
        """
        if ranks <= 1:
            return 0.0, NO_NOTES
        w, notes = self.world(world_size)
        curve = w.collectives.get((op, ranks, nodes, dtype))
        if curve is None:  # another dtype of the same group; else the nearest group
            same = [k for k in w.collectives if k[0] == op and k[1:3] == (ranks, nodes)]
            if not same:
                same = [k for k in w.collectives if k[0] == op]
                if not same:
                    raise KeyError(f"probe {self.path}: no {op} measured at world size "
                                   f"{w.world_size}")
                notes |= {f"{op} over {ranks} ranks on {nodes} node(s) not probed"}
                same.sort(key=lambda k: (abs(k[2] - nodes), abs(k[1] - ranks)))
            curve = w.collectives[same[0]]
        return interpolate(curve, size_bytes), notes

    def framework_s(self, world_size: int, strategy: str, engine: str, is_fsdp: bool,
                    num_units: int, framework: str = "torch") -> tuple[float, Notes]:
        """Seconds per step the training loop and the wrapper add beyond compute and
        collectives, measured by the framework probe for this strategy under this
        ``framework`` (torch or jax; else one of the same kind, FSDP or DDP, under it), per
        FSDP unit (``num_units``: blocks + root) or per step; 0 where not measured under
        that framework (a PyTorch wrapper's hooks say nothing of a jitted JAX step). Probe
        files written before the framework was recorded hold PyTorch's. And the notes."""
        w, notes = self.world(world_size)
        hit = w.framework.get((framework, strategy, engine))
        if hit is None:
            same = [v for (fw, _, _), v in w.framework.items()
                    if fw == framework and (v[1] == "unit") == is_fsdp]
            if not same:
                if w.framework:
                    notes |= {f"loop+wrapper time of {framework} not probed"}
                return 0.0, notes
            notes |= {f"loop+wrapper time of {strategy} not probed: another "
                      f"{'FSDP' if is_fsdp else 'DDP'} strategy's"}
            hit = same[0]
        seconds, per = hit
        return seconds * (num_units if per == "unit" else 1), notes

    def check_network(self, world_size: int, emulate: bool, gbit_s: float | None,
                      node_cpus: float | None = None) -> Notes:
        """The notes of a point's network (``cluster.network``: nodes apart at ``gbit_s``
        Gbit/s when ``emulate``, else this host's loopback; each node limited to
        ``node_cpus`` cores where set) against the probe's at ``world_size``: one where the
        probe was measured on another network (its collective curves are then not the
        point's), one where under another node CPU quota (its compute figures are then not
        the point's)."""
        w, notes = self.world(world_size)
        net = w.network or {}
        measured = net.get("inter_node_gbit_s") if net.get("emulated") else None
        wanted = gbit_s if emulate else None
        if w.nodes > 1 and measured != wanted:
            def name(rate):
                return f"an emulated {rate:g} Gbit/s link" if rate else "the loopback"
            notes |= {f"probe at world size {w.world_size} measured on {name(measured)}, "
                      f"the point runs on {name(wanted)}: probe with the sweep's "
                      "cluster.network"}
        cpus_measured = net.get("node_cpus") if net.get("emulated") else None
        cpus_wanted = node_cpus if emulate else None
        if cpus_measured != cpus_wanted:
            def share(cpus):
                return f"{cpus:g} CPUs a node" if cpus else "the host's shared cores"
            notes |= {f"probe at world size {w.world_size} measured on {share(cpus_measured)}, "
                      f"the point runs on {share(cpus_wanted)}: probe with the sweep's "
                      "cluster.network"}
        return notes

    def overlap(self, world_size: int) -> tuple[float, Notes]:
        """Measured fraction of the shorter of compute and transfer that hides behind the
        other (1 = full overlap; 1 where not measured), and the notes."""
        w, notes = self.world(world_size)
        return (1.0 if w.overlap is None else min(1.0, max(0.0, w.overlap))), notes


def load_probe(path: str | Path) -> Probe:
    """Read a probe file (or the ``probe.json`` of a directory).

    Raises:
        ValueError: the file is missing, not JSON, of another schema, or holds no completed
            world size; the message names the path and the fix.
    """
    p = Path(path)
    if p.is_dir():
        p = p / PROBE_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"cluster.probe={str(path)!r} cannot be read ({e.__class__.__name__}); "
                         "write one with python -m vitfsdp.probe, or set cluster.probe=null"
                         ) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"cluster.probe={str(path)!r} is not a {SCHEMA} file; write one "
                         "with python -m vitfsdp.probe")
    worlds = {w["world_size"]: ProbeWorld.from_json(w) for w in data.get("worlds", [])
              if w.get("status") == "completed"}
    if not worlds:
        raise ValueError(f"cluster.probe={str(path)!r} holds no completed measurement "
                         f"({data.get('reason') or 'every world size failed'}); probe again")
    return Probe(str(p), (data.get("device") or {}).get("type", "cpu"), worlds,
                 data.get("created_at"),
                 tuple(w.get("spread") or {} for w in data.get("worlds", [])
                       if w.get("status") == "completed"))


_CACHE: dict[tuple[str, float], Probe] = {}


def cached_probe(path: str | Path) -> Probe:
    """:func:`load_probe`, read once per file version (a sweep plans many points)."""
    p = Path(path)
    p = p / PROBE_FILE if p.is_dir() else p
    key = (str(p.resolve()), p.stat().st_mtime if p.exists() else 0.0)
    if key not in _CACHE:
        _CACHE[key] = load_probe(p)
    return _CACHE[key]


__all__ = ["NO_NOTES", "PROBE_FILE", "SCHEMA", "Notes", "Probe", "ProbeWorld", "cached_probe",
           "interpolate", "load_probe"]
