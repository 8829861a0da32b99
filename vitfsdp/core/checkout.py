"""Which commit a git checkout is at: one rule for run.json's provenance and for setup.py;
and, for a copy of a checkout without ``.git`` (what a GPU node without network receives), a
manifest of HEAD's files that tells the copy's commit and whether it differs.

Standard library only, and no import from the rest of the package: setup.py loads this file by
its path, in pip's isolated build environment, before vitfsdp or its dependencies can be
imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

#: The file in the built package where setup.py records the commit of the checkout a
#: ``pip install .`` or ``pip wheel .`` ran in (``{"commit": str, "dirty": bool}``).
BUILD_RECORD = "_build_commit.json"
#: Where ``make gpu-wheels`` writes :func:`head_manifest` of a checkout, relative to its top:
#: it travels with the wheels to a node that receives the work tree without ``.git``, where
#: setup.py's build takes the commit from it (:func:`source_state`).
MANIFEST = ".whl/checkout.json"


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


def head_manifest(top: Path) -> dict | None:
    """``{"commit": str, "blobs": {path: object id}}``: every file of HEAD in the git work tree
    whose top is ``top`` (paths relative to it, ``/``-separated; submodules left out).

    Written next to a copy of the work tree that travels without ``.git``, it lets
    :func:`manifest_state` tell which commit the copy is and whether it differs. ``None``
    where :func:`checkout_state` gives ``None``. Raises nothing.
    """
    top = Path(top).resolve()
    state = checkout_state(top)
    if state is None:
        return None
    try:
        listing = subprocess.run(["git", "ls-tree", "-r", "-z", "HEAD"], cwd=top,
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError, ValueError):  # ValueError: a path not UTF-8
        return None
    blobs = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        _mode, kind, object_id = meta.split()
        if kind == "blob":
            blobs[path] = object_id
    return {"commit": state["commit"], "blobs": blobs}


def manifest_state(top: Path, manifest: object) -> dict | None:
    """``{"commit": str, "dirty": bool}`` of a copy of a work tree at ``top`` (with or without
    ``.git``), against :func:`head_manifest` of the checkout it was copied from.

    ``dirty``: a file of the manifest is missing from the copy or its content differs, hashed
    as git hashes a blob (``sha1("blob <size>\\0" + content)``, or SHA-256 for a SHA-256
    repository; a symbolic link hashes its target). Files the manifest does not list do not
    count, as untracked files do not for :func:`checkout_state`. ``manifest`` is any JSON
    value, as ``json.loads`` gives it; ``None`` where it is not a manifest. Raises nothing.
    """
    if not isinstance(manifest, dict):
        return None
    commit, blobs = manifest.get("commit"), manifest.get("blobs")
    if not isinstance(commit, str) or not isinstance(blobs, dict):
        return None
    algorithm = hashlib.sha256 if len(commit) == 64 else hashlib.sha1
    dirty = any(_object_id(Path(top) / path, algorithm) != object_id
                for path, object_id in blobs.items())
    return {"commit": commit, "dirty": dirty}


def source_state(top: Path) -> dict | None:
    """``{"commit": str, "dirty": bool}`` of the source at ``top``, for setup.py's build record:
    :func:`checkout_state` where ``top`` is a checkout, else :func:`manifest_state` against
    the manifest at ``top / MANIFEST`` (a copy without ``.git`` that carries one), else
    ``None``. Raises nothing."""
    state = checkout_state(top)
    if state is not None:
        return state
    try:
        manifest = json.loads((Path(top) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest_state(top, manifest)


def _object_id(file: Path, algorithm) -> str | None:
    """Git's object id of ``file`` as a blob (a symbolic link: of its target), ``None`` where
    it cannot be read."""
    try:
        data = os.fsencode(os.readlink(file)) if file.is_symlink() else file.read_bytes()
    except (OSError, ValueError):  # ValueError: a path holding NUL, as a corrupt manifest may
        return None
    return algorithm(b"blob %d\0" % len(data) + data).hexdigest()
