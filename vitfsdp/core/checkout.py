"""Which commit a git checkout is at, and whether it differs: run.json's provenance for the
package run from a checkout (an editable install). An installed package takes both from the
version setuptools-scm wrote into it at its build (``vitfsdp.provenance.git_state``).

Standard library only.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


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
