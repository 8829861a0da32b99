"""A JAX run's failures are recorded by the torch trainer's failure board
(vitfsdp.failures.FailureBoard), so the record names the rank that failed: real 2-process JAX
CPU runs (jax.distributed, gloo), started as srun starts them (one process each, no torchrun
agent), with rank 1 killed by the test hook. Before, summary.json held rank 0's symptom
alone ("JaxRuntimeError: ... Gloo AllGather failed ... Connection reset by peer"), and rank 0
waited in jax.distributed's shutdown barrier until the coordination service aborted it,
106 s after the start (measured)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import NO_JAX

pytest.importorskip("jax", reason=NO_JAX)  # before the imports that need it

from tests.conftest import REPO, read
from tests.integration.test_jax_checkpoint import FAST_COMPILE
from vitfsdp import failures

RUN = ["framework=jax", "model=vit_tiny", "device=cpu", "nodes=1", "cluster.gpus_per_node=2",
       "train.steps=6", "train.warmup_steps=1", "train.log_every=1",
       "train.local_batch_size=4"]


def _srun_like(tmp_path, fault: str, timeout_s: int,
               raise_rank: int | None = None) -> tuple[list[int], str, float]:
    """Two ranks of a JAX run with ``fault`` (or, with ``raise_rank``, that rank's third
    window raising: jax_failure_worker.py), each its own process as under a bare srun;
    (exit codes, rank 0's output and then rank 1's, seconds)."""
    port = 29500 + os.getpid() % 2000
    entry = (["-m", "vitfsdp.train"] if raise_rank is None else
             [str(REPO / "tests" / "integration" / "jax_failure_worker.py")])
    argv = [sys.executable, *entry, *RUN, f"train.timeout_s={timeout_s}",
            f"hydra.run.dir={tmp_path / 'run'}", "hydra.output_subdir=null"]
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "XLA_FLAGS": FAST_COMPILE, "PYTHONUNBUFFERED": "1",
           failures.FAULT_ENV: fault, "RAISE_RANK": str(raise_rank)}
    t0 = time.monotonic()
    procs = [subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in (0, 1)]
    try:
        out = procs[0].communicate(timeout=240)[0]
        out += procs[1].communicate(timeout=30)[0]
    finally:
        for p in procs:
            p.kill()
    return [p.returncode for p in procs], out, time.monotonic() - t0


def _seconds_between(out: str, first: str, then: str) -> float:
    """Seconds between the log lines (``HH:MM:SS [rank N] ...``) holding ``first`` and
    ``then``."""
    def at(text: str) -> int:
        line = next(line for line in out.splitlines() if text in line)
        h, m, s = (int(x) for x in line.split()[0].split(":"))
        return h * 3600 + m * 60 + s

    return (at(then) - at(first)) % 86400


def test_a_killed_rank_is_named_in_the_record(tmp_path):
    """kill:1:3: rank 0's gloo collective breaks; it posts its report, waits the grace
    period for rank 1's, and records rank 1 as the silent one, the likely cause."""
    codes, out, seconds = _srun_like(tmp_path, "kill:1:3", timeout_s=60)
    summary = read(tmp_path / "run" / "summary.json")
    print(f"codes {codes} in {seconds:.0f} s\nreason {summary['reason'][:400]}")
    assert codes == [failures.EXIT_FAILED, -signal.SIGKILL], out[-3000:]
    assert summary["status"] == "failed" and summary["last_step"] == 2
    assert summary["reported_ranks"] == [0]
    assert summary["reason"].startswith("ranks [1] sent no report"), summary["reason"]
    assert "the likely cause; then collective broke on rank 0" in summary["reason"]
    assert summary["memory_at_failure"]["peak_rss_gib"] > 0
    assert "[rank 0] ERROR vitfsdp.failures: run ended failed: ranks [1]" in out
    assert seconds < 90  # left at once, not at the coordination service's abort


def test_rank_0_blocked_records_a_peer_that_stopped_beating(tmp_path):
    """kill:1:3 with rank 0 blocked (hang:0:3), as over NCCL, where a collective does not
    error when a peer dies: no error reaches rank 0's main thread; its watcher sees rank 1's
    heartbeat stop (10 s: half of train.timeout_s=20) and records the run."""
    codes, out, seconds = _srun_like(tmp_path, "kill:1:3,hang:0:3", timeout_s=20)
    summary = read(tmp_path / "run" / "summary.json")
    print(f"codes {codes} in {seconds:.0f} s\nreason {summary['reason'][:400]}")
    assert codes == [failures.EXIT_FAILED, -signal.SIGKILL], out[-3000:]
    assert summary["status"] == "failed" and summary["last_step"] == 2
    assert summary["reason"].startswith("ranks [1] stopped responding (no heartbeat for 10 s")
    assert "ranks [1] sent no report" in summary["reason"]


