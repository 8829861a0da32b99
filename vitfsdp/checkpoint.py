"""Sharded training checkpoints in ``run_dir/checkpoint/`` (torch.distributed.checkpoint).

Layout of ``run_dir/checkpoint/``:

- DCP files (``*.distcp`` per rank and ``.metadata``): model and optimizer state as the
  model is sharded (FSDP1 sharded state dict, FSDP2 DTensors, DDP a replica), through
  ``torch.distributed.checkpoint.state_dict.get_state_dict`` / ``set_state_dict``;
- ``meta.json``: the step reached, the attempt that saved it, the world size, the gradient
  scaler's state (fp16) and the config with its fingerprint (:func:`fingerprint`);
- ``rng-<rank>.pt``: each rank's torch RNG state (CPU, and CUDA on GPUs).

The data position is the step: a resumed run skips that many batches of the same seeded
order. A save goes into ``run_dir/.checkpoint.tmp/`` and is renamed to ``checkpoint/`` once
every rank has written (the previous one moves to ``.checkpoint.old/`` and is removed after),
so ``checkpoint/`` is always complete. A completed run removes its checkpoint.

Launchers: a run that stopped on SIGUSR2/SIGTERM exits with :data:`EXIT_PREEMPTED` after
saving; keep :data:`CHECKPOINT_DIR` when moving an attempt aside, and the next run in the
same directory resumes from it.
"""

from __future__ import annotations

import datetime
import json
import logging
import shutil
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

# the run directory's names and the exit code of a stop (vitfsdp.core.layout), under the
# names other modules import from here
from vitfsdp.core.confighash import config_digest
from vitfsdp.core.layout import CHECKPOINT_DIR as CHECKPOINT_DIR
from vitfsdp.core.layout import CHECKPOINT_META_FILE as META_FILE
from vitfsdp.core.layout import CHECKPOINT_OLD_DIR as OLD_DIR
from vitfsdp.core.layout import CHECKPOINT_TMP_DIR as TMP_DIR
from vitfsdp.core.layout import EXIT_PREEMPTED as EXIT_PREEMPTED

log = logging.getLogger(__name__)


def fingerprint(cfg) -> tuple[str, dict]:
    """(16 hex digits of SHA-256, the dict hashed) of what a checkpoint depends on: the run
    config (a :class:`vitfsdp.config.RunConfig`) without the cluster profile (only its
    ``gpus_per_node``), ``dry_run`` and the train fields a run resumes across
    (:data:`vitfsdp.core.confighash.CHECKPOINT_EXCLUDED`): the ``checkpoint`` scope of
    :func:`vitfsdp.core.confighash.config_digest`."""
    return config_digest(cfg, "checkpoint")


def find(run_dir: Path, cfg, rank: int) -> dict | None:
    """The ``meta.json`` of the checkpoint in ``run_dir`` to resume from, the same on every
    rank (rank 0 reads it and broadcasts); ``None`` if there is none.

    A save interrupted during its final rename leaves only ``.checkpoint.old/``: it is
    renamed back first.

    Raises:
        ValueError: the checkpoint was saved by a run of another config (the differing keys
            are named).
    """
    meta = _read_meta(Path(run_dir)) if rank == 0 else None
    if dist.is_initialized() and dist.get_world_size() > 1:
        box = [meta]
        dist.broadcast_object_list(box, src=0)
        meta = box[0]
    if meta is None:
        return None
    digest, d = fingerprint(cfg)
    if meta["fingerprint"] != digest:
        diff = sorted(_diff(meta["config"], d))
        raise ValueError(
            f"{Path(run_dir) / CHECKPOINT_DIR} was saved by a run of another config "
            f"(differs in: {', '.join(diff[:8]) or 'unknown'}); remove that folder to start "
            "afresh, or choose another hydra.run.dir")
    return meta


