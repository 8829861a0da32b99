"""A hung rank: the reason names it, and it leaves once rank 0 has recorded the failure.

Under a bare ``srun`` step (launch_mode=srun) no agent kills the other ranks when one exits,
so a rank whose main thread hangs would keep the job until its time limit; its watcher thread
ends it once rank 0's verdict is on the board. Ranks here are started as srun starts them:
one process each, no torchrun.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.conftest import read
from vitfsdp import failures

TINY = ["model=vit_tiny", "device=cpu", "train.local_batch_size=4", "train.steps=6",
        "train.warmup_steps=1", "train.log_every=1", "nodes=1", "cluster.gpus_per_node=2"]


def _report(rank: int, kind: str, last_step: int = 2) -> failures.Report:
    return failures.Report(rank, kind, f"RuntimeError: {kind}", "", last_step, {})


def test_a_blocked_rank_is_named_as_the_likely_cause_of_a_timeout():
    """hang:1:3: rank 0's collective timed out, rank 1 (hung) reported only ``blocked``; the
    reason read "collective timed out on rank 0 (ranks 0)". Rank 1 comes first now."""
    status, reason = failures.verdict([_report(0, "timeout"), _report(1, "blocked")], 2)
    assert status == "timeout"
    assert reason.startswith("rank 1 blocked with no error at step 3 (the likely cause); "
                             "collective timed out on rank 0 (ranks 0) at step 3"), reason
    status, reason = failures.verdict([_report(0, "blocked"), _report(1, "timeout")], 2)
    assert status == "timeout" and reason.startswith("rank 0 blocked with no error"), reason
    status, reason = failures.verdict(
        [_report(0, "peer"), _report(1, "blocked"), _report(2, "blocked")], 3)
    assert status == "failed"
    assert reason.startswith("ranks 1, 2 blocked with no error at step 3 (the likely cause); "
                             "collective broke on rank 0"), reason


def test_a_blocked_rank_does_not_hide_the_real_cause():
    """A rank's own error, or a rank that died (no report), stays the cause."""
    status, reason = failures.verdict([_report(0, "blocked"), _report(1, "oom")], 2)
    assert status == "oom" and reason.startswith("out of memory on rank 1"), reason
    status, reason = failures.verdict([_report(0, "timeout"), _report(1, "blocked")], 3)
    assert reason.startswith("ranks [2] sent no report"), reason
    status, reason = failures.verdict([_report(0, "blocked")], 1)
    assert status == "failed" and reason.startswith("blocked on rank 0"), reason


def test_ranks_behind_with_no_progress_are_a_stall():
    """find_stall reads the heartbeats (beats:marks:step:idle): rank 1 has fewer marks and
    nobody marked progress for 16 s > 15 s: a stall naming rank 1; not when every rank is
    at the same mark (one long collective or checkpoint), when some rank marked progress
    within stall_s, or when a rank has not posted yet."""
    beats = {0: "40:5:3:16.2", 1: "41:4:2:30.0", 2: "39:5:3:17.0"}
    stall = failures.find_stall(beats, 3, stall_s=15)
    assert stall == failures.Stall([1], 2, [0, 2], 3, 16.2)
    assert stall.text(10).startswith("rank 1 made no progress for 16 s (more than "
                                     "train.timeout_s=10): stopped after step 2 while ranks "
                                     "0, 2 waited at step 3")
    assert failures.find_stall({0: "40:5:3:16", 1: "41:5:3:30"}, 2, 15) is None
    assert failures.find_stall({0: "40:5:3:14", 1: "41:4:2:30"}, 2, 15) is None
    assert failures.find_stall({0: "40:5:3:16"}, 2, 15) is None


def test_a_stall_is_a_timeout_unless_a_rank_raised():
    """Rank 0's ``stalled`` report decides (timeout, its text) over the ``blocked`` ones;
    a rank's own error stays the cause."""
    stalled = failures.Report(0, "stalled", "rank 1 made no progress for 16 s", "", 2, {})
    status, reason = failures.verdict([stalled, _report(1, "blocked")], 2)
    assert (status, reason) == ("timeout", "rank 1 made no progress for 16 s")
    status, reason = failures.verdict([stalled, _report(1, "error")], 2)
    assert status == "failed" and reason.startswith("raised on rank 1"), reason


def test_a_hung_rank_leaves_once_rank_0_recorded_the_timeout(tmp_path):
    """hang:1:3 with ranks started as srun starts them: rank 0's collective times out and
    it records ``timeout``; rank 1's main thread sleeps forever. Its watcher ends it with
    the failure's exit code (it ran until the job's time limit), with a line saying why."""
    run_dir = tmp_path / "run"
    port = 29500 + (os.getpid() + 7) % 2000
    argv = [sys.executable, "-m", "vitfsdp.train", *TINY, "train.timeout_s=8",
            f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    procs = [subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2",
                                   "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1",
                                   failures.FAULT_ENV: "hang:1:3"})
             for r in (0, 1)]
    try:
        t0 = time.monotonic()
        out0 = procs[0].communicate(timeout=150)[0]
        recorded = time.monotonic() - t0
        out1 = procs[1].communicate(timeout=60)[0]
        left = time.monotonic() - t0 - recorded
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    summary = read(run_dir / "summary.json")
    print(f"rank 1 left {left:.0f} s after rank 0\nreason {summary['reason']}\n{out1[-600:]}")
    assert procs[0].returncode == failures.EXIT_FAILED, out0[-2000:]
    assert procs[1].returncode == failures.EXIT_FAILED, out1[-2000:]
    assert summary["status"] == "timeout" and summary["reported_ranks"] == [0, 1]
    assert summary["reason"].startswith("rank 1 blocked with no error at step 3 (the likely "
                                        "cause); collective timed out on rank 0")
    assert "rank 1's main thread is still blocked at step 3" in out1
    assert "exiting with code 1" in out1
