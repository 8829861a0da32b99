"""``make torch`` (run before ``make install`` and ``make demo``'s install): where torch or
torchvision is missing it installs both, from the PyTorch CPU index on a machine without
``nvidia-smi`` or ``rocm-smi``, and checks that they import together.

``PYTHON`` is a stand-in interpreter (a shell script) that logs its arguments, fails
``-c "import torch, torchvision"`` until its ``pip install`` ran (or, for a broken pair,
until a ``pip install --upgrade`` from pip's own index ran, or always), so no package is
downloaded; the Makefile and ``make`` are the real ones.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: The stand-in interpreter: "-c ..." succeeds once installed (unless BROKEN), "-m pip"
#: installs, and an upgrade without --index-url mends a pair BROKEN only on the CPU index's
#: side (CPU_ONLY_BROKEN); every call logged.
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$FAKE_DIR/calls"
case "$1" in
  -c) [ -f "$FAKE_DIR/installed" ] && [ ! -f "$FAKE_DIR/broken" ] ;;
  -m) touch "$FAKE_DIR/installed"
      case "$*" in
        *--index-url*) ;;
        *--upgrade*) [ -f "$FAKE_DIR/cpu_only_broken" ] && rm -f "$FAKE_DIR/broken" ;;
      esac ;;
esac
"""
#: Directories that hold what make's recipe runs (sh, echo, [), searched for GPU tools.
SYSTEM_PATH = "/usr/bin:/bin"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")


def _make_torch(tmp_path: Path, *, installed: bool = False, broken: bool = False,
                cpu_only_broken: bool = False, gpu_tool: str | None = None,
                index: str | None = None) -> tuple[subprocess.CompletedProcess, list]:  # fmt: skip
    """Run ``make torch`` with the stand-in ``PYTHON``; its result and the stand-in's calls."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    for name, wanted in (("installed", installed), ("broken", broken or cpu_only_broken),
                         ("cpu_only_broken", cpu_only_broken)):
        if wanted:
            (tmp_path / name).touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpu_tool:
        tool = bin_dir / gpu_tool
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    make = shutil.which("make")
    env = {"PATH": f"{bin_dir}:{SYSTEM_PATH}", "FAKE_DIR": str(tmp_path),
           "HOME": os.environ.get("HOME", str(tmp_path))}
    args = [make, "-s", "-C", str(REPO), "torch", f"PYTHON={python}"]
    if index is not None:
        args.append(f"TORCH_INDEX={index}")
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    calls_file = tmp_path / "calls"
    calls = calls_file.read_text().splitlines() if calls_file.is_file() else []
    return proc, calls


def _pip_calls(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip")]


@pytest.mark.skipif(any(shutil.which(t, path=SYSTEM_PATH) for t in ("nvidia-smi", "rocm-smi")),
                    reason="this machine has a GPU tool on the system PATH")
def test_no_gpu_and_no_torch_installs_both_from_the_cpu_index(tmp_path):
    proc, calls = _make_torch(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _pip_calls(calls) == [
        f"-m pip install --quiet --retries 2 torch torchvision --index-url {CPU_INDEX}"]
    assert calls[-1] == "-c import torch, torchvision"  # checked after installing
    assert f"TORCH_INDEX={CPU_INDEX}" in proc.stdout


@pytest.mark.parametrize("tool", ["nvidia-smi", "rocm-smi"])
def test_a_gpu_tool_leaves_torch_to_pips_own_index(tmp_path, tool):
    proc, calls = _make_torch(tmp_path, gpu_tool=tool)
    assert proc.returncode == 0, proc.stderr
    assert _pip_calls(calls) == []  # make install's pip install -e . resolves torch


def test_torch_that_imports_is_left_alone(tmp_path):
    proc, calls = _make_torch(tmp_path, installed=True)
    assert proc.returncode == 0, proc.stderr
    assert calls == ["-c import torch, torchvision"]


def test_an_index_named_on_the_command_line_is_used(tmp_path):
    proc, calls = _make_torch(tmp_path, gpu_tool="nvidia-smi", index="https://example.org/whl")
    assert proc.returncode == 0, proc.stderr
    assert _pip_calls(calls) == [
        "-m pip install --quiet --retries 2 torch torchvision --index-url https://example.org/whl"]


def test_a_pair_that_does_not_import_together_fails_naming_the_fix(tmp_path):
    proc, calls = _make_torch(tmp_path, broken=True, index=CPU_INDEX)
    assert proc.returncode != 0
    assert len(_pip_calls(calls)) == 1
    message = proc.stderr.strip().splitlines()[0]
    assert message.startswith(f"torch and torchvision from {CPU_INDEX} did not install, or "
                              "do not import together")
    assert "TORCH_INDEX=" in message


NO_GPU_TOOL = pytest.mark.skipif(
    any(shutil.which(t, path=SYSTEM_PATH) for t in ("nvidia-smi", "rocm-smi")),
    reason="this machine has a GPU tool on the system PATH")


@NO_GPU_TOOL
def test_the_default_cpu_index_without_a_working_pair_falls_back_to_pips_own_index(tmp_path):
    # what a mirror with a CPU torch and only CUDA torchvision wheels gives (seen: torch
    # 2.13.0+cpu beside torchvision 0.28.0, "operator torchvision::nms does not exist")
    proc, calls = _make_torch(tmp_path, cpu_only_broken=True)
    assert proc.returncode == 0, proc.stderr
    assert _pip_calls(calls) == [
        f"-m pip install --quiet --retries 2 torch torchvision --index-url {CPU_INDEX}",
        "-m pip install --quiet --upgrade torch torchvision"]
    assert calls[-1] == "-c import torch, torchvision"  # the fallback's pair checked too
    assert "pip's own index instead" in proc.stdout


@NO_GPU_TOOL
def test_a_fallback_that_does_not_import_either_fails_naming_the_fix(tmp_path):
    proc, calls = _make_torch(tmp_path, broken=True)
    assert proc.returncode != 0
    assert len(_pip_calls(calls)) == 2
    assert any(line.startswith(f"torch and torchvision from {CPU_INDEX} did not install")
               for line in proc.stderr.splitlines())


def test_an_index_named_on_the_command_line_does_not_fall_back(tmp_path):
    # the broken-pair test above names the CPU index itself: one pip call, then the error
    proc, calls = _make_torch(tmp_path, cpu_only_broken=True, index=CPU_INDEX)
    assert proc.returncode != 0
    assert _pip_calls(calls) == [
        f"-m pip install --quiet --retries 2 torch torchvision --index-url {CPU_INDEX}"]
