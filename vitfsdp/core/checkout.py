"""Which commit a git checkout is at: one rule for run.json's provenance and for setup.py.

Standard library only, and no import from the rest of the package: setup.py loads this file by
its path, in pip's isolated build environment, before vitfsdp or its dependencies can be
imported.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

#: The file in the built package where setup.py records the commit of the checkout a
#: ``pip install .`` or ``pip wheel .`` ran in (``{"commit": str, "dirty": bool}``).
BUILD_RECORD = "_build_commit.json"


def checkout_state(top: Path) -> dict | None:
    """``{"commit": str, "dirty": bool}`` of the git work tree whose top is ``top``.

    ``dirty``: a tracked file differs from HEAD (untracked files do not count). ``None`` where
    ``top`` is not the top of a work tree (a folder inside some other repository, a copy
    without ``.git``, an sdist) or git is missing or fails: a commit is reported only for the
    checkout the code itself is, never for a repository it merely sits in. Raises nothing.
    """
    top = Path(top).resolve()
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel", "HEAD"], cwd=top,
                             capture_output=True, text=True, timeout=10, check=True).stdout
        top_level, commit = out.split()
        if Path(top_level).resolve() != top:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=top, capture_output=True, text=True, timeout=10,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}
