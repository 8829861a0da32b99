"""The run core's file primitives: the one atomic write (vitfsdp.core.atomic) and the one lock
helper (vitfsdp.core.locks), and the one config hash (vitfsdp.core.identity)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from vitfsdp.core import atomic
from vitfsdp.core.locks import lock_holder, locked

# --- atomic writes -------------------------------------------------------------------------


def test_write_atomic_writes_text_and_bytes_with_the_umask_mode(tmp_path):
    path = tmp_path / "x.txt"
    atomic.write_atomic(path, "é\n")
    assert path.read_bytes() == "é\n".encode()
    assert path.stat().st_mode & 0o777 == atomic.default_file_mode()
    atomic.write_atomic(path, b"\x00\x01", mode=0o600)
    assert path.read_bytes() == b"\x00\x01" and path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_a_failed_atomic_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("old")
    with pytest.raises(TypeError):
        atomic.write_atomic(path, 5)  # fails while writing
    with pytest.raises(OSError):
        atomic.write_atomic(tmp_path, "x")  # fails at the rename: a directory is there
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_atomic_temporaries_have_unique_names_in_the_target_folder(tmp_path, monkeypatch):
    """Two writers of one file never share a temporary (provenance's used to be fixed)."""
    seen = []
    replace = os.replace

    def spy(src, dst):
        seen.append(src)
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", spy)
    for text in ("a", "b"):
        atomic.write_atomic(tmp_path / "f.yaml", text)
    assert len(set(seen)) == 2
    assert all(os.path.dirname(s) == str(tmp_path) for s in seen)
    assert all(os.path.basename(s).startswith(".f.yaml.") for s in seen)


# --- locks ---------------------------------------------------------------------------------

#: A process that holds ``argv[1]`` (shared_fs from argv[2]) until killed, after one line.
HOLDER = textwrap.dedent("""
    import sys, time
    from vitfsdp.core.locks import locked
    with locked(sys.argv[1], shared_fs=sys.argv[2] == "1"):
        print("held", flush=True)
        time.sleep(300)
""")


def _hold(path, shared_fs: bool) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(int(shared_fs))],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_an_flock_is_refused_at_once_names_its_holder_and_dies_with_it(tmp_path):
    path = tmp_path / ".sweep.lock"
    proc = _hold(path, shared_fs=False)
    try:
        assert lock_holder(path) == f"host {socket.gethostname()} pid {proc.pid}"
        with pytest.raises(TimeoutError), locked(path, timeout=0):
            pass
        assert lock_holder(path) == f"host {socket.gethostname()} pid {proc.pid}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with locked(path, timeout=0):  # the kernel dropped it with the killed holder
        assert lock_holder(path) == f"host {socket.gethostname()} pid {os.getpid()}"
    assert path.exists()  # left in place


def test_a_soft_lock_names_its_holder_and_is_left_stale_by_kill_9(tmp_path):
    path = tmp_path / "probe.json.lock"
    proc = _hold(path, shared_fs=True)
    try:
        assert lock_holder(path) == f"host {socket.gethostname()} pid {proc.pid}"
        with pytest.raises(TimeoutError), locked(path, shared_fs=True, timeout=0):
            pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert path.exists()  # the trade of a lock that holds across nodes
    with locked(path, shared_fs=True, timeout=5):  # filelock breaks this host's dead holder's
        pass
    assert not path.exists()


def test_lock_holder_of_no_file_is_none(tmp_path):
    assert lock_holder(tmp_path / "missing.lock") is None
