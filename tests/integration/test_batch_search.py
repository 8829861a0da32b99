"""Batch-size search: the search's steps on recorded outcomes, and a real search on CPU
where a memory limit makes the larger batch fail with ``oom``."""

import json

import pytest

from tests.conftest import run_module
from vitfsdp.launch.batch_search import (
    RESULT_FILE,
    Attempt,
    Search,
    attempt_from_summary,
    format_results,
    power_of_two_floor,
    with_batch,
)


def _search(start, outcomes, max_batch=1024):
    """Feed ``outcomes`` (status per attempt, in order) to a search; return it and the
    batches it asked for."""
    s = Search(0, ["model=vit_tiny"], start, max_batch)
    asked = []
    for status in outcomes:
        b = s.next_batch()
        assert b is not None, f"search ended early after {asked}"
        asked.append(b)
        s.attempts.append(Attempt(b, status, f"run{b}"))
    return s, asked


@pytest.mark.parametrize(("start", "outcomes", "asked", "answer", "stopped"), [
    (8, ["completed", "completed", "oom"], [8, 16, 32], 16, "oom at 32"),
    (32, ["oom", "oom", "completed"], [32, 16, 8], 8, "oom at 16"),
    (4, ["completed", "completed"], [4, 8], 8, "batch_search_max=8 reached"),
    (2, ["oom", "oom"], [2, 1], None, "oom at local batch 1"),
    (8, ["completed", "timeout"], [8, 16], 8, "timeout at 16: no reason"),
])
def test_search_doubles_after_a_fit_halves_after_oom_and_stops_at_the_boundary(
        start, outcomes, asked, answer, stopped):
    s, got = _search(start, outcomes, max_batch=8 if start == 4 else 1024)
    assert got == asked
    assert s.next_batch() is None
    assert s.largest_fitting == answer
    assert s.stopped_by == stopped
    record = s.record()
    assert [a["local_batch_size"] for a in record["attempts"]] == asked
    assert record["largest_local_batch"] == answer


def test_helpers():
    assert [power_of_two_floor(n) for n in (1, 2, 3, 32, 48, 1000)] == [1, 2, 2, 32, 32, 512]
    with pytest.raises(ValueError, match="train.local_batch_size=0"):
        power_of_two_floor(0)
    assert with_batch(["nodes=2", "train.local_batch_size=3", "+train.local_batch_size=5"],
                      64) == ["nodes=2", "train.local_batch_size=64"]
    a = attempt_from_summary(8, "r", {"status": "oom", "reason": "out of memory\ntrace",
                                      "ips": None})
    assert (a.status, a.reason, a.figures) == ("oom", "out of memory", {})
    assert attempt_from_summary(8, "r", None).status == "failed"
    s, _ = _search(8, ["completed", "oom"])
    assert "8 ok, 16 oom" in format_results([s])


def test_sweep_batch_search_finds_the_largest_fitting_power_of_two(tmp_path):
    """vit_tiny at 64 px (256 tokens, attention written out: about 6 MB of activations per
    image) under a 0.25 GiB memory limit: the boundary lies near local batch 16 (where
    exactly depends on the allocator). Whichever side 16 falls on, the search must end
    with B completed and 2B oom, each attempt an ordinary recorded run. A rerun reuses
    every attempt."""
    sweep_dir = tmp_path / "search"
    args = ["-m", "--batch-search", "model=vit_tiny", "model.img_size=64",
            "kernels.fused_attn=false", "cluster.gpus_per_node=1", "train.local_batch_size=16",
            "train.memory_limit_gib=0.25", "train.steps=2", "train.warmup_steps=0",
            "train.log_every=1", f"hydra.sweep.dir={sweep_dir}"]
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((sweep_dir / RESULT_FILE).read_text())
    [point] = result["points"]
    tried = [(a["local_batch_size"], a["status"]) for a in point["attempts"]]
    answer = point["largest_local_batch"]
    assert tried[0][0] == 16 and answer is not None, tried
    assert (answer, "completed") in tried and (2 * answer, "oom") in tried, tried
    assert all(b <= answer for b, st in tried if st == "completed"), tried
    assert all(b > answer for b, st in tried if st == "oom"), tried
    assert len(tried) >= 2 and {st for _, st in tried} == {"completed", "oom"}
    for a in point["attempts"]:  # every attempt is an ordinary run with its own records
        summary = json.loads((sweep_dir / a["run_dir"] / "summary.json").read_text())
        run = json.loads((sweep_dir / a["run_dir"] / "run.json").read_text())
        assert summary["status"] == a["status"]
        assert run["config"]["train"]["local_batch_size"] == a["local_batch_size"]
    assert f"oom at {2 * answer}" in proc.stdout

    before = {p: p.stat().st_mtime_ns for p in sweep_dir.glob("*/summary.json")}
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in sweep_dir.glob("*/summary.json")} == before
    assert json.loads((sweep_dir / RESULT_FILE).read_text())["points"][0][
        "largest_local_batch"] == answer


def test_points_predicted_not_to_fit_are_skipped_and_say_so(tmp_path, monkeypatch):
    """vit_base's AdamW state alone (87M parameters × 16 B = 1.3 GiB per rank under DDP)
    exceeds a 1 GiB device, and vit_huge's more so: each is recorded as skipped_infeasible
    with its prediction, and nothing runs; a named secret is recorded by its name alone. The
    same sweep with --rerun-failed predicts again, and keeps no attempt of a prediction."""
    sweep_dir = tmp_path / "plan"
    monkeypatch.setenv("HF_TOKEN", "hf_not_for_records")
    args = ("-m", "model=vit_base,vit_huge", "strategy=DDP", "device=cpu",
            "cluster.device_memory_gib=1.0", "train.steps=2", "train.warmup_steps=0",
            "train.log_every=1", "train.local_batch_size=2", "cluster.secrets=[HF_TOKEN]",
            f"hydra.sweep.dir={sweep_dir}")
    proc = run_module("vitfsdp.sweep", *args, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # no point completed
    skipped = [line for line in proc.stdout.splitlines() if "] skip " in line]
    assert len(skipped) == 2, proc.stdout
    for line in skipped:
        assert "skipped_infeasible" in line and "> 1.0 GiB (cluster.device_memory_gib)" in line
    assert "sweep done: 2 skipped_infeasible" in proc.stdout
    for run_dir in (d for d in sweep_dir.iterdir() if d.is_dir()):
        summary = json.loads((run_dir / "summary.json").read_text())
        run = json.loads((run_dir / "run.json").read_text())
        assert summary["status"] == run["status"] == "skipped_infeasible"
        assert summary["plan"]["fits"] is False and summary["plan"]["allocated_gib"] > 1.0
        assert run["config"]["model"]["name"] in run_dir.name
        assert not (run_dir / "metrics.jsonl").exists()  # nothing ran
        assert run["config"]["cluster"]["secrets"] == ["HF_TOKEN"]
        assert "hf_not_for_records" not in (run_dir / "run.json").read_text()
    again = run_module("vitfsdp.sweep", *args, "--rerun-failed", cwd=tmp_path, timeout=300)
    assert again.returncode == 1 and "2 skipped_infeasible" in again.stdout, again.stderr[-3000:]
    assert not list(sweep_dir.glob("*/attempts")), "a prediction is not kept as an attempt"
