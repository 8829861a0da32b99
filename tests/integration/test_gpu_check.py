"""tools/gpu-check.sh in its quick CPU mode (``DEVICE=cpu CHECK_QUICK=1``), so the script a
lent GPU machine runs cannot rot between the sessions that have one: what one call returns
(at most 6 files), a step's row and tarball, a step stopped by its deadline, refusals."""

from __future__ import annotations

import csv
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "gpu-check.sh"


def gpu_check(tmp_path: Path, *steps: str, **env: str) -> subprocess.CompletedProcess:
    """Run the script's CPU mode with OUT and WORK below ``tmp_path``; no carried wheels
    (the installed vitfsdp is used, as on a node with network)."""
    env = {**os.environ, "DEVICE": "cpu", "CHECK_QUICK": "1", "OUT": str(tmp_path / "out"),
           "WORK": str(tmp_path / "work"), "SITE": str(tmp_path / "site"), **env}
    return subprocess.run(["bash", str(SCRIPT), *steps], env=env, capture_output=True,
                          text=True, timeout=300)


def steps_csv(out: Path) -> list[dict]:
    with open(out / "steps.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.skipif(not (REPO / "tools").is_dir(), reason="not a checkout")
def test_a_step_returns_its_row_its_tarball_and_the_provenance(tmp_path: Path) -> None:
    done = gpu_check(tmp_path, "test")
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["provenance.txt", "steps.csv",
                                                     "test.tar.gz"]
    (row,) = steps_csv(out)
    assert (row["step"], row["status"], row["device"]) == ("test", "ok", "cpu")
    with tarfile.open(out / "test.tar.gz") as tar:
        names = tar.getnames()
    assert {"test/test.log", "test/test-gpu.xml"} <= set(names)
    assert "device cpu, memory_gib null" in (out / "provenance.txt").read_text()


def test_a_step_past_its_deadline_is_stopped_and_still_packed(tmp_path: Path) -> None:
    # STEP_S=31: 30 s are kept for packing, so the bench is past its deadline at once
    done = gpu_check(tmp_path, "bench", STEP_S="31")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = steps_csv(tmp_path / "out")
    assert (row["step"], row["status"]) == ("bench", "deadline")
    assert "deadline: skipped" in done.stdout + done.stderr
    assert (tmp_path / "out" / "bench.tar.gz").stat().st_size > 0


@pytest.mark.parametrize(("steps", "message"), [
    (("bench", "nonsense"), "unknown step nonsense"),
    (("install",), "unknown step install"),
    (("test", "bench", "jax", "sweep", "profile"), "at most 4 steps a call"),
])
def test_refusals_come_before_anything_runs(tmp_path: Path, steps, message) -> None:
    done = gpu_check(tmp_path, *steps)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "out").exists()
