"""Shared helpers: run the package's entry points as real subprocesses."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Why a JAX test is skipped: JAX, Flax, Optax and Orbax are the ``jax`` extra.
NO_JAX = "JAX is not installed: pip install -e '.[jax]' (make install pulls it with dev)"
#: Marks a test that runs the JAX variant: skipped with :data:`NO_JAX` where JAX is absent.
requires_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason=NO_JAX)



@pytest.fixture(autouse=True, scope="session")
def _absl_handler_keeps_pytests_stderr():
    """absl (imported with Flax) makes its handler at import, on the ``sys.stderr`` of that
    moment: pytest's capture file where a test imports Flax. Hydra's logging setup (a sweep
    run in-process, e.g. test_progress_stall_floor) closes every handler, and absl's closes
    its stream where it is no longer ``sys.stderr`` (capsys's by then): pytest's own capture
    file, so the next read fails with 'I/O operation on closed file' in whichever test of the
    worker comes next. Pointed at ``sys.__stderr__``, which absl never closes; the handler is
    on no logger, so nothing is written through it."""
    if importlib.util.find_spec("absl") is not None:
        from absl import logging as absl_logging  # the jax extra's; absent without it

        absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
    yield


#: Overrides that make a training run take seconds on two CPU cores.
TINY = ["model=vit_tiny", "train.steps=4", "train.warmup_steps=1", "train.log_every=2",
        "train.local_batch_size=4", "device=cpu"]


def run_module(module: str, *args: str, cwd: Path,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m module args...`` in ``cwd``; output captured as text."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def read(path: Path):
    """A JSON file, or a JSON-lines file as a list."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def saved_for_backward_bytes(block, x, autocast_dtype=None) -> int:
    """Bytes autograd saves for backward in one forward of ``block`` on ``x`` (saved-tensor
    hooks, each storage once), leaving out the parameters and, under autocast
    (``autocast_dtype``, on ``x``'s device type), their low-precision copies: tensors shaped
    as a parameter or its transpose (the plan counts that weight cache apart)."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    shapes = {tuple(p.shape) for p in block.parameters()}
    shapes |= {s[::-1] for s in shapes}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        cast = autocast_dtype is not None and tuple(t.shape) in shapes
        if storage.data_ptr() not in params and not cast:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(x.device.type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            block(x)
    return sum(seen.values())


@pytest.fixture
def tiny() -> list[str]:
    return list(TINY)


#: Test files that take minutes (real trainings, Slurm jobs), longest first. ``make test``
#: runs them first (``--dist loadfile --no-loadscope-reorder``): a worker that starts a long
#: file near the end of the run would keep the run going alone; started first, the short
#: files fill in behind them. Files not named here keep pytest's order, after these. The
#: order is a full suite's measured seconds a file (2 workers, 2 cores): test_jax_sharding.py
#: and test_memory.py (about 200 s each) were missing and started in the last quarter.
LONGEST_FIRST = (
    "test_slurm_sweep.py", "test_sweep.py", "test_parity.py", "test_jax_launch.py",
    "test_probe.py", "test_plan.py", "test_kernels.py", "test_failures.py",
    "test_slurm_pack.py", "test_jax_sharding.py", "test_memory.py", "test_jax_checkpoint.py",
    "test_disk_full.py", "test_ctrl_c.py", "test_bad_input.py", "test_slurm_end_states.py",
    "test_checkpoint.py", "test_jax_model.py", "test_analysis_scale.py", "test_install.py",
    "test_batch_search.py", "test_bad_input_site.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Items of the files in :data:`LONGEST_FIRST` first, in its order (stable otherwise)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
