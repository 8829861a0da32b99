"""``--status`` of a point that failed: its row says its status and, where it measured
windows before the failure, the last one's images/s as what it is (``failed (last window
12.3 ips before it failed)``), never a bare figure in the ips column that completed points
use; its reason follows the table. A real point: two ranks, rank 1 kills itself at step 5
(``VITFSDP_TEST_FAULT=kill:1:5``)."""

from __future__ import annotations

import re

from tests.conftest import TINY, read
from vitfsdp import failures
from vitfsdp.launch import local
from vitfsdp.records import write_json_atomic
from vitfsdp.sweep import EXIT_NOT_COMPLETED, main_cli

HEADER = ("point", "job", "state", "nodes", "step", "ips", "status")


def test_a_failed_points_row_says_its_last_window_before_the_failure(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.setenv(failures.FAULT_ENV, "kill:1:5")
    sweep_dir = tmp_path / "sweep"
    run_dir = sweep_dir / "0_strategy=DDP"
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "job.json", {"launcher": "local", "job_id": None,
                                             "sweep": local.sweep_process()})
    overrides = [*TINY, "strategy=DDP", "train.steps=8", "train.log_every=1",
                 "cluster.gpus_per_node=2", "train.timeout_s=60"]
    assert local.run_point(overrides, run_dir, 2, log_path=run_dir / "train.log",
                           poll_s=0.2) != 0
    summary = read(run_dir / "summary.json")
    windows = [w for w in read(run_dir / "metrics.jsonl") if not w.get("warmup")]
    print(summary["status"], summary.get("ips"), [(w["step_end"], w["ips"]) for w in windows])
    assert summary["status"] == "failed" and windows  # measured windows before it failed

    capsys.readouterr()
    assert main_cli(["--status", str(sweep_dir)]) == EXIT_NOT_COMPLETED
    lines = capsys.readouterr().out.splitlines()
    print("\n".join(lines))
    header, row = lines[0].split(), lines[1]
    assert tuple(header[:7]) == HEADER
    start = lines[0].index("ips")
    assert row[start:lines[0].index("status")].strip() == "-", row  # no bare figure
    last = f"{windows[-1]['ips']:.1f}"
    assert re.search(rf" failed \(last window {re.escape(last)} ips before it failed\)", row), row
    reason = summary["reason"].splitlines()[0]
    assert any(line.startswith("  0 ") and f"failed: {reason[:40]}" in line
               for line in lines), lines
