"""Provenance for run.json (versions, git, Slurm ids, time) and the one logging setup."""

from __future__ import annotations

import datetime
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

#: Slurm variables recorded in run.json (ids and placement, nothing secret).
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
              "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_JOB_PARTITION", "SLURM_RESTART_COUNT")


def setup_logging(rank: int) -> None:
    """Configure logging once per process: INFO on rank 0, WARNING elsewhere, rank-tagged."""
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        force=True,
    )


def versions() -> dict:
    """Python, torch, timm, CUDA/ROCm and NCCL/RCCL versions (None where absent)."""
    import timm

    nccl = None
    if torch.cuda.is_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "cuda": torch.version.cuda,
        "rocm": getattr(torch.version, "hip", None),
        "nccl": nccl,
    }


def git_state() -> dict:
    """Commit and dirty flag of the vitfsdp checkout (None outside a git work tree)."""
    repo = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=repo, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(dirty.strip())}


def collect() -> dict:
    """The provenance part of run.json."""
    return {
        "versions": versions(),
        "git": git_state(),
        "slurm": {k: os.environ[k] for k in SLURM_VARS if k in os.environ},
        "command": sys.argv,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
