"""A lock on a file: the one lock helper every module uses (filelock's locks).

:func:`locked` holds one of filelock's two kinds, chosen by what the caller needs:

- ``shared_fs=False``: :class:`filelock.FileLock` (``flock(2)`` on the open file). The
  kernel drops it when the holder dies, however it dies (kill -9 and a lost node's
  processes included), so it is never left stale; but ``flock`` may not reach across the
  nodes of a shared cluster file system (Lustre mounted without ``flock``, some NFS
  setups): it keeps out the processes of one host, e.g. two sweeps started from one login
  node (:class:`vitfsdp.launch.resume.SweepLock`). The holder's host and pid are written
  into the file once it is held.
- ``shared_fs=True``: :class:`filelock.SoftFileLock` (the lock file created exclusively,
  holding the holder's pid and host). It holds across the nodes of a shared file system
  wherever files can be created, e.g. the probe steps of packs on several nodes merging
  into one probe file (:func:`vitfsdp.probe.__main__.merge_world`). The trade: a holder
  killed with kill -9 leaves the file behind, and the next one waits its timeout (filelock
  removes one whose holder on the same host is gone; else remove it by hand).

:func:`lock_holder` reads who holds either kind, for a refusal's message.

Standard library and filelock (a declared dependency, torch's own; imported where a lock
is taken) only.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from vitfsdp.core.atomic import default_file_mode

if TYPE_CHECKING:
    from filelock import BaseFileLock


@contextmanager
def locked(path: str | os.PathLike, *, shared_fs: bool = False,
           timeout: float = -1) -> Iterator[BaseFileLock]:
    """Hold a lock on the file ``path`` (created where missing; left in place after release)
    for the ``with`` block: the one lock helper.

    Args:
        shared_fs: True: a soft lock that holds across the nodes of a shared file system,
            left stale by a holder killed with kill -9; False: an ``flock``, dropped by the
            kernel whenever the holder dies (module docstring). Either way the file names
            its holder (:func:`lock_holder`).
        timeout: seconds to wait for the lock (0: one attempt, never waits; -1: for ever).

    Raises:
        TimeoutError: (:class:`filelock.Timeout`) another process held it for ``timeout``.
        OSError: the file cannot be made or opened, or (``shared_fs=False``) its file system
            has no ``flock``.
    """
    # filelock takes 0.1 s to import: only where a lock is taken
    from filelock import FileLock, SoftFileLock

    # held by the process, not a thread (as flock is): any thread may release it
    if shared_fs:
        lock: BaseFileLock = SoftFileLock(str(path), timeout=timeout, thread_local=False)
    else:
        # the permissions os.open(path, ..., 0o644) gives: read-write for the owner, read
        # for the others as the umask allows; no soft fallback (it would outlive a kill -9)
        lock = FileLock(str(path), timeout=timeout, mode=default_file_mode() & 0o644,
                        thread_local=False, fallback_to_soft=False)
    with lock:
        if not shared_fs:  # filelock truncated it once held; a contender leaves it so
            Path(path).write_text(f"host {socket.gethostname()} pid {os.getpid()}",
                                  encoding="utf-8")
        yield lock


def lock_holder(path: str | os.PathLike) -> str | None:
    """Who holds (or last held) the lock file ``path``: ``host <name> pid <pid>``, from
    either kind of :func:`locked`; None where the file is missing, empty or unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    lines = text.splitlines()
    if len(lines) >= 2 and lines[0].isdigit():  # a soft lock's: pid, host[, start token]
        return f"host {lines[1]} pid {lines[0]}"
    return text[:200] or None
