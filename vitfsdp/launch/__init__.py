"""Launchers: local processes (torchrun) now; Slurm via submitit builds on the same profile."""

from __future__ import annotations

from dataclasses import dataclass

LAUNCHERS = ("local",)


@dataclass
class ClusterConfig:
    """Where sweep points run (``cluster=<name>``): a cluster profile."""

    name: str = "local"  # profile name, recorded in run.json
    launcher: str = "local"  # local = torchrun processes on this machine, one point at a time
    gpus_per_node: int = 2  # ranks per node; local simulates nodes of this many processes
    max_local_procs: int = 64  # local launcher: refuse points needing more processes than this

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ValueError(
                f"cluster.launcher={self.launcher!r} is unknown; valid: {', '.join(LAUNCHERS)}"
            )
        if self.gpus_per_node < 1:
            raise ValueError(f"cluster.gpus_per_node={self.gpus_per_node} must be >= 1")
