"""A failed point's reason names the ranks' error, not their last INFO line
(:func:`vitfsdp.launch.local.tail`, :func:`vitfsdp.records.reason_line`): a rank that logs
an INFO line, then a gRPC-style E line (``Failed to add port``), then dies of SIGSEGV under
a real torchrun, as JAX's coordinator does on a port in use."""

from __future__ import annotations

import subprocess
import sys

from vitfsdp.launch.local import tail
from vitfsdp.records import reason_line

#: What the rank prints (the lines of a JAX coordinator on a port in use), then its crash.
RANK = """
import os, signal, sys
print("22:43:30 [rank 0] INFO jax._src.distributed: Starting JAX distributed service on "
      "[::]:16306", flush=True)
print("E1129 22:43:30.479096   26974 add_port.cc:83] Failed to add port to server: No "
      "address added out of total 1 resolved for '[::]:16306'", file=sys.stderr, flush=True)
print("22:43:30 [rank 0] INFO vitfsdp: waiting for the coordinator", flush=True)
os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_a_failed_points_reason_names_the_ranks_error_and_torchruns_root_cause(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    log = tmp_path / "train.log"
    with log.open("w") as out:
        rc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                             "1", "--master_port", "0", str(script)], stdout=out,
                            stderr=subprocess.STDOUT, timeout=120, check=False).returncode
    assert rc != 0
    text = log.read_text()
    assert "Root Cause" in text and "SIGSEGV" in text  # torchrun's report, as in the sweep's
    lines = tail(log)
    reason = reason_line(f"exit code {rc} without a summary; log tail:\n{lines}")
    assert "\n" not in reason
    assert "Failed to add port to server" in reason, reason
    assert "rank 0" in reason and "SIGSEGV" in reason, reason
    assert "INFO" not in reason, reason
    assert "Starting JAX distributed service" in lines  # the context stays in the tail
    assert "torch/distributed/" not in lines  # torchrun's own lines are left out


def test_a_python_traceback_gives_its_exception_not_its_header(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("12:00:00 [rank 0] INFO vitfsdp: step 1\nTraceback (most recent call last):\n"
                   '  File "x.py", line 1, in <module>\n    raise_error()\n'
                   "RuntimeError: NCCL timeout\n12:00:01 [rank 1] INFO vitfsdp: step 2\n")
    reason = reason_line(f"exit code 1 without a summary; log tail:\n{tail(log)}")
    assert reason.endswith("log tail: RuntimeError: NCCL timeout"), reason


#: Two ranks as a JAX run's die when rank 1 is killed: rank 0 records the symptom it met
#: and waits; rank 1 dies of SIGKILL.
KILLED_PEER = """
import json, os, signal, sys, time
rank = int(os.environ["RANK"])
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
json.dump({"status": "failed", "reason": "JaxRuntimeError: UNKNOWN: Gloo all-reduce failed: "
           "Connection closed by peer"}, open(sys.argv[1], "w"))
time.sleep(30)
"""


def test_a_failed_point_whose_peer_was_killed_names_the_killed_rank(tmp_path):
    """JAX reviewer: after kill -9 of rank 1 the record said only 'Gloo all-reduce failed
    ... Connection closed by peer' (rank 0's symptom); torchrun's log named rank 1's
    SIGKILL. The reason now ends with torchrun's root cause; a reason that already names
    the signal (the PyTorch trainer's 'killed, e.g. by SIGKILL') is left as it is."""
    from vitfsdp.launch.local import LOG_FILE
    from vitfsdp.records import read_json
    from vitfsdp.sweep.local import _with_root_cause

    script = tmp_path / "ranks.py"
    script.write_text(KILLED_PEER)
    summary_path = tmp_path / "summary.json"
    with (tmp_path / LOG_FILE).open("w") as out:
        rc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                             "2", "--master_port", "0", str(script), str(summary_path)],
                            stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
    assert rc != 0
    summary = _with_root_cause(tmp_path, read_json(summary_path))
    assert summary["reason"].startswith("JaxRuntimeError: UNKNOWN: Gloo all-reduce failed")
    assert summary["reason"].endswith("torchrun's root cause: rank 1 (local_rank: 1) exitcode "
                                      "-9 (SIGKILL)"), summary["reason"]
    assert read_json(summary_path) == summary  # written back
    named = {"status": "failed", "reason": "ranks [1] sent no report (killed, e.g. by SIGKILL)"}
    assert _with_root_cause(tmp_path, named) == named
    bare = _with_root_cause(tmp_path, {"status": "failed", "reason": None})
    assert bare["reason"] == "torchrun's root cause: rank 1 (local_rank: 1) exitcode -9 (SIGKILL)"
