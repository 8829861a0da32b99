"""The one hash of a run config, for its two identities: a sweep point's and a checkpoint's.

:func:`config_digest` hashes the resolved config (a :class:`vitfsdp.config.RunConfig`, as
``dataclasses.asdict``) as sorted JSON with SHA-256, 16 hex digits, less what the identity
leaves out:

- a sweep point (``scope="point"``; :func:`vitfsdp.launch.resume.config_hash`, recorded in
  ``job.json``: a rerun skips a point whose config completed): :data:`POINT_EXCLUDED`, the
  cluster fields that change how a point is watched, requeued, planned or priced, not what
  it measures, and :data:`ADDED_EMPTY` while empty;
- a checkpoint (``scope="checkpoint"``; :func:`vitfsdp.checkpoint.fingerprint`, in its
  ``meta.json``: a run resumes only from its own config's checkpoint): the same, extended
  by :data:`CHECKPOINT_EXCLUDED`.

The two differ because they answer different questions. A point's identity is what it
measures, so the cluster profile (partition, launcher, network, environment), ``dry_run``,
the checkpoint cadence, the time-out and the memory limit are part of it: a point run with
another of them is another measurement. A checkpoint's identity is what the saved state
depends on (model, data, strategy, optimizer, seed, and the ranks per node its shards were
laid out for), so a run resumes from it with another cadence, time-out, memory limit or
cluster profile of the same ``gpus_per_node``.

The hash values are those the two separate hashes gave before they were merged, so earlier
sweeps resume and earlier checkpoints load.

Standard library only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Literal

#: Cluster fields that change how a point is watched, requeued, planned or priced, not what it
#: measures: left out of both identities, so recalibrating the plan or setting a price does
#: not make completed points run again (nor does the time limit cluster.time=auto resolves to).
POINT_EXCLUDED = ("poll_s", "array", "array_parallelism", "max_jobs", "max_requeues",
                  "peak_tflops", "plan_efficiency", "intra_node_gbps", "inter_node_gbps",
                  "price_per_node_hour", "memory_gbps", "collective_latency_us",
                  "intra_node_latency_us", "inter_node_latency_us", "time", "queue_limits",
                  "package_gpus", "intra_package_gbps", "torch_build", "small_paths",
                  "max_queued_jobs", "checkpoint_write_gbps")
#: Cluster fields added after sweeps were recorded: left out while empty, so an earlier
#: sweep's points keep their identity.
ADDED_EMPTY = ("single_node_env",)
#: Cluster fields hashed as a part of another, ``{field: into}``: the job's sbatch options
#: are the site's and the sweep's together (``site_sbatch_args`` was split out of
#: ``sbatch_args``), so a profile's points keep the identity they had before the split.
MERGED = {"site_sbatch_args": "sbatch_args"}
#: The checkpoint's extension of :data:`POINT_EXCLUDED`, ``{section: fields}`` (``""``: the
#: config's top level): what a checkpoint resumes across. ``"cluster"`` is every cluster
#: field but :data:`CHECKPOINT_CLUSTER_KEPT`.
CHECKPOINT_EXCLUDED = {"": ("dry_run",),
                       "train": ("checkpoint_every", "timeout_s", "memory_limit_gib")}
#: The one cluster field a checkpoint depends on: how many ranks share a node (its shards'
#: layout under hybrid strategies).
CHECKPOINT_CLUSTER_KEPT = ("gpus_per_node",)

Scope = Literal["point", "checkpoint"]


def hashed_config(cfg, scope: Scope = "point") -> dict:
    """The dict :func:`config_digest` hashes: ``cfg`` as ``dataclasses.asdict`` less what
    ``scope``'s identity leaves out (module docstring; :func:`hashed_dict`).

    Raises:
        ValueError: ``scope`` is not ``point`` or ``checkpoint``.
    """
    return hashed_dict(dataclasses.asdict(cfg), scope)


def hashed_dict(config: dict, scope: Scope = "point") -> dict:
    """A config dict (``dataclasses.asdict`` of a :class:`vitfsdp.config.RunConfig`, or the
    ``config`` a run recorded in run.json or job.json) less what ``scope``'s identity leaves
    out (module docstring); ``config`` itself is left as it is.

    Raises:
        ValueError: ``scope`` is not ``point`` or ``checkpoint``.
    """
    if scope not in ("point", "checkpoint"):
        raise ValueError(f"scope={scope!r} is not 'point' or 'checkpoint'")
    d = dict(config)
    cluster = d["cluster"] = dict(d.get("cluster") or {})
    for key in POINT_EXCLUDED:
        cluster.pop(key, None)
    for key in ADDED_EMPTY:
        if not cluster.get(key):
            cluster.pop(key, None)
    for key, into in MERGED.items():
        if key in cluster:
            cluster[into] = [*cluster.pop(key), *cluster.get(into, [])]
    if scope == "checkpoint":
        d["cluster"] = {k: cluster[k] for k in CHECKPOINT_CLUSTER_KEPT}
        for section, keys in CHECKPOINT_EXCLUDED.items():
            for key in keys:
                if section:
                    d[section] = {k: v for k, v in d[section].items() if k != key}
                else:
                    d.pop(key, None)
    return d


def digest(d: dict) -> str:
    """16 hex digits of SHA-256 over ``d`` as sorted JSON (values JSON cannot hold: their
    ``str``): the hash of both identities."""
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_digest(cfg, scope: Scope = "point") -> tuple[str, dict]:
    """(16 hex digits of SHA-256 over :func:`hashed_config` as sorted JSON, that dict): the
    identity of ``cfg`` (a :class:`vitfsdp.config.RunConfig`) as a sweep point or a
    checkpoint (module docstring).

    Raises:
        ValueError: ``scope`` is not ``point`` or ``checkpoint``.
    """
    d = hashed_config(cfg, scope)
    return digest(d), d


def point_id(config: dict) -> str:
    """The identity of a sweep point whatever its ``repeat``: :func:`digest` of
    :func:`hashed_dict` (scope ``point``, the rule of the sweep's ``config_hash``) over
    ``config`` (a run's config as a dict: run.json's, or ``dataclasses.asdict`` of a
    :class:`vitfsdp.config.RunConfig`) without ``repeat``, so every repeat of a point shares
    it: the analysis's ``point_id`` column and the plan's."""
    return digest(hashed_dict({k: v for k, v in config.items() if k != "repeat"}))
