"""Other work during a JAX run's timed windows, as in torch runs: a real 2-process JAX CPU run
(the local launcher: torchrun, jax.distributed, gloo) beside a busy loop in another process
records ``host_other_cpus`` and ``host_own_cpus`` in every window of metrics.jsonl, and the
analysis judges the run over its windows (10% of the cores), not over the whole point (25%,
host.json). Before, the JAX meter recorded neither, and a JAX run with 0.42 of 2 cores busy
beside it passed as uncontended."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it

from tests.conftest import read, run_module
from tests.integration.test_jax_checkpoint import FAST_COMPILE
from vitfsdp.analysis import rows
from vitfsdp.core.throughput import competed

#: Windows of 5 steps (0.1-0.5 s here): /proc/stat counts whole ticks of 1/100 s.
RUN = ["framework=jax", "model=vit_tiny", "device=cpu", "nodes=1", "cluster.gpus_per_node=2",
       "train.steps=20", "train.warmup_steps=5", "train.log_every=5",
       "train.local_batch_size=4"]


def test_a_busy_loop_beside_a_jax_run_is_counted_in_every_window(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", FAST_COMPILE)
    # a sibling of the run, not its descendant: other work, not the ranks' own
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc = run_module("vitfsdp.train", *RUN, f"hydra.run.dir={tmp_path / 'run'}",
                          cwd=tmp_path, timeout=400)
    finally:
        loop.kill()
        loop.wait()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    windows = read(tmp_path / "run" / "metrics.jsonl")
    measured = [w for w in windows if not w["warmup"]]
    print("other, own cores per window:",
          [(w["host_other_cpus"], w["host_own_cpus"]) for w in windows])
    assert len(measured) == 3
    for w in windows:  # every window, warm-up included, has the torch meter's fields
        assert w["host_own_cpus"] > 0
    # the loop held up to a core of 2 against 2 ranks; the host's other users only add
    assert all(w["host_other_cpus"] >= 0.25 for w in measured)
    run = read(tmp_path / "run" / "run.json")
    judged = rows._other_work(tmp_path / "run", windows)
    assert judged["host_other_windows"] is True  # not host.json's whole point
    assert competed(judged["host_other_cpus"], run["device"]["host_cpus"], over_windows=True)
    assert run["device"]["host_cpus"] == os.cpu_count()
