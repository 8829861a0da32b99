"""The run core's file primitives: the one atomic write (vitfsdp.core.atomic) and the one lock
helper (vitfsdp.core.locks), and the one config hash (vitfsdp.core.identity)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from vitfsdp.core import atomic, confighash
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


# --- the config hash -----------------------------------------------------------------------

#: The two hashes as they were before they were merged (launch/resume.py's config_hash with
#: WATCH_ONLY and ADDED_EMPTY, checkpoint.py's fingerprint with NEUTRAL_TRAIN_KEYS): the
#: merged one must give the same values, so that earlier sweeps resume and checkpoints load.
_OLD_WATCH_ONLY = ("poll_s", "array", "array_parallelism", "max_jobs", "max_requeues",
                   "peak_tflops", "plan_efficiency", "intra_node_gbps", "inter_node_gbps",
                   "price_per_node_hour", "memory_gbps", "collective_latency_us",
                   "intra_node_latency_us", "inter_node_latency_us", "time", "queue_limits")


#: Plan fields and checks added since, which the old hash never saw.
_ADDED_PLAN_FIELDS = ("package_gpus", "intra_package_gbps", "torch_build", "small_paths",
                      "max_queued_jobs", "checkpoint_write_gbps")


def _old_point_hash(cfg) -> str:
    d = dataclasses.asdict(cfg)
    for key in (*_OLD_WATCH_ONLY, *_ADDED_PLAN_FIELDS):
        d["cluster"].pop(key, None)
    if not d["cluster"].get("single_node_env"):
        d["cluster"].pop("single_node_env", None)
    # split out of sbatch_args since: the old hash saw them in one list
    d["cluster"]["sbatch_args"] = [*d["cluster"].pop("site_sbatch_args"),
                                   *d["cluster"]["sbatch_args"]]
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _old_fingerprint(cfg) -> tuple[str, dict]:
    d = dataclasses.asdict(cfg)
    d["cluster"] = {"gpus_per_node": d["cluster"]["gpus_per_node"]}
    d.pop("dry_run", None)
    for key in ("checkpoint_every", "timeout_s", "memory_limit_gib"):
        d["train"].pop(key, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16], d


def _configs():
    from vitfsdp.config import RunConfig

    plain = RunConfig()
    changed = RunConfig()
    changed.cluster.single_node_env = {"NCCL_P2P_DISABLE": "1"}
    changed.cluster.site_sbatch_args = ["--mem=0"]  # hashed as the one list it was
    changed.cluster.plan_efficiency = 0.37
    changed.cluster.gpus_per_node = 4
    changed.train.checkpoint_every = 5
    changed.train.timeout_s = 60
    changed.dry_run = True
    return [plain, changed]


def test_the_merged_hash_gives_the_values_of_the_two_it_replaced():
    from vitfsdp.checkpoint import fingerprint
    from vitfsdp.launch.resume import config_hash

    for cfg in _configs():
        assert config_hash(cfg) == _old_point_hash(cfg)
        assert fingerprint(cfg) == _old_fingerprint(cfg)


def test_a_checkpoint_resumes_across_what_a_point_tells_apart():
    """The checkpoint's identity is the point's less its declared extension: the cadence,
    time-out, dry_run and the cluster beyond gpus_per_node change a point, not a checkpoint."""
    plain, changed = _configs()
    changed.cluster.gpus_per_node = plain.cluster.gpus_per_node
    assert confighash.config_digest(plain)[0] != confighash.config_digest(changed)[0]
    assert (confighash.config_digest(plain, "checkpoint")[0]
            == confighash.config_digest(changed, "checkpoint")[0])
    changed.train.lr = plain.train.lr * 2
    assert (confighash.config_digest(plain, "checkpoint")[0]
            != confighash.config_digest(changed, "checkpoint")[0])
    with pytest.raises(ValueError, match="scope"):
        confighash.config_digest(plain, "sweep")
