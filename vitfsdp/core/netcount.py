"""Bytes each node sent over its link while a run trained, counted by the run's own ranks.

The local launcher counts a point's bytes from outside (it made the links:
:func:`vitfsdp.launch.local.write_network_record`). On the virtual Slurm cluster with nodes
apart (``launch/virtual/network.sh``) the links outlive the jobs and nothing outside a job
knows when its steps ran, so the ranks count: the node's TaskProlog names the node's end of
its link in the network record it hands the task (``node_if`` in ``VITFSDP_NETWORK``), the
first rank of each node reads that interface's transmit counter (``/proc/net/dev``, proc(5):
the counters of the reading process's own network namespace, its node's link, where
``/sys/class/net`` may still show the host's: a slurmd entered with ``nsenter`` keeps the
host's ``/sys``) before the first step and after the last, and rank 0 writes the differences to
the run directory's ``network.json`` (:data:`vitfsdp.core.layout.NETWORK_FILE`) in the local
launcher's fields, which the analysis turns into ``sent_gb_per_node_max``.

Only where a record names the interface: on a real cluster, collectives over RDMA (RCCL,
NCCL over InfiniBand or Slingshot) bypass the kernel's counters, and another job's traffic
would be counted with ours.
"""

from __future__ import annotations

from pathlib import Path

#: Where Linux lists the interfaces of the reading process's network namespace with their
#: counters (proc(5)): per line ``<if>: <8 receive fields> <8 transmit fields>``, bytes first.
PROC_NET_DEV = Path("/proc/net/dev")


def counted_link(record: dict | None) -> str | None:
    """The interface whose bytes a run counts: the network record's ``node_if`` where the
    record says the network is emulated, else ``None`` (nothing counted)."""
    if not isinstance(record, dict) or not record.get("emulated"):
        return None
    name = record.get("node_if")
    return name if isinstance(name, str) and name and "/" not in name else None


def tx_bytes(ifname: str, path: Path = PROC_NET_DEV) -> int | None:
    """Bytes interface ``ifname`` of this process's network namespace has sent since it was
    made (the first transmit field of its ``/proc/net/dev`` line), or ``None`` where there is
    no such interface or the file cannot be read."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines[2:]:  # two header lines
        name, _, fields = line.partition(":")
        if name.strip() == ifname:
            try:
                return int(fields.split()[8])
            except (IndexError, ValueError):
                return None
    return None


def network_file(sent_per_node: list[int | None], record: dict) -> dict:
    """``network.json``'s content for bytes counted by the ranks: ``sent_bytes_per_node``
    (bytes, node 0 first, ``None`` where a node could not read its counter),
    ``sent_bytes_total``, ``inter_node_gbit_s``, ``nodes`` and ``network`` as the local
    launcher writes them, and ``counted`` (what the bytes cover)."""
    return {"sent_bytes_per_node": sent_per_node,
            "sent_bytes_total": sum(b for b in sent_per_node if b is not None),
            "inter_node_gbit_s": record.get("inter_node_gbit_s"), "nodes": len(sent_per_node),
            "network": record.get("name"),
            "counted": f"by the ranks: {record.get('node_if')} transmit bytes from the first "
                       "step to the last"}


__all__ = ["PROC_NET_DEV", "counted_link", "network_file", "tx_bytes"]
