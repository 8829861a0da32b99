"""Nodes that are really apart: an emulated network for the local launcher.

With ``cluster.network.emulate=true`` and root, each simulated node of a point gets its own
Linux network namespace (``ip netns``) with its own address on a bridge, and the traffic
between nodes is shaped with ``tc`` to ``cluster.network.inter_node_gbit_s``::

    namespace <name>-sw:  bridge br0 ── p0 ── p1 ── ...      (the switch; one port per node)
                                        │     │
    namespace <name>-n0:  eth0 10.77.0.1 │     │             (node 0: its ranks, its loopback)
    namespace <name>-n1:  eth0 10.77.0.2 ─────┘              (node 1 ...)

Every device lives inside the point's namespaces (nothing is added to the host's own network):
removing the namespaces removes the veths, the bridge and the qdiscs with them, and two
points, sweeps or users never collide on a name or an address. Both ends of each node's link
(the node's ``eth0`` and its switch port) carry an ``htb`` class at the rate, so a node sends
and receives at most the rate at once, as through a full-duplex NIC. Ranks of one node talk
over their namespace's loopback (Linux routes a packet to a local address through ``lo``), so
only traffic between nodes is shaped.

With ``cluster.network.node_cpus`` each node's ranks also join a cgroup of their own,
limited to that many cores, before their first step (:mod:`vitfsdp.core.nodecpu`), so that
a node computes as fast in a 4-node point as in a 1-node one, as real nodes do.

Latency is not emulated: this needs ``netem``, which not every kernel has. The leaf of each
link's ``htb`` class (:data:`LEAF_CLASS`) is where a ``netem delay`` qdisc would go.

Nothing leaks (:class:`EmulatedNetwork`): the namespaces are removed when the point ends,
normally or by an exception; a guard process in its own session (:func:`guard`) removes
them, and kills what runs in them, when the launcher dies without cleaning up (kill -9), as
it sees its pipe from the launcher close; and every new network first removes stale ones,
whose launcher process is gone (:func:`remove_stale`).

Sources: ip-netns(8), ip-link(8) (``veth ... peer name ... netns``), tc-htb(8), and
``ip netns exec``'s bind-mounting of ``/etc/netns/<name>/`` files over ``/etc``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vitfsdp.core import nodecpu
from vitfsdp.provenance import NETWORK_ENV

log = logging.getLogger(__name__)

#: Every namespace this module makes is named ``<PREFIX><launcher pid>-<n>-<role>``.
PREFIX = "vitfsdp-"
#: The nodes' subnet (inside the point's own namespaces, so every network may use it).
SUBNET = "10.77.0"
#: Most nodes one network holds (addresses .1 ... .250 of :data:`SUBNET`).
MAX_NODES = 250
#: The node side of each link, inside the node's namespace; gloo binds it (GLOO_SOCKET_IFNAME).
NODE_IFNAME = "eth0"
#: The rendezvous port on node 0's address (a fresh namespace: always free).
MASTER_PORT = 29500
#: The ``htb`` class that shapes each link; a ``netem`` qdisc would be its leaf.
LEAF_CLASS = "1:10"
#: The guard process's program: :func:`guard` of the network named in argv[1].
GUARD_CODE = "import sys; from vitfsdp.launch.netns import guard; guard(sys.argv[1])"
#: ``ip netns exec`` bind-mounts these over /etc: a node's name and the others' resolve
#: without DNS (no server is reachable from a node's namespace).
NETNS_ETC = Path("/etc/netns")


@dataclass
class NetworkConfig:
    """The network between simulated nodes of the local launcher (``cluster.network``).

    Nodes apart need root (network namespaces); without it the network is not emulated and
    one log line says so.
    """

    # true: each node's ranks in their own network namespace, inter-node traffic shaped to
    # inter_node_gbit_s (local launcher, root); false: every rank on this host's loopback
    emulate: bool = False
    inter_node_gbit_s: float = 1.0  # each node's link rate, Gbit/s (10^9 bit/s), each way
    # cores each emulated node's ranks may use from their first step (a cgroup CPU quota),
    # the same at every node count, so a node computes as fast in a 4-node point as in a
    # 1-node one; null: the nodes share this host's cores (emulate=true only; root)
    node_cpus: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.emulate, bool):
            raise ValueError(f"cluster.network.emulate={self.emulate!r} must be true or false")
        if not self.inter_node_gbit_s > 0:
            raise ValueError(f"cluster.network.inter_node_gbit_s={self.inter_node_gbit_s} must "
                             "be > 0, e.g. 1.0 for a 1 Gbit/s link")
        if self.node_cpus is not None:
            if isinstance(self.node_cpus, bool) or not self.node_cpus > 0:
                raise ValueError(f"cluster.network.node_cpus={self.node_cpus!r} must be > 0 "
                                 "(cores per emulated node, e.g. 0.5) or null")
            if not self.emulate:
                raise ValueError("cluster.network.node_cpus needs emulated nodes: set "
                                 "cluster.network.emulate=true, or node_cpus=null")

    def check_nodes(self, nodes: int) -> None:
        """Refuse a point of more nodes than one emulated network holds.

        Raises:
            ValueError: ``emulate`` is on and ``nodes`` > :data:`MAX_NODES`.
        """
        if self.emulate and nodes > MAX_NODES:
            raise ValueError(f"nodes={nodes} exceeds the {MAX_NODES} nodes an emulated network "
                             "holds; use fewer nodes or cluster.network.emulate=false")


#: Per-namespace TCP settings of every node, as a tuned cluster host has them: buffers that
#: hold a collective's message (a rank that a loaded host schedules late then finds its data
#: waiting instead of a stalled sender) and no return to slow start after the idle gap
#: between two collectives. Source: ip-sysctl.txt (Linux), ESnet's host tuning guide.
#: Set by :func:`link_node`, for the virtual Slurm cluster's nodes too.
NODE_SYSCTLS = ("net.ipv4.tcp_rmem=4096 8388608 16777216",
                "net.ipv4.tcp_wmem=4096 8388608 16777216",
                "net.ipv4.tcp_slow_start_after_idle=0")
#: Capabilities a network namespace needs: CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21).
_NEEDED_CAPS = (12, 21)


def _has_caps(status: str = "/proc/self/status") -> bool:
    """Whether this process's effective capabilities hold :data:`_NEEDED_CAPS`."""
    try:
        lines = Path(status).read_text(encoding="utf-8").splitlines()
        eff = int(next(x for x in lines if x.startswith("CapEff:")).split()[1], 16)
    except (OSError, StopIteration, ValueError):
        return os.geteuid() == 0
    return all(eff >> cap & 1 for cap in _NEEDED_CAPS)


