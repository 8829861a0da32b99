"""Failures are data: a model that does not fit, a rank killed with SIGKILL and a rank that
hangs each end the run on every rank, without a hang beyond the timeout, with the right status,
the last step and (OOM) the memory at failure in summary.json.

Real processes, real faults: the OOM comes from a memory limit on the ranks
(``train.memory_limit_gib``, RLIMIT_DATA), the kill and the hang from the test hook
``VITFSDP_TEST_FAULT`` (the rank sends itself SIGKILL, or sleeps).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import read
from vitfsdp import failures
from vitfsdp.core.layout import EXIT_PREEMPTED
from vitfsdp.launch.local import torchrun_command, torchrun_signal_env

TINY = ["model=vit_tiny", "device=cpu", "train.local_batch_size=4", "train.steps=6",
        "train.warmup_steps=1", "train.log_every=1", "nodes=1", "cluster.gpus_per_node=2"]


def _train(run_dir, overrides, fault=None, timeout=240):
    """torchrun with 2 ranks, as the local launcher starts a point; (exit code, output, s)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if fault:
        env[failures.FAULT_ENV] = fault
    t0 = time.monotonic()
    proc = subprocess.run(torchrun_command(overrides, run_dir, 2), cwd=run_dir.parent,
                          capture_output=True, text=True, timeout=timeout, env=env)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def test_model_that_does_not_fit_is_oom_on_every_rank(tmp_path):
    run_dir = tmp_path / "run"
    code, out, _ = _train(run_dir, ["model=vit_base", "device=cpu", "train.local_batch_size=1",
                                    "train.steps=3", "train.warmup_steps=1", "nodes=1",
                                    "cluster.gpus_per_node=2", "train.memory_limit_gib=0.4"])
    summary = read(run_dir / "summary.json")
    print("status", summary["status"], "last_step", summary["last_step"],
          "memory", summary["memory_at_failure"], "\nreason", summary["reason"].splitlines()[0])
    assert code != 0
    assert summary["status"] == "oom" and summary["ips"] is None
    assert summary["reported_ranks"] == [0, 1]
    assert summary["memory_at_failure"]["peak_rss_gib"] > 0
    assert "allocate" in summary["reason"]
    for rank in (0, 1):  # every rank ends with the agreed status, one line each
        assert f"[rank {rank}] ERROR vitfsdp.failures: run ended oom" in out
    assert "[rank0]: Traceback" not in out and "[rank1]: Traceback" not in out
    assert read(run_dir / "run.json")["status"] == "oom"


def test_killed_rank_fails_the_run_without_waiting_for_the_timeout(tmp_path):
    run_dir = tmp_path / "run"
    code, out, seconds = _train(run_dir, [*TINY, "train.timeout_s=120"], fault="kill:1:3")
    summary = read(run_dir / "summary.json")
    print(f"status {summary['status']} last_step {summary['last_step']} in {seconds:.0f} s"
          f"\nreason {summary['reason']}")
    assert code != 0 and seconds < 100  # the survivors did not wait out the 120 s timeout
    assert summary["status"] == "failed" and summary["last_step"] == 2
    assert "ranks [1] sent no report" in summary["reason"]


def test_hung_rank_0_still_records_the_timeout(tmp_path):
    """Rank 0 hangs (no error ever reaches its main thread); rank 1's collective times out
    and reports it; rank 0's watcher thread records ``timeout`` and ends the process."""
    run_dir = tmp_path / "run"
    code, out, seconds = _train(run_dir, [*TINY, "train.timeout_s=8"], fault="hang:0:3")
    summary = read(run_dir / "summary.json")
    print(f"status {summary['status']} last_step {summary['last_step']} in {seconds:.0f} s"
          f"\nreason {summary['reason']}")
    assert code != 0
    assert summary["status"] == "timeout" and summary["last_step"] == 2
    assert summary["reported_ranks"] == [0, 1] and "Timed out" in summary["reason"]
    assert "[rank 1] ERROR vitfsdp.failures: run ended timeout" in out


