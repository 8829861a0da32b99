"""A full or read-only file system under a sweep: records never end in a truncated line, a
point's reason names ENOSPC / EROFS first, and the sweep itself says what happened in one line
and exits 1 instead of a traceback; the same command runs on once there is space.

The full disk is a small tmpfs (root only, as the virtual cluster and the demo's network).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import read, run_module
from tests.integration.test_slurm_end_states import _point
from tests.integration.test_sweep import FAST
from vitfsdp.launch import status
from vitfsdp.launch.status import SlurmJob
from vitfsdp.records import append_jsonl, disk_error


@pytest.fixture
def small_fs(tmp_path):
    """A tmpfs of 128 KiB at ``tmp_path/fs`` (unmounted after); skips where mount is refused."""
    where = tmp_path / "fs"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs",
                                            str(where)], capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_append_jsonl_leaves_no_truncated_line_on_a_full_disk(small_fs):
    path = small_fs / "metrics.jsonl"
    append_jsonl(path, {"step": 1})
    (small_fs / "filler").write_bytes(b"x" * 100_000)  # leaves some 20 KiB
    with pytest.raises(OSError) as e:
        for step in range(2, 100):
            append_jsonl(path, {"step": step, "pad": "y" * 3000})  # fails part-way at last
    assert e.value.errno == errno.ENOSPC
    text = path.read_text()
    assert text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]  # every line whole
    assert [r["step"] for r in rows] == list(range(1, step))


@pytest.mark.parametrize("error,expected", [
    (OSError(errno.ENOSPC, "No space left on device", "r/metrics.jsonl"),
     "ENOSPC: [Errno 28] No space left on device: 'r/metrics.jsonl'"),
    (OSError(errno.EROFS, "Read-only file system", "/r/run.json"),
     "EROFS: [Errno 30] Read-only file system: '/r/run.json'"),
    ("step 3\nOSError: [Errno 122] Disk quota exceeded: '/r/x'\nError executing job",
     "EDQUOT: [Errno 122] Disk quota exceeded: '/r/x'"),
    (OSError(errno.ENOENT, "No such file or directory", "x"), None),
    ("RuntimeError: [Errno 2] No such file", None)])
def test_disk_error_names_the_file_system_error(error, expected):
    assert disk_error(error) == expected


def test_a_job_that_died_of_a_full_disk_says_enospc_first(tmp_path):
    """Slurm's path: a job ended without a summary, its task log ends in the ranks' own
    lines after the OSError; the reason's first line names ENOSPC (it said 'rank 0 recorded
    nothing' and ENOSPC only in the tail)."""
    run_dir = _point(tmp_path, None)
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "task0.log").write_text(
        "OSError: [Errno 28] No space left on device: 'run/metrics.jsonl'\n"
        "run ended failed: rank 0 recorded nothing; here: RuntimeError: Connection closed\n")
    row = status.read_state(run_dir)
    row.job = row.own = SlurmJob("FAILED", exit_code="1:0", elapsed_s=40, time_limit_s=600)
    row.state = "FAILED"
    assert status.reconcile(row)
    first = read(run_dir / "summary.json")["reason"].splitlines()[0]
    assert first.startswith("ENOSPC: [Errno 28] No space left on device: 'run/metrics.jsonl'; "
                            "Slurm job 8 ended FAILED"), first


def test_a_local_sweep_survives_a_full_disk_and_runs_on_once_there_is_space(small_fs):
    args = ["-m", *FAST, "train.steps=300", f"hydra.sweep.dir={small_fs}/s"]
    proc = run_module("vitfsdp.sweep", *args, cwd=small_fs.parent, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: the sweep could not write its records (ENOSPC: [Errno 28] "
                           "No space left on device"), line
    assert "Traceback" not in proc.stdout + proc.stderr
    (run_dir,) = (small_fs / "s").glob("0_*")
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # no truncated line
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_fs)], check=True)
    proc = run_module("vitfsdp.sweep", *args, cwd=small_fs.parent, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert read(run_dir / "summary.json")["status"] == "completed"


def test_status_on_a_full_disk_says_so_in_one_line(small_fs):
    """--status records the end Slurm reports; on a full disk it says it could not."""
    run_dir = _point(small_fs, None)
    try:
        with open(small_fs / "filler", "wb") as f:
            while True:
                f.write(b"x" * 4096)
                f.flush()
    except OSError:  # full
        pass
    script = ("import sys; from vitfsdp import sweep; from vitfsdp.launch import status; "
              "from vitfsdp.launch.status import SlurmJob; "
              "status.queue_states = lambda ids: {'8': SlurmJob('FAILED', exit_code='1:0', "
              "elapsed_s=5, time_limit_s=600)}; "
              "sys.exit(sweep.main_cli(['--status', sys.argv[1]]))")
    proc = subprocess.run([sys.executable, "-c", script, str(small_fs)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --status could not record what Slurm says (ENOSPC"), line
    assert (run_dir / "job.json").exists()