def unavailable_reason() -> str | None:
    """Why network namespaces cannot be made here (not root: no CAP_NET_ADMIN and
    CAP_SYS_ADMIN; no ``ip`` or ``tc``; ``ip netns`` failing), or ``None`` when they can."""
    if not _has_caps():
        return "not root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` command (install iproute2)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns list` failed: {probe.stderr.strip()}"
    return None


def record(cfg: NetworkConfig, nodes: int, emulated: bool, reason: str | None = None,
           node_cpus_reason: str | None = None) -> dict:
    """The network's part of run.json: what was asked, whether it was emulated and why not.

    ``inter_node_gbit_s`` is the shaped rate (null when not emulated); latency is never
    emulated (no netem). ``node_cpus`` is each node's CPU quota in cores where one was set
    (null where none was asked or it could not be set: ``node_cpus_reason`` then says why)."""
    cpus = cfg.node_cpus if emulated and not node_cpus_reason else None
    out = {"emulate": cfg.emulate, "emulated": emulated, "nodes": nodes,
           "inter_node_gbit_s": cfg.inter_node_gbit_s if emulated else None,
           "latency_emulated": False, "shaper": "htb" if emulated else None,
           "node_cpus": cpus}
    if reason:
        out["reason"] = reason
    if node_cpus_reason and cfg.node_cpus is not None:
        out["node_cpus_reason"] = node_cpus_reason
    return out


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip args`` and return the result.

    Raises:
        RuntimeError: ``check`` and the command failed (its stderr in the message).
    """
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _tc(namespace: str, *args: str) -> None:
    """Run ``tc args`` in ``namespace``.

    Raises:
        RuntimeError: the command failed.
    """
    done = subprocess.run(["ip", "netns", "exec", namespace, "tc", *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)} in {namespace}: {done.stderr.strip()}")


def list_namespaces(prefix: str = PREFIX) -> list[str]:
    """Names of the network namespaces starting with ``prefix`` (``ip netns list``)."""
    out = _ip("netns", "list", check=False).stdout
    names = (line.split()[0] for line in out.splitlines() if line.strip())
    return sorted(n for n in names if n.startswith(prefix))


def _shape(namespace: str, dev: str, gbit_s: float) -> None:
    """Shape ``dev``'s egress to ``gbit_s`` with one ``htb`` class (:data:`LEAF_CLASS`).

    The burst covers 2 ms at the rate (at least 64 KiB): with the timer-driven dequeue of a
    loaded host, a one-packet burst delivers well under the rate."""
    rate_bit_s = gbit_s * 1e9
    burst_b = max(64 * 1024, int(rate_bit_s / 8 * 0.002))
    _tc(namespace, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
    _tc(namespace, "class", "add", "dev", dev, "parent", "1:", "classid", LEAF_CLASS, "htb",
        "rate", f"{int(rate_bit_s)}bit", "ceil", f"{int(rate_bit_s)}bit",
        "burst", f"{burst_b}b", "cburst", f"{burst_b}b", "quantum", "60000")


def link_node(namespace: str, switch: str, port: str, gbit_s: float) -> None:
    """Make node ``namespace`` a node apart, the one implementation both emulated networks
    use (:class:`EmulatedNetwork`, and the virtual Slurm cluster's nodes apart through
    :func:`main`, launch/virtual/network.sh): its TCP settings (:data:`NODE_SYSCTLS`) and its
    link shaped both ways, an ``htb`` class at ``gbit_s`` Gbit/s (:func:`_shape`) on the
    node's :data:`NODE_IFNAME` and on its ``port`` in the ``switch`` namespace, so the node
    sends and receives at most the rate at once, as through a full-duplex NIC.

    Raises:
        RuntimeError: an ``ip``, ``sysctl`` or ``tc`` command failed (its stderr in the
            message).
    """
    _ip("netns", "exec", namespace, "sysctl", "-q", "-w", *NODE_SYSCTLS)
    _shape(namespace, NODE_IFNAME, gbit_s)
    _shape(switch, port, gbit_s)


def _write_etc(namespace: str, own_address: str, addresses: Sequence[str]) -> None:
    """``/etc/netns/<namespace>/hosts`` (this host's name → the node's address, every node as
    ``<namespace base>-node<k>``) and a ``resolv.conf`` without a server, so that no lookup
    waits for a DNS server the namespace cannot reach."""
    folder = NETNS_ETC / namespace
    folder.mkdir(parents=True, exist_ok=True)
    base = namespace.rsplit("-", 1)[0]
    lines = ["127.0.0.1 localhost", f"{own_address} {socket.gethostname()}"]
    lines += [f"{a} {base}-node{k}" for k, a in enumerate(addresses)]
    (folder / "hosts").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "resolv.conf").write_text("options timeout:1 attempts:1\n", encoding="utf-8")


def tx_bytes(namespace: str, dev: str = NODE_IFNAME) -> int | None:
    """Bytes device ``dev`` of network namespace ``namespace`` has sent (the TX byte counter,
    the 9th number after ``dev:`` in the namespace's ``/proc/net/dev``, see proc(5)); None
    when the namespace or device is gone or the line cannot be read."""
    done = subprocess.run(["ip", "netns", "exec", namespace, "cat", "/proc/net/dev"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None
    for line in done.stdout.splitlines():
        name, sep, counters = line.partition(":")
        if sep and name.strip() == dev:
            fields = counters.split()
            return int(fields[8]) if len(fields) > 8 and fields[8].isdigit() else None
    return None


def remove(names: Sequence[str]) -> None:
    """Kill every process in the namespaces ``names``, then delete them and their
    ``/etc/netns`` folders (their veths, bridge and qdiscs go with them). Errors are ignored:
    what is already gone stays gone."""
    for name in names:
        for pid in _ip("netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for name in names:
        _ip("netns", "del", name, check=False)
        shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def _launcher_pid(name: str) -> int | None:
    """The launcher's pid in a namespace name ``vitfsdp-<pid>-...`` (None if not ours)."""
    head = name[len(PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Remove the namespaces (and ``/etc/netns`` folders) of launchers that are gone: their
    pid, the first part of the name after :data:`PREFIX`, no longer runs. Returns the
    removed names."""
    folders = [p.name for p in NETNS_ETC.glob(PREFIX + "*")] if NETNS_ETC.is_dir() else []
    stale = sorted({n for n in [*list_namespaces(), *folders]
                    if (pid := _launcher_pid(n)) is not None and not _alive(pid)})
    if stale:
        log.info("removing %d stale emulated-network namespaces: %s", len(stale),
                 " ".join(stale))
        remove(stale)
    cgroups = [d for d in nodecpu.find(PREFIX)
               if (pid := _launcher_pid(d.name)) is not None and not _alive(pid)]
    if cgroups:
        log.info("removing %d stale emulated-node cgroups", len(cgroups))
        nodecpu.remove_dirs(cgroups)
    return stale


class EmulatedNetwork:
    """``num_nodes`` nodes apart on links of ``gbit_s`` Gbit/s, each limited to ``node_cpus``
    cores where set (:class:`vitfsdp.core.nodecpu.NodeCpuShares`), for the life of a
    ``with`` block. Where the CPU quota cannot be set (no cgroup cpu controller) one line
    says so and the nodes share the host's cores (``node_cpus_reason``).

    Example::

        with EmulatedNetwork(2, 1.0) as net:
            procs = [subprocess.Popen(net.wrap(k, argv), env={**os.environ, **net.env(k)})
                     for k in range(2)]

    Raises (on entering):
        RuntimeError: an ``ip`` or ``tc`` command failed (the network is removed again).
    """

    _count = 0

    def __init__(self, num_nodes: int, gbit_s: float, node_cpus: float | None = None) -> None:
        assert 1 <= num_nodes <= MAX_NODES, num_nodes
        EmulatedNetwork._count += 1
        self.name = f"{PREFIX}{os.getpid()}-{EmulatedNetwork._count}"
        self.gbit_s = gbit_s
        self.node_cpus = node_cpus
        self.node_cpus_reason: str | None = None
        self._cpus = (nodecpu.NodeCpuShares(self.name, num_nodes, node_cpus)
                      if node_cpus is not None else None)
        self.addresses = [f"{SUBNET}.{k + 1}" for k in range(num_nodes)]
        self.namespaces = [f"{self.name}-n{k}" for k in range(num_nodes)]
        self.switch = f"{self.name}-sw"
        self._guard: subprocess.Popen | None = None

    def __enter__(self) -> EmulatedNetwork:
        remove_stale()
        self._guard = subprocess.Popen(
            [sys.executable, "-c", GUARD_CODE, self.name],
            stdin=subprocess.PIPE, start_new_session=True)
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        for dev in ("lo", "br0"):
            _ip("-n", self.switch, "link", "set", dev, "up")
        for k, (ns, address) in enumerate(zip(self.namespaces, self.addresses, strict=True)):
            _ip("netns", "add", ns)
            _write_etc(ns, address, self.addresses)
            port = f"p{k}"
            _ip("-n", self.switch, "link", "add", port, "type", "veth",
                "peer", "name", NODE_IFNAME, "netns", ns)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", NODE_IFNAME)
            for dev in ("lo", NODE_IFNAME):
                _ip("-n", ns, "link", "set", dev, "up")
            link_node(ns, self.switch, port, self.gbit_s)
        self._limit_cpus()
        count = len(self.namespaces)
        log.info("emulated network %s: %s on %g Gbit/s links (htb; latency not emulated)",
                 self.name, f"{count} nodes apart" if count > 1 else "1 node", self.gbit_s)

    def _limit_cpus(self) -> None:
        """Make the nodes' CPU-quota cgroups, or say in one line why they cannot be made."""
        if self._cpus is None:
            return
        self.node_cpus_reason = nodecpu.enable_cpu_controller()
        if self.node_cpus_reason is None:
            self._cpus.create()
            cores = os.cpu_count() or 1
            if self.node_cpus * len(self.namespaces) > cores:
                log.warning("%d nodes x %g CPUs exceed this host's %d cores: the nodes' "
                            "quotas are not all met", len(self.namespaces), self.node_cpus,
                            cores)
        else:
            self._cpus = None
            log.warning("cluster.network.node_cpus=%g but %s: the nodes share this host's "
                        "cores", self.node_cpus, self.node_cpus_reason)

    def wrap(self, node: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside node ``node``'s namespace (``ip netns exec``, which execs it:
        the returned process is ``argv``'s own, signals reach it)."""
        return ["ip", "netns", "exec", self.namespaces[node], *argv]

    def env(self, node: int) -> dict[str, str]:
        """The variables node ``node``'s processes need: gloo on the node's link, the
        network's record for run.json (:data:`vitfsdp.provenance.NETWORK_ENV`), and where
        a CPU quota was set the node's cgroup for the ranks to join
        (:data:`vitfsdp.core.nodecpu.NODE_CGROUP_ENV`, :func:`vitfsdp.core.nodecpu.join`)."""
        cfg = NetworkConfig(True, self.gbit_s, self.node_cpus)
        rec = {**record(cfg, len(self.namespaces), True, None, self.node_cpus_reason),
               "name": self.name, "node_address": self.addresses[node]}
        env = {"GLOO_SOCKET_IFNAME": NODE_IFNAME, NETWORK_ENV: json.dumps(rec)}
        if self._cpus is not None:
            env[nodecpu.NODE_CGROUP_ENV] = self._cpus.procs_path_for_others(node)
        return env

    def sent_bytes(self) -> list[int | None]:
        """Bytes each node has sent over its link so far, one per node: the TX byte counter
        of the node's ``eth0`` as its own namespace's ``/proc/net/dev`` shows it (read
        inside the namespace: ``/sys/class/net`` can show the host's devices in some
        setups). None where it cannot be read."""
        return [tx_bytes(ns) for ns in self.namespaces]

    def close(self) -> None:
        """Log the bytes each node sent over its link, remove the namespaces and end the
        guard (idempotent)."""
        sent = self.sent_bytes() if self._guard is not None else []
        if any(sent):
            log.info("emulated network %s: the nodes sent %s MB over their links", self.name,
                     " / ".join("?" if b is None else f"{b / 1e6:.1f}" for b in sent))
        remove([*self.namespaces, self.switch])
        if self._cpus is not None:
            self._cpus.remove()
        if self._guard is not None:
            self._guard.stdin.close()
            self._guard.wait()
            self._guard = None


def guard(name: str) -> None:
    """Wait until stdin closes (the launcher ended, by any means), then remove every
    namespace named ``name`` or ``name-*``, and the nodes' CPU-quota cgroups."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the terminal is the launcher's
    sys.stdin.buffer.read()
    folders = [p.name for p in NETNS_ETC.glob(name + "-*")] if NETNS_ETC.is_dir() else []
    remove(sorted({n for n in [*list_namespaces(name), *folders] if n.startswith(name + "-")}))
    nodecpu.remove_dirs(nodecpu.find(name + "-"))


#: How a shell runs :func:`main` (``python3 -c LINK_CODE link ...``: launch/virtual/network.sh);
#: not ``-m``, which would import this module twice (the package imports it first).
LINK_CODE = "import sys; from vitfsdp.launch.netns import main; sys.exit(main())"


def main(argv: Sequence[str] | None = None) -> int:
    """``link NODE_NAMESPACE SWITCH_NAMESPACE PORT GBIT_S``: :func:`link_node`, for the
    virtual Slurm cluster's nodes apart (launch/virtual/network.sh), whose namespaces live as
    long as its daemons, not as one Python process. Returns the exit status: 0, or 1 with
    the failing command on stderr."""
    parser = argparse.ArgumentParser(prog="vitfsdp.launch.netns",
                                     description=main.__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    link = commands.add_parser("link", help="a node's TCP settings and its link shaped")
    link.add_argument("namespace")
    link.add_argument("switch")
    link.add_argument("port")
    link.add_argument("gbit_s", type=float)
    args = parser.parse_args(argv)
    try:
        link_node(args.namespace, args.switch, args.port, args.gbit_s)
    except RuntimeError as e:
        print(f"vitfsdp.launch.netns: {e}", file=sys.stderr)
        return 1
    return 0