def test_cpu_allocation_failure_counts_as_oom():
    try:
        torch.empty(1 << 60, dtype=torch.uint8)  # a real allocation the allocator refuses
    except RuntimeError as e:
        assert failures.classify(e) == "oom"
    assert failures.classify(ValueError("bad value")) == "error"
    assert failures.classify(RuntimeError("Connection closed by peer [::1]:2")) == "peer"
    assert failures.classify(RuntimeError("Timed out waiting 5000ms for recv")) == "timeout"


def _report(rank, kind, step=4, rss=1.0):
    return failures.Report(rank, kind, f"{kind} error", "Traceback ...", step,
                           {"peak_rss_gib": rss, "peak_mem_allocated_gib": None})


@pytest.mark.parametrize("kinds, status, silent", [
    ({0: "peer", 1: "oom", 2: "peer"}, "oom", False),  # the cause wins over consequences
    ({0: "timeout", 1: "error", 2: "peer"}, "failed", False),
    ({0: "timeout", 1: "peer"}, "timeout", True),  # rank 2 hung
    ({0: "peer"}, "failed", True),  # ranks 1, 2 killed
])
def test_verdict(kinds, status, silent):
    reports = [_report(r, k) for r, k in kinds.items()]
    got, reason = failures.verdict(reports, world_size=3)
    assert got == status
    assert ("sent no report" in reason) == silent


def test_a_silent_rank_comes_first_where_the_others_saw_only_a_broken_collective():
    """kill -9 of rank 1: rank 0 saw its collective break; the reason names rank 1 first (it
    read "collective broke on rank 0"). A rank's own error stays first."""
    status, reason = failures.verdict([_report(0, "peer")], world_size=2)
    assert status == "failed"
    assert reason.startswith("ranks [1] sent no report (hung, or died without Python"), reason
    assert "the likely cause; then collective broke on rank 0" in reason
    status, reason = failures.verdict([_report(0, "oom")], world_size=2)
    assert status == "oom" and reason.startswith("out of memory on rank 0"), reason


def test_a_signalled_run_that_breaks_before_its_checkpoint_is_preempted():
    """Slurm's time limit: SIGUSR2 arrived, but the job was killed before the next window
    boundary, so a peer vanished (rank 1 silent): preempted (interrupted), not failed. An
    oom on some rank stays the cause."""
    peer = failures.Report(0, "peer", "RuntimeError: Read error", "", 230, {}, "SIGUSR2")
    status, reason = failures.verdict([peer], world_size=2)
    assert status == "preempted"
    assert "SIGUSR2 received (ranks 0)" in reason and "at step 231" in reason
    assert "cluster.signal_delay_s" in reason and "ranks [1] sent no report" in reason
    status, _ = failures.verdict([peer, _report(1, "oom")], world_size=2)
    assert status == "oom"
    assert failures.verdict([_report(0, "peer")], world_size=2)[0] == "failed"


def test_sigterm_after_a_silent_rank_died_is_failed_not_preempted():
    """torchrun answers a killed rank by sending SIGTERM to the others: a SIGTERM with a
    silent rank is the teardown, so the run failed; with every rank reporting it was the job
    ended from outside (scancel, preemption): preempted."""
    peer = failures.Report(0, "peer", "RuntimeError: Connection closed by peer", "", 2, {},
                           "SIGTERM")
    status, reason = failures.verdict([peer], world_size=2)
    assert status == "failed" and "collective broke on rank 0" in reason
    assert "ranks [1] sent no report" in reason
    other = failures.Report(1, "peer", "RuntimeError: Connection closed by peer", "", 2, {},
                            "SIGTERM")
    assert failures.verdict([peer, other], world_size=2)[0] == "preempted"


def test_memory_at_failure_is_the_max_over_reports():
    mem = failures.max_memory([_report(0, "oom", rss=1.5), _report(1, "oom", rss=2.5)])
    assert mem == {"peak_mem_allocated_gib": None, "peak_rss_gib": 2.5}


def test_fault_hook_is_refused_unless_well_formed():
    assert failures.parse_fault("kill:1:3") == ("kill", 1, 3)
    assert failures.parse_fault(None) is None
    with pytest.raises(ValueError, match="ACTION:RANK:STEP"):
        failures.parse_fault("explode:1:3")


