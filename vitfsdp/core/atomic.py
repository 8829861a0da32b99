"""A file written whole or not at all: the one atomic write every module uses.

:func:`write_atomic` writes to a temporary file of a unique name in the target's own folder
(``.<name>.<random>.tmp``: the same file system, so the rename is atomic; two writers never
share a temporary file) and renames it over the target with ``os.replace``: a reader sees
the old file or the new one, never half of one. Where the write fails (a full disk, an
exception while writing) the temporary file is removed and the target is left as it was.

Standard library only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def default_file_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the process's umask (read from
    /proc/self/status, else by setting and restoring it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str | os.PathLike, data: str | bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` (text as UTF-8, or bytes) through a temporary file of
    the same folder and ``os.replace``. The file has ``mode`` from its first byte (None:
    :func:`default_file_mode`, as ``open()`` would give it: teammates on a shared project
    directory read it as the umask allows).

    Raises:
        OSError: the folder is missing or not writable, or the write failed (the temporary
            file is removed, ``path`` is as it was).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp creates it 0600
            os.fchmod(f.fileno(), default_file_mode() if mode is None else mode)
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
