"""Sharded checkpoints of the JAX trainer (orbax-checkpoint) in ``run_dir/checkpoint/``.

The same directory, ``meta.json``, config fingerprint and atomic rule as the torch trainer's
(:mod:`vitfsdp.checkpoint`, whose functions do that part), so launchers and users treat a JAX
run's checkpoint like a torch run's:

- ``state/``: the train state (parameters and optax AdamW state) as orbax's
  ``StandardCheckpointer`` writes a pytree of ``jax.Array``: every process writes the shards
  its devices hold, process 0 the tree's metadata; a restore lays each array out by the
  sharding asked for (:func:`load`), so no process ever holds the whole state;
- ``meta.json``: step reached, attempt, world size (devices), config and fingerprint
  (:func:`vitfsdp.checkpoint.write_meta`).

No RNG file: the JAX step draws no random numbers (no dropout, no drop-path), and the data
position is the step, as for torch. A save goes into ``run_dir/.checkpoint.tmp/`` and is
renamed to ``checkpoint/`` by process 0 once every process has written
(:func:`vitfsdp.checkpoint.swap_in`). The directory must be shared by all processes.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from vitfsdp import checkpoint

log = logging.getLogger(__name__)

STATE_DIR = "state"  # orbax's directory inside checkpoint/


def find(run_dir: Path, cfg) -> dict | None:
    """The ``meta.json`` of the checkpoint in ``run_dir`` to resume from, the same on every
    process; ``None`` if there is none. Process 0 looks first (and renames a swap interrupted
    half-way back, :func:`vitfsdp.checkpoint.find`), the others read after it. Collective.

    Raises:
        ValueError: the checkpoint was saved by a run of another config (the differing keys
            are named), on every process.
    """
    meta, error = None, None
    if jax.process_index() == 0:
        try:
            meta = checkpoint.find(run_dir, cfg, rank=0)
        except ValueError as e:
            error = e
    _sync("vitfsdp_checkpoint_find")
    if error is not None:
        raise error
    return meta if jax.process_index() == 0 else checkpoint.find(run_dir, cfg, rank=0)


def save(run_dir: Path, step: int, state: Any, *, cfg, attempt: int) -> float:
    """Save ``state`` (a pytree of sharded ``jax.Array``) and ``step`` into
    ``run_dir/checkpoint/`` atomically. Collective: every process calls it at the same step.
    Returns the seconds it took.

    Raises:
        OSError: the run directory is not writable (or not shared by all processes).
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir).absolute()
    tmp = run_dir / checkpoint.TMP_DIR
    if jax.process_index() == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a save that died half-way
        tmp.mkdir(parents=True)
    _sync("vitfsdp_checkpoint_tmp")
    with _quiet(), ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp / STATE_DIR, state)
        ckptr.wait_until_finished()
    _sync("vitfsdp_checkpoint_written")
    if jax.process_index() == 0:
        checkpoint.write_meta(tmp, step, attempt, cfg, jax.device_count())
        checkpoint.swap_in(run_dir, tmp)
    _sync("vitfsdp_checkpoint_renamed")
    seconds = time.perf_counter() - t0
    log.info("checkpoint of step %d saved in %.2f s", step, seconds)
    return seconds


def load(run_dir: Path, target: Any) -> Any:
    """The train state of ``run_dir/checkpoint/``, each array laid out as ``target`` says
    (a pytree of ``jax.ShapeDtypeStruct`` with their ``sharding``, the structure of the
    state saved). Collective, like :func:`save`.

    Raises:
        FileNotFoundError: no checkpoint there.
    """
    path = Path(run_dir).absolute() / checkpoint.CHECKPOINT_DIR / STATE_DIR
    if not path.is_dir():
        raise FileNotFoundError(f"no JAX checkpoint state in {path}")
    with _quiet(), ocp.StandardCheckpointer() as ckptr:
        return ckptr.restore(path, target)


@contextmanager
def _quiet() -> Iterator[None]:
    """Keep orbax's INFO lines (about 35 per save, through absl's logger) out of the run's
    log; its warnings pass."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def _sync(name: str) -> None:
    """Wait until every process got here (nothing to wait for in one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)
