"""Each emulated node's own share of this host's CPUs: a cgroup CPU quota per node.

Simulated nodes share one host's cores, so a point of N nodes gives each node 1/N of the
compute that a 1-node point had: weak scaling then measures how the host divides its cores,
not how the nodes scale, and the network's effect drowns in it (8 ranks on 2 cores cap the
efficiency near 0.3 even on the loopback). With ``cluster.network.node_cpus`` every rank of
a node joins a cgroup of its own whose CPU bandwidth is ``node_cpus`` cores (CFS bandwidth
control) before its first step, at every node count: a node computes at the same speed
whether the point has 1 node or 4, as real nodes do, provided ``node_cpus`` x the sweep's
largest node count does not exceed the host's cores.

The launcher makes the cgroups (:class:`NodeCpuShares`) and names each node's in
:data:`NODE_CGROUP_ENV`; a rank joins it with :func:`join` once built (both trainers; the
probe's worker before it measures). Start-up (imports, building the model) and torchrun's
agent stay outside the quota: start-up is not what a node's compute emulates.

Both cgroup hierarchies are handled:

- cgroup v2 (``/sys/fs/cgroup/cgroup.controllers`` lists ``cpu``): ``cpu.max`` =
  ``"<quota> <period>"``, the ``cpu`` controller enabled in the root's
  ``cgroup.subtree_control``;
- cgroup v1 (``/sys/fs/cgroup/cpu/cpu.cfs_quota_us``): ``cpu.cfs_period_us`` and
  ``cpu.cfs_quota_us``.

The period is :data:`PERIOD_US` (10 ms): a node that used its quota waits at most that long,
short beside a step, so its peers' collectives see little of the throttling.

Sources: the kernel's Documentation/scheduler/sched-bwc.rst (CFS bandwidth control,
``cpu.cfs_quota_us``/``cpu.max``) and Documentation/admin-guide/cgroup-v2.rst.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

#: The variable naming the ``cgroup.procs`` file of this process's node (set by the launcher
#: where ``cluster.network.node_cpus`` is on).
NODE_CGROUP_ENV = "VITFSDP_NODE_CGROUP"
#: Where cgroups are mounted.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The CFS bandwidth period (µs): a node's quota is ``node_cpus`` x this per period.
PERIOD_US = 10_000


def cpu_root(root: Path = CGROUP_ROOT) -> tuple[Path, int] | str:
    """The cgroup directory under which node cgroups with a CPU quota are made, and the
    hierarchy's version (1 or 2); or why there is none (a one-line reason). A question: it
    reads and never writes (cgroup v2's cpu controller may still need enabling:
    :func:`enable_cpu_controller`)."""
    controllers = root / "cgroup.controllers"
    if controllers.is_file():
        try:
            if "cpu" not in controllers.read_text(encoding="utf-8").split():
                return "the cgroup v2 hierarchy has no cpu controller"
        except OSError as e:
            return f"cannot read {controllers} ({e.strerror or e})"
        return root, 2
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").is_file():
        return v1, 1
    return f"no cgroup cpu controller under {root} (CFS bandwidth control)"


def unavailable_reason(root: Path = CGROUP_ROOT) -> str | None:
    """Why node CPU quotas cannot be set here, or ``None`` when they can (a writable cgroup
    cpu controller, which needs root). A question: nothing is written."""
    found = cpu_root(root)
    if isinstance(found, str):
        return found
    if not os.access(found[0], os.W_OK):
        return f"{found[0]} is not writable (not root)"
    return None


def enable_cpu_controller(root: Path = CGROUP_ROOT) -> str | None:
    """Make node CPU quotas possible here: on cgroup v2, enable the cpu controller for the
    root's children (``+cpu`` into its ``cgroup.subtree_control``) where it is not yet; the
    action of which :func:`unavailable_reason` is the question. Returns why quotas cannot be
    set (its reason, or the write's failure), or ``None`` once they can."""
    reason = unavailable_reason(root)
    if reason is not None:
        return reason
    base, version = cpu_root(root)
    if version == 2:
        subtree = base / "cgroup.subtree_control"
        try:
            if "cpu" not in subtree.read_text(encoding="utf-8").split():
                subtree.write_text("+cpu", encoding="utf-8")
        except OSError as e:
            return f"cannot enable the cgroup v2 cpu controller ({e.strerror or e})"
    return None


class NodeCpuShares:
    """One cgroup per node, each limited to ``cpus`` cores, named ``<name>-n<k>``.

    :meth:`create` makes them; :meth:`procs_file` is the file a process writes its pid to
    in order to enter node ``k``'s cgroup (its children follow it); :meth:`remove` kills
    what is left in them and removes them.

    Raises (``create``):
        RuntimeError: a cgroup could not be made or limited (the message names the file).
    """

    def __init__(self, name: str, num_nodes: int, cpus: float,
                 root: Path = CGROUP_ROOT) -> None:  # fmt: skip
        if not cpus > 0:
            raise ValueError(f"cpus={cpus} must be > 0")
        self.name, self.cpus, self.root = name, cpus, root
        self.num_nodes = num_nodes
        self.dirs: list[Path] = []

    @property
    def quota_us(self) -> int:
        """The quota per :data:`PERIOD_US` (µs), at least the kernel's 1 ms minimum."""
        return max(1000, round(self.cpus * PERIOD_US))

    def create(self) -> None:
        """Make one cgroup per node under the cpu controller (enabled first where it is not:
        :func:`enable_cpu_controller`) and set its quota.

        Raises:
            RuntimeError: no cgroup cpu controller, or it cannot be enabled or written (not
                root), or a cgroup could not be made or limited (the message names the
                directory).
        """
        reason = enable_cpu_controller(self.root)
        if reason is not None:
            raise RuntimeError(reason)
        base, version = cpu_root(self.root)
        for k in range(self.num_nodes):
            d = base / f"{self.name}-n{k}"
            try:
                d.mkdir()
                self.dirs.append(d)
                if version == 2:
                    (d / "cpu.max").write_text(f"{self.quota_us} {PERIOD_US}", encoding="utf-8")
                else:
                    (d / "cpu.cfs_period_us").write_text(str(PERIOD_US), encoding="utf-8")
                    (d / "cpu.cfs_quota_us").write_text(str(self.quota_us), encoding="utf-8")
            except OSError as e:
                raise RuntimeError(f"cgroup {d}: {e.strerror or e}") from None
        nodes = f"each of the {self.num_nodes} emulated nodes" if self.num_nodes > 1 \
            else "the emulated node"
        log.info("%s limited to %g CPUs (cgroup v%d, quota %d µs per %d µs)", nodes, self.cpus,
                 version, self.quota_us, PERIOD_US)

    def procs_file(self, node: int) -> Path:
        """The ``cgroup.procs`` file of node ``node``'s cgroup."""
        return self.dirs[node] / "cgroup.procs"

    def procs_path_for_others(self, node: int) -> str:
        """:meth:`procs_file` as processes in other mount namespaces reach it: through this
        process's root (``/proc/<pid>/root/...``, proc(5)). ``ip netns exec`` remounts
        ``/sys`` for the network namespace, where the cgroup mount is then not visible; the
        path stays valid while this process (the launcher) runs."""
        return f"/proc/{os.getpid()}/root{self.procs_file(node)}"

    def remove(self) -> None:
        """Kill every process left in the nodes' cgroups and remove the cgroups (idempotent;
        errors are ignored: what is gone stays gone)."""
        remove_dirs(self.dirs)
        self.dirs = []


def _pids(d: Path) -> list[int]:
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text(encoding="utf-8").split()]
    except (OSError, ValueError):
        return []