def test_a_hung_rank_ends_the_run_at_the_timeout(tmp_path):
    """hang:1:3: rank 1's main thread sleeps at the start of step 3 and keeps beating; rank
    0 waits in its gloo collective, which XLA does not time out at train.timeout_s (it
    waited 160 s past a 20 s timeout, measured). Rank 0's watcher sees rank 1 behind and no
    progress for train.timeout_s plus one check, records timeout naming rank 1, waits for
    rank 1 to read the verdict and leaves; rank 1's watcher ends it with code 1."""
    timeout_s = 8
    codes, out, seconds = _srun_like(tmp_path, "hang:1:3", timeout_s=timeout_s)
    summary = read(tmp_path / "run" / "summary.json")
    print(f"codes {codes} in {seconds:.0f} s\nreason {summary['reason'][:400]}")
    assert codes == [failures.EXIT_FAILED, failures.EXIT_FAILED], out[-3000:]
    assert summary["status"] == "timeout" and summary["last_step"] == 2
    assert summary["reported_ranks"] == [0, 1]
    reason = summary["reason"]
    assert reason.startswith("rank 1 made no progress for "), reason
    assert (f"(more than train.timeout_s={timeout_s}): stopped after step 2 while rank 0 "
            "waited at step 3") in reason
    # noticed at rank 0's first heartbeat check past stall_s (a beat may be a poll late)
    waited = float(reason.split("no progress for ")[1].split(" s")[0])
    assert timeout_s < waited <= failures.stall_s(timeout_s) + failures.HEARTBEAT_CHECK_S + 3
    # recorded after that within the reports' grace period (rank 1's watcher posts
    # ``blocked`` after half of it), with room for a loaded host: rank 0's log, step 2 to
    # the record; XLA's own timeout had not ended rank 0 160 s after a 20 s one (measured)
    ended = _seconds_between(out, "[rank 0] INFO vitfsdp.jax.train: step 2/6",
                             "[rank 0] ERROR vitfsdp.failures: run ended")
    print(f"recorded {ended:.0f} s after step 2")
    assert ended <= failures.stall_s(timeout_s) + failures.HEARTBEAT_CHECK_S + 2 * failures.GRACE_S
    assert "[rank 0] ERROR vitfsdp.failures: run ended timeout: rank 1 made no" in out
    assert "had not left" not in out  # rank 0 left after rank 1
    assert "[rank 1] ERROR vitfsdp.failures: run ended timeout: rank 1 made no" in out
    assert "rank 1's main thread is still blocked at step 3" in out


def test_a_rank_that_raises_is_named_while_rank_0_waits_for_it(tmp_path):
    """Rank 1's third window raises where rank 0 waits for it in the window's all-gather (no
    XLA communicator can be aborted from Python, so rank 0's collective does not break):
    rank 1 posts its report and waits; rank 0's watcher records it after the grace period,
    and leaves only once rank 1 has read the verdict and left: rank 1 ends with code 1 and
    the agreed status. Before, rank 0 left at once with JAX's coordination service and the
    board's store, and rank 1 logged "rank 0 recorded nothing" or was aborted (SIGABRT) by
    JAX's client."""
    codes, out, seconds = _srun_like(tmp_path, "", timeout_s=60, raise_rank=1)
    summary = read(tmp_path / "run" / "summary.json")
    print(f"codes {codes} in {seconds:.0f} s\nreason {summary['reason'][:400]}")
    assert codes[0] == failures.EXIT_FAILED, out[-3000:]
    assert codes[1] == failures.EXIT_FAILED, out[-3000:]
    assert "[rank 1] ERROR vitfsdp.failures: run ended failed: raised on rank 1" in out
    assert "rank 0 recorded nothing" not in out
    assert summary["status"] == "failed" and summary["last_step"] == 2
    assert summary["reported_ranks"] == [0, 1]
    assert summary["reason"].startswith(
        "raised on rank 1 (ranks 1) at step 3: ValueError: test: rank 1's third window raised")
