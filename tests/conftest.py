"""Shared helpers: run the package's entry points as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

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


@pytest.fixture
def tiny() -> list[str]:
    return list(TINY)