def remove_dirs(dirs: Sequence[Path], wait_s: float = 10.0) -> None:
    """Kill the processes in cgroup directories ``dirs`` (SIGKILL) and remove the
    directories, waiting up to ``wait_s`` seconds for the killed processes to leave them."""
    for d in dirs:
        for pid in _pids(d):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait_s
    for d in dirs:
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # still busy: a killed process has not left yet
                if time.monotonic() > deadline:
                    log.warning("could not remove cgroup %s: processes still in it", d)
                    break
                time.sleep(0.05)


def find(prefix: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Node cgroups whose name starts with ``prefix`` (none where no cpu controller)."""
    found = cpu_root(root)
    if isinstance(found, str):
        return []
    return sorted(d for d in found[0].glob(prefix + "*") if d.is_dir())


def join(environ=os.environ) -> bool:
    """Move this process (all its threads, and the children it starts from now on) into its
    node's CPU-quota cgroup, named by :data:`NODE_CGROUP_ENV`; ``False`` (nothing done)
    where the variable is unset.

    Raises:
        RuntimeError: the variable is set but the cgroup cannot be joined (the message names
            the file).
    """
    procs = environ.get(NODE_CGROUP_ENV)
    if not procs:
        return False
    try:
        Path(procs).write_text(str(os.getpid()), encoding="utf-8")
    except OSError as e:
        raise RuntimeError(f"cannot join the node's CPU quota cgroup {procs}: "
                           f"{e.strerror or e}") from None
    return True


def throttled_s(environ=os.environ, proc_cgroup: Path = Path("/proc/self/cgroup"),
                root: Path = CGROUP_ROOT) -> float | None:
    """Seconds the CPU quota has held back this process's node cgroup (named by
    :data:`NODE_CGROUP_ENV`; its ``cpu.stat`` beside its ``cgroup.procs``) since the cgroup
    was made, else this process's own cgroup v2: ``throttled_usec`` (v2, µs) or
    ``throttled_time`` (v1, ns) of ``cpu.stat`` (the kernel's sched-bwc.rst). None where
    there is neither, or the file is unreadable or has neither field.

    Args:
        environ: where :data:`NODE_CGROUP_ENV` is looked up.
        proc_cgroup: this process's ``/proc/self/cgroup`` (its ``0::`` line, cgroup v2).
        root: where cgroups are mounted.
    """
    procs = environ.get(NODE_CGROUP_ENV)
    try:
        if procs:
            stat = Path(procs).with_name("cpu.stat")
        else:
            lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
            rel = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
            if rel is None:
                return None
            stat = root / rel.lstrip("/") / "cpu.stat"
        text = stat.read_text(encoding="utf-8")
    except (OSError, IndexError):
        return None
    fields = dict(ln.split() for ln in text.splitlines() if len(ln.split()) == 2)
    if "throttled_usec" in fields:
        return int(fields["throttled_usec"]) / 1e6
    if "throttled_time" in fields:
        return int(fields["throttled_time"]) / 1e9
    return None
