"""Sharded checkpoints of the JAX trainer (orbax-checkpoint) in ``run_dir/checkpoint/``.

The same directory, ``meta.json``, config fingerprint and atomic rule as the torch trainer's
(:mod:`vitfsdp.checkpoint`, whose functions do that part), so launchers and users treat a JAX
run's checkpoint like a torch run's:

- ``state/``: the train state (parameters and optax AdamW state) as orbax's
  ``StandardCheckpointer`` writes a pytree of ``jax.Array``: every process writes the shards
  its devices hold, process 0 the tree's metadata; a restore lays each array out by the
  sharding asked for (:func:`load`), so no process ever holds the whole state;
- ``meta.json``: step reached, attempt, world size (devices), config and fingerprint
  (:func:`vitfsdp.checkpoint.write_meta`), and ``state_layout`` (:data:`STATE_LAYOUT`).

A checkpoint saved before the padded layout (no ``state_layout``) whose arrays have other
shapes than this code stores is refused with a ValueError naming the fix (:func:`load`),
not padded on load: the resumed attempt would measure another layout than the windows
before it, in one run's records.

No RNG file: the JAX step draws no random numbers (no dropout, no drop-path), and the data
position is the step, as for torch. A save goes into ``run_dir/.checkpoint.tmp/`` and is
renamed to ``checkpoint/`` by process 0 once every process has written
(:func:`vitfsdp.checkpoint.swap_in`). The directory must be shared by all processes.
"""

from __future__ import annotations

import json
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
#: How the saved arrays are laid out, meta.json's ``state_layout``: 2, a parameter (and its
#: AdamW moments) with no dimension the shard group divides is stored flat and zero-padded
#: (:func:`vitfsdp.jax.sharding.stored_shape`); absent (saved before it): stored whole.
STATE_LAYOUT = 2


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
        checkpoint.write_meta(tmp, step, attempt, cfg, jax.device_count(),
                              state_layout=STATE_LAYOUT)
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
        ValueError: a saved array's shape is not the one ``target`` asks for (one line naming
            an array and the fix), checked on every process before any array is read; a
            checkpoint without ``state_layout`` in meta.json was saved before the padded
            layout (:data:`STATE_LAYOUT`).
    """
    ckpt = Path(run_dir).absolute() / checkpoint.CHECKPOINT_DIR
    path = ckpt / STATE_DIR
    if not path.is_dir():
        raise FileNotFoundError(f"no JAX checkpoint state in {path}")
    with _quiet(), ocp.StandardCheckpointer() as ckptr:
        _check_shapes(ckpt, ckptr.metadata(path), target)
        return ckptr.restore(path, target)


def _check_shapes(ckpt: Path, metadata: Any, target: Any) -> None:
    """Raise the ValueError of :func:`load` if an array of the checkpoint in ``ckpt``
    (``metadata``: orbax's, of its state) has another shape than ``target``'s leaf of the
    same path; orbax's own error says only "Requested shape ... not compatible"."""
    saved = _shapes(getattr(metadata, "item_metadata", metadata))
    wanted = _shapes(target)
    differ = sorted((k for k in wanted if k in saved and saved[k] != wanted[k]),
                    key=lambda k: (k[0] != "params", k))  # a parameter named first
    if not differ:
        return
    key = differ[0]
    what = (f"{len(differ)} arrays differ, e.g. {'/'.join(key)}: saved {saved[key]}, "
            f"stored now as {wanted[key]}")
    meta = json.loads((ckpt / checkpoint.META_FILE).read_text(encoding="utf-8"))
    cause = ("was saved before the padded layout (parameters no dimension of which the shard "
             "group divides are now stored flat and zero-padded)"
             if "state_layout" not in meta else
             f"holds other shapes than this code stores (state_layout {meta['state_layout']})")
    raise ValueError(f"{ckpt} {cause}: {what}; remove that folder to start the run afresh, "
                     "then run it again (a sweep: again with --rerun-failed)")


def _shapes(tree: Any) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Leaf path (dict keys, sequence indices, attribute names as strings) → shape."""
    return {tuple(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
                  for k in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


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