def test_memory_limit_is_refused_on_a_gpu():
    from vitfsdp.torch_train import _limit_memory

    with pytest.raises(ValueError, match="train.memory_limit_gib"):
        _limit_memory(1.0, torch.device("cuda", 0))
    _limit_memory(0.0, torch.device("cuda", 0))  # 0 = off: nothing to refuse


_ONEDNN_STEP = """
import sys, torch
from vitfsdp.models import ModelConfig, build_model
from vitfsdp.torch_train import _limit_memory
_limit_memory(float(sys.argv[1]), torch.device("cpu"))
model = build_model(ModelConfig(name="vit_tiny", img_size=64), 10)
model(torch.randn(2, 3, 64, 64)).sum().backward()
"""


@pytest.mark.parametrize("limit_gib", [0.0, 1.0])
def test_memory_limit_keeps_every_allocation_in_the_torch_allocator(limit_gib):
    """oneDNN reports its own failed allocation as "could not create a primitive", a run
    recorded ``failed`` not ``oom`` (once in CI at the batch search's boundary): under
    ``train.memory_limit_gib`` a ViT step runs no oneDNN primitive (its verbose log), and
    without the limit it does, so the check sees oneDNN where it runs."""
    proc = subprocess.run([sys.executable, "-c", _ONEDNN_STEP, str(limit_gib)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ONEDNN_VERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = proc.stdout.count("onednn_verbose,v1,primitive,exec")
    assert (ran == 0) == (limit_gib > 0), (limit_gib, ran)


def _catches_sigusr2(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGUSR2 (bit 12 of SigCgt in /proc)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:"))
                 .split()[1], 16)
    return bool(caught >> (signal.SIGUSR2 - 1) & 1)


def test_stop_signal_during_start_up_is_preempted_not_failed(tmp_path):
    """SIGUSR2 while the rank still imports torch (Slurm may send it up to 60 s early): the
    rank keeps it (vitfsdp.startup_signals) and stops before its first step as ``preempted``,
    exit code 3, instead of dying of the signal."""
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "vitfsdp.train", *TINY, "cluster.gpus_per_node=1",
            f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not _catches_sigusr2(proc.pid):  # the first lines of vitfsdp.train have run
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    assert not (run_dir / "run.json").exists()  # still starting: nothing recorded yet
    proc.send_signal(signal.SIGUSR2)
    out = proc.communicate(timeout=120)[0]
    summary = read(run_dir / "summary.json")
    print(f"exit {proc.returncode}: {summary['status']}: {summary['reason']}")
    assert proc.returncode == EXIT_PREEMPTED, out[-2000:]
    assert summary["status"] == "preempted" and summary["interrupted"] is True
    assert "SIGUSR2 received during start-up, before step 1" in summary["reason"]
    assert summary["checkpoint_step"] is None and not (run_dir / "checkpoint").exists()
    assert not (run_dir / "metrics.jsonl").exists() or not read(run_dir / "metrics.jsonl")


def test_torchrun_forwards_sigusr2_to_its_ranks(tmp_path):
    """launch_mode=torchrun on Slurm: the signal reaches torchrun, not the ranks. With
    torchrun_signal_env it forwards SIGUSR2 to the ranks (here while they start up) and
    waits for them, and the run is ``preempted``; without, torchrun dies of it at once and
    leaves its ranks running.

    The output goes to a file and the test waits for torchrun itself, not for the end of a
    pipe that any process started below it could hold open; if torchrun has not ended in
    time, the failure shows the processes left below the test with their state and kernel
    wait channel, and the output so far (a CI run once timed out here and kept neither)."""
    run_dir, out_file = tmp_path / "run", tmp_path / "torchrun.out"
    with out_file.open("w") as out:
        proc = subprocess.Popen(torchrun_command(TINY, run_dir, 2), cwd=tmp_path,
                                env={**os.environ, **torchrun_signal_env(60)},
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (len(ranks := _children(proc.pid)) == 2 and all(map(_catches_sigusr2, ranks))):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGUSR2)
    sent = time.monotonic()
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        left = _process_table(os.getpid())
        proc.kill()
        pytest.fail(f"torchrun still running 120 s after SIGUSR2; processes:\n{left}\n"
                    f"output:\n{out_file.read_text()[-4000:]}")
    out = out_file.read_text()
    summary = read(run_dir / "summary.json")
    print(f"torchrun exit {proc.returncode} {time.monotonic() - sent:.1f} s after SIGUSR2: "
          f"{summary['status']}: {summary['reason']}")
    assert summary["status"] == "preempted", out[-2000:]
    assert "SIGUSR2 received during start-up" in summary["reason"]
    assert "SignalException" in out  # torchrun itself got the signal and forwarded it
    assert not any(map(_alive, ranks))


def _process_table(pid: int) -> str:
    """``ps``'s forest of the processes below ``pid``: pid, state, run time, wait channel."""
    table = subprocess.run(["ps", "-e", "--forest", "-o", "pid,ppid,stat,etime,wchan:24,args"],
                           capture_output=True, text=True).stdout.splitlines()
    below, keep = {pid}, table[:1]
    for line in table[1:]:
        fields = line.split(None, 2)
        if int(fields[1]) in below:
            below.add(int(fields[0]))
            keep.append(line[:200])
    return "\n".join(keep)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_rank_0_records_a_peer_that_stopped_beating(tmp_path):
    """As over NCCL, where a collective does not error when a peer dies: rank 1 is killed
    while rank 0 is blocked (here: the hang fault), so no error ever reaches rank 0's main
    thread and no rank reports. Rank 0's watcher sees rank 1's heartbeat stop and records
    ``failed`` well before the collective timeout. Ranks started as srun starts them (one
    process each, no torchrun that would end rank 0 when rank 1 dies)."""
    run_dir = tmp_path / "run"
    port = 29500 + os.getpid() % 2000
    argv = [sys.executable, "-m", "vitfsdp.train", *TINY, "train.timeout_s=20",
            f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    t0 = time.monotonic()
    procs = [subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2",
                                   "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(port),
                                   failures.FAULT_ENV: "kill:1:3,hang:0:3"})
             for r in (0, 1)]
    out = procs[0].communicate(timeout=120)[0]
    seconds = time.monotonic() - t0
    procs[1].wait(timeout=10)
    summary = read(run_dir / "summary.json")
    print(f"status {summary['status']} in {seconds:.0f} s\nreason {summary['reason']}")
    assert procs[1].returncode == -signal.SIGKILL
    assert procs[0].returncode == failures.EXIT_FAILED, out[-2000:]
    assert summary["status"] == "failed" and summary["last_step"] == 2
    assert summary["reason"].startswith("ranks [1] stopped responding (no heartbeat for 10 s: "
                                        "killed, stopped (SIGSTOP, a debugger), out of host "
                                        "memory or node lost)")
    assert "(seen by rank 0 at step 3)" in summary["reason"]
    assert "ranks [1] sent no report" in summary["reason"]


def test_rank_0_records_a_peer_stopped_with_sigstop(tmp_path):
    """A rank stopped with SIGSTOP (a debugger attached, kill -STOP) mid-run, as srun starts
    ranks: rank 0 waits in its next collective and its watcher records ``failed`` from the
    lost heartbeat (not the collective timeout's reason), naming the case (the reason listed
    only killed, out of host memory or node lost)."""
    run_dir = tmp_path / "run"
    port = 29500 + (os.getpid() + 7) % 2000
    argv = [sys.executable, "-m", "vitfsdp.train", *TINY, "train.steps=400",
            "train.timeout_s=20", f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    logs = [tmp_path / f"rank{r}.log" for r in (0, 1)]
    procs = [subprocess.Popen(argv, cwd=tmp_path, stdout=logs[r].open("w"),
                              stderr=subprocess.STDOUT,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2",
                                   "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"})
             for r in (0, 1)]
    try:
        deadline = time.monotonic() + 120
        while "step 3/400" not in logs[0].read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        os.kill(procs[1].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        procs[0].wait(timeout=120)
        seconds = time.monotonic() - stopped
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    summary = read(run_dir / "summary.json")
    print(f"status {summary['status']} {seconds:.0f} s after the stop\nreason "
          f"{summary['reason']}")
    assert procs[0].returncode == failures.EXIT_FAILED, logs[0].read_text()[-2000:]
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("ranks [1] stopped responding (no heartbeat for ")
    assert "stopped (SIGSTOP, a debugger)" in summary["reason"]