def _read_meta(run_dir: Path) -> dict | None:
    ckpt, old = run_dir / CHECKPOINT_DIR, run_dir / OLD_DIR
    if not (ckpt / META_FILE).is_file() and (old / META_FILE).is_file():
        shutil.rmtree(ckpt, ignore_errors=True)
        old.rename(ckpt)
    try:
        return json.loads((ckpt / META_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _diff(a, b, prefix: str = "") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return set().union(*(_diff(a.get(k), b.get(k), f"{prefix}{k}.")
                             for k in set(a) | set(b)))
    return set() if a == b else {prefix.rstrip(".")}


def save(run_dir: Path, step: int, model, optimizer, *, cfg, rank: int, attempt: int,
         scaler=None) -> float:
    """Save model, optimizer, RNG and ``step`` into ``run_dir/checkpoint/`` atomically; a
    collective: every rank calls it at the same step. Returns the seconds it took.

    Raises:
        OSError: the run directory is not writable (or not shared by all ranks).
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    tmp = run_dir / TMP_DIR
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a save that died half-way
    _barrier()
    with _quiet():
        _dcp().save(_state(model, optimizer), checkpoint_id=str(tmp))
    torch.save(_rng_state(), tmp / f"rng-{rank}.pt")
    _barrier()
    if rank == 0:
        write_meta(tmp, step, attempt, cfg,
                   dist.get_world_size() if dist.is_initialized() else 1,
                   scaler=scaler.state_dict() if scaler is not None else None)
        swap_in(run_dir, tmp)
    _barrier()
    seconds = time.perf_counter() - t0
    log.info("checkpoint of step %d saved in %.2f s", step, seconds)
    return seconds


def write_meta(directory: Path, step: int, attempt: int, cfg, world_size: int,
               **extra) -> dict:
    """Write ``directory/meta.json`` (one process): ``step`` reached, the ``attempt`` that
    saved it, ``world_size``, the config and its :func:`fingerprint`, ``extra`` (JSON-able)
    and the UTC time; returns what it wrote."""
    digest, d = fingerprint(cfg)
    meta = {"step": step, "attempt": attempt, "fingerprint": digest, "config": d,
            "world_size": world_size, **extra,
            "saved_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds")}
    (Path(directory) / META_FILE).write_text(json.dumps(meta, indent=2) + "\n",
                                             encoding="utf-8")
    return meta


def swap_in(run_dir: Path, tmp: Path) -> None:
    """Make the complete save in ``tmp`` the run's ``checkpoint/`` (one process, after every
    process has written): the previous one moves to ``.checkpoint.old/`` and is removed
    after, so :func:`find` always sees a complete checkpoint."""
    ckpt, old = run_dir / CHECKPOINT_DIR, run_dir / OLD_DIR
    shutil.rmtree(old, ignore_errors=True)
    if ckpt.exists():
        ckpt.rename(old)
    tmp.rename(ckpt)
    shutil.rmtree(old, ignore_errors=True)


def load(run_dir: Path, model, optimizer, *, rank: int, scaler=None,
         meta: dict | None = None) -> None:
    """Restore model, optimizer, this rank's RNG and the scaler from ``run_dir/checkpoint/``
    (``meta``: its meta.json, from :func:`find`). A collective, like :func:`save`.

    Raises:
        FileNotFoundError: no checkpoint there.
    """
    # torch.distributed.checkpoint on first save or load: a run without checkpoints never loads it
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = Path(run_dir) / CHECKPOINT_DIR
    if not (path / META_FILE).is_file():
        raise FileNotFoundError(f"no checkpoint in {path}")
    with _quiet():
        state = _state(model, optimizer)
        # FSDP1: a rank may hold no shard of a small parameter; flattening would drop that
        # ShardedTensor and make DCP take the checkpoint for a torch <= 2.3 one
        dcp = _dcp()
        dcp.load(state, checkpoint_id=str(path),
                 planner=dcp.DefaultLoadPlanner(flatten_sharded_tensors=False))
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
    rng = path / f"rng-{rank}.pt"
    if rng.is_file():  # absent when the world size changed
        _set_rng_state(torch.load(rng, weights_only=True))
    if scaler is not None and meta and meta.get("scaler"):
        scaler.load_state_dict(meta["scaler"])


def remove(run_dir: Path) -> None:
    """Delete the run's checkpoint (a completed run needs it no more)."""
    for name in (CHECKPOINT_DIR, TMP_DIR, OLD_DIR):
        shutil.rmtree(Path(run_dir) / name, ignore_errors=True)


@contextmanager
def _quiet():
    """Silence torch's deprecation notes for FSDP1's ShardedTensor state dicts (one per
    tensor and rank; they say nothing about this run)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
        warnings.filterwarnings("ignore", message=".*(Multiple backends|_get_pg_default_device)")
        yield


def _state(model, optimizer) -> dict:
    # torch.distributed.checkpoint on first save or load: a run without checkpoints never loads it
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def _dcp():
    # torch.distributed.checkpoint on first save or load: a run without checkpoints never loads it
    import torch.distributed.checkpoint as dcp

    return dcp


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _rng_state() -> dict:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
