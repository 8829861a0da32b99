"""The probe (``python -m vitfsdp.probe``) on real gloo ranks, its schema, and the plan
predicting from a probe file. Timing accuracy is a benchmark's business (docs/plan.md,
"How good it is"), not a test's: these check structure and arithmetic."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import read, run_module
from vitfsdp.launch import netns
from vitfsdp.plan import predict
from vitfsdp.plan.probed import SCHEMA, Probe, ProbeWorld, interpolate, load_probe
from vitfsdp.plan.timing import block_workload, outer_gemms

#: A CPU probe of the tiny model at 2 and 4 gloo ranks (nodes of 2).
PROBE_ARGS = ["model=vit_tiny", "strategy=FULL_SHARD", "nodes=1,2", "device=cpu"]


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """(probe.json, the CLI's output) of a real probe of 2 and 4 gloo ranks."""
    out = tmp_path_factory.mktemp("probe")
    r = run_module("vitfsdp.probe", "-m", *PROBE_ARGS, "--out", str(out), cwd=out)
    assert r.returncode == 0, r.stdout + r.stderr
    return out / "probe.json", r.stdout


def test_probe_of_2_and_4_gloo_ranks_writes_the_documented_schema(probed):
    path, stdout = probed
    data = read(path)
    assert data["schema"] == SCHEMA and data["status"] == "completed"
    assert data["backend"] == "gloo" and data["device"]["type"] == "cpu"
    assert [w["world_size"] for w in data["worlds"]] == [2, 4]
    assert "[probe 1/2] world size 2" in stdout and "[probe 2/2] world 4" in stdout
    for w in data["worlds"]:
        assert w["status"] == "completed" and w["wall_s"] > 0
        assert w["gemm"] and all(g["time_s"] > 0 and g["tflops"] > 0 for g in w["gemm"])
        assert {o["op"] for o in w["ops"]} == {"layer_norm", "add", "gelu", "sdpa"}
        assert w["optimizer"]["s_per_param"] > 0 and w["memory"]["triad_gbps"] > 0
        # FULL_SHARD over the world: its all-gather and reduce-scatter, from 4 KiB to the
        # largest unit, latency and bus bandwidth named with their units
        ops = {(c["op"], c["ranks"], c["nodes"]) for c in w["collectives"]}
        nodes = w["world_size"] // 2
        assert ops == {("all_gather", w["world_size"], nodes),
                       ("reduce_scatter", w["world_size"], nodes)}
        for c in w["collectives"]:
            sizes = [p["size_bytes"] for p in c["points"]]
            assert sizes == sorted(sizes) and sizes[0] == 4096 and len(sizes) >= 2
            assert all(p["time_s"] > 0 and p["busbw_gbps"] > 0 for p in c["points"])
            assert c["latency_us"] == pytest.approx(c["points"][0]["time_s"] * 1e6)
        assert 0 <= w["overlap"]["fraction"] <= 1
        fw = w["framework"]
        assert [f["strategy"] for f in fw] == ["FULL_SHARD"] and fw[0]["status"] == "completed"
        assert fw[0]["per"] == "unit" and fw[0]["overhead_s"] >= 0 and fw[0]["units"] == 5
        assert "framework_runs" not in w  # the worker's measured steps, folded into framework
    # the worker trained the framework model in its own processes (no launch of its own),
    # and the runs' records are not left among the sweep's
    assert "framework run FULL_SHARD/fsdp1" in (path.parent / "probe_w4.log").read_text()
    assert not list(path.parent.glob(".probe-framework-*"))
    assert not list(path.parent.rglob("run.json"))


def test_the_plan_predicts_from_the_probe_file(probed, tmp_path):
    """``cluster.probe=`` switches the plan from data sheets (no CPU step time at all) to
    the measured figures; the table says where the figures came from."""
    path, _ = probed
    r = run_module("vitfsdp.plan", "-m", *PROBE_ARGS, f"cluster.probe={path}", "--json",
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["nodes"] for row in rows] == [1, 2]
    for row in rows:
        # the file, when it was measured and how far its repeats agreed: which probe each
        # prediction used, and what it holds to
        data = read(path)
        worst = max(w["spread"]["median"] for w in data["worlds"])
        held = ("NOISY: repeats spread" if any(w["spread"]["noisy"] for w in data["worlds"])
                else f"repeats within {worst:.0%}")
        assert row["source"].startswith(f"probe:{path} ({data['created_at']}; {held}"), row
        assert all(w["spread"]["repeats"] == 3 and w["spread"]["items"] > 10
                   for w in data["worlds"])
        assert row["step_time_s"] > 0
        terms = row["gemm_s"] + row["other_s"] + row["optimizer_s"]
        assert row["compute_s"] == pytest.approx(terms)
        assert row["step_time_s"] == pytest.approx(
            row["compute_s"] + row["exposed_comm_s"] + row["framework_s"])
    r = run_module("vitfsdp.plan", "-m", *PROBE_ARGS, cwd=tmp_path)
    assert "step time needs cluster.peak_tflops" in r.stdout  # without it: no step time
    bad = run_module("vitfsdp.plan", *PROBE_ARGS[:2], f"cluster.probe={tmp_path}/none.json",
                     cwd=tmp_path)
    assert bad.returncode == 2 and "cluster.probe=" in bad.stderr
    assert "python -m vitfsdp.probe" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_a_failing_world_size_is_recorded_not_fatal(tmp_path):
    """A world size whose job fails is kept in probe.json with its reason; the command
    exits 1 only when every world size failed."""
    from vitfsdp.probe.__main__ import probe_world, write_probe

    spec = {"world_size": 2, "nodes": 1, "ranks_per_node": 2, "device": "cpu",
            "gemms": [], "ops": [["no_such_op", [4, 4], "fp32"]],
            "optimizer": {"impl": "auto", "num_params": 16}, "collectives": [],
            "overlap": None}
    entry = probe_world(spec, tmp_path, timeout_s=300)
    assert entry["status"] == "failed" and "no_such_op" in entry["reason"]
    data = write_probe(tmp_path / "probe.json", [entry], "local", 2)
    assert data["status"] == "failed" and "world 2:" in data["reason"]
    with pytest.raises(ValueError, match="no completed measurement"):
        load_probe(tmp_path)


def test_a_world_size_past_its_timeout_is_recorded_and_left_running_nowhere(tmp_path):
    """A world size still measuring after ``timeout_s`` (1 s: torchrun has not even started
    its ranks) is stopped, torchrun and whatever ranks it started, and recorded as timed
    out."""
    from vitfsdp.probe.__main__ import probe_world

    spec = {"world_size": 2, "nodes": 1, "ranks_per_node": 2, "device": "cpu", "gemms": [],
            "ops": [], "optimizer": {"impl": "auto", "num_params": 16}, "collectives": [],
            "overlap": None}
    entry = probe_world(spec, tmp_path, timeout_s=1)
    assert entry["status"] == "failed" and entry["reason"].startswith("timed out:"), entry
    left = [d.name for d in Path("/proc").iterdir() if d.name.isdigit()
            and str(tmp_path).encode() in _cmdline(d)]
    assert not left, left


def _cmdline(proc_dir: Path) -> bytes:
    try:
        return (proc_dir / "cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


def _link_spec(max_bytes: int) -> dict:
    """A world of 2 nodes of 1 rank that measures only an all-gather curve across them."""
    return {"world_size": 2, "nodes": 2, "ranks_per_node": 1, "device": "cpu", "gemms": [],
            "ops": [], "optimizer": {"impl": "auto", "num_params": 16},
            "stream_elements": 1 << 16,
            "collectives": [["all_gather", 2, 2, "fp32", max_bytes]],
            "overlap": {"m": 8, "n": 8, "k": 8, "dtype": "fp32", "size_bytes": 4096},
            "timeout_s": 120}


@pytest.mark.skipif(netns.unavailable_reason() is not None,
                    reason=f"nodes apart need root and iproute2: {netns.unavailable_reason()}")
def test_a_probe_of_nodes_apart_measures_the_emulated_link(tmp_path):
    """With ``cluster.network.emulate`` the probe's nodes run apart as the sweep's points do
    (:mod:`vitfsdp.launch.netns`): the all-gather between them is bound by the link (0.1
    Gbit/s = 0.0125 GB/s of bus bandwidth for 2 ranks), the record says which network, and a
    point on another network gets a note from the plan."""
    from vitfsdp.probe.__main__ import probe_world

    gbit_s = 0.1
    entry = probe_world(_link_spec(1 << 20), tmp_path, 300,
                        network=netns.NetworkConfig(True, gbit_s))
    assert entry["status"] == "completed", entry.get("reason")
    assert entry["network"]["emulated"] and entry["network"]["inter_node_gbit_s"] == gbit_s
    (curve,) = entry["collectives"]
    link_gbps = gbit_s / 8
    assert 0.6 * link_gbps < curve["busbw_gbps"] < 1.15 * link_gbps, curve["points"]
    assert not list(tmp_path.glob("*.json"))  # the spec and the worker's output are gone
    assert not [n for n in netns.list_namespaces() if f"-{os.getpid()}-" in n]
    world = ProbeWorld.from_json(entry)
    probe = Probe("link", "cpu", {2: world})
    assert not probe.check_network(2, True, gbit_s)
    assert probe.check_network(2, False, gbit_s) == {
        "probe at world size 2 measured on an emulated 0.1 Gbit/s link, the point runs on the "
        "loopback: probe with the sweep's cluster.network"}
    # measured on the host's shared cores; a point whose nodes have their own CPU quota
    assert probe.check_network(2, True, gbit_s, node_cpus=0.5) == {
        "probe at world size 2 measured on the host's shared cores, the point runs on 0.5 "
        "CPUs a node: probe with the sweep's cluster.network"}


def test_packs_merge_their_world_sizes_into_one_probe_file(tmp_path):
    """Each pack's probe step adds its world size to the sweep's probe.json (the file made
    by the first; a world size measured again replaces the old entry; the rest kept)."""
    from vitfsdp.probe.__main__ import merge_world

    path = tmp_path / "probe.json"
    world = {"status": "completed", "nodes": 1, "ranks_per_node": 2, "gemm": [],
             "device": {"type": "cpu", "name": "x"}, "backend": "gloo"}
    merge_world(path, world | {"world_size": 4, "wall_s": 1.0}, "virtual", 2)
    merge_world(path, world | {"world_size": 2, "wall_s": 2.0}, "virtual", 2)
    data = merge_world(path, world | {"world_size": 4, "wall_s": 3.0}, "virtual", 2)
    assert read(path) == data and data["schema"] == SCHEMA and data["status"] == "completed"
    assert [(w["world_size"], w["wall_s"]) for w in data["worlds"]] == [(2, 2.0), (4, 3.0)]
    assert not list(tmp_path.glob("*.lock"))  # the lock is released (its file removed)
    assert set(load_probe(path).worlds) == {2, 4}


def _flat_probe(world: int, gemm_s: float, op_s: float) -> Probe:
    """A probe where every GEMM takes ``gemm_s`` and every op ``op_s`` each way."""
    w = ProbeWorld(world, 1, {}, {}, 1e-9, {("all_reduce", world, 1, "fp32"): [(4096, 1e-4)]},
                   1.0)
    probe = Probe("flat", "cpu", {world: w})
    probe.gemm_s = lambda *_: (gemm_s, frozenset())  # type: ignore[method-assign]
    probe.op_s = lambda *_: ((op_s, op_s), frozenset())  # type: ignore[method-assign]
    return probe


def test_probed_compute_counts_every_matmul_of_forward_and_backward(probed):
    """Independent count: a block has 4 linear layers, each one matmul forward and two
    backward (input and weight gradients); the patch embedding has no input gradient (2
    matmuls) and the head 3; activation checkpointing adds each block's forward again."""
    from vitfsdp.plan.__main__ import compose_points

    (_, cfg), = compose_points(["model=vit_tiny", "strategy=DDP", "device=cpu"])
    depth = cfg.model.spec.depth
    probe = _flat_probe(cfg.world_size, 1e-3, 0.0)
    p = predict(cfg, probe=probe, device="cpu")
    assert p.gemm_s == pytest.approx(1e-3 * (depth * 12 + 2 + 3))
    ckpt = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train,
                                                              activation_checkpointing=True))
    assert predict(ckpt, probe=probe, device="cpu").gemm_s == pytest.approx(
        1e-3 * (depth * 16 + 5))
    ops = _flat_probe(cfg.world_size, 0.0, 1e-3)
    gemms, block_ops = block_workload(cfg.model.spec, 17, 4, True)
    per_block = sum(o.count for o in block_ops)  # 2 LayerNorms, 2 adds, GELU, attention
    assert per_block == 6 and len(gemms) == 4 and len(outer_gemms(cfg)) == 2
    assert predict(cfg, probe=ops, device="cpu").other_s == pytest.approx(
        2 * 1e-3 * depth * per_block)


def test_interpolate_collective_curves():
    points = [(4096.0, 1e-4), (65536.0, 2e-4), (1048576.0, 1.2e-3)]
    assert interpolate(points, 100) == 1e-4  # below the smallest: its latency
    assert interpolate(points, 65536) == pytest.approx(2e-4)
    mid = (65536 + 1048576) / 2
    assert interpolate(points, mid) == pytest.approx((2e-4 + 1.2e-3) / 2)
    slope = (1.2e-3 - 2e-4) / (1048576 - 65536)  # beyond: the last segment's bandwidth
    assert interpolate(points, 2 * 1048576) == pytest.approx(1.2e-3 + slope * 1048576)
    with pytest.raises(ValueError):
        interpolate([], 1)


def test_term_scales_name_the_term_that_is_off():
    """Runs whose measured step is predicted compute + 2 x predicted communication: the
    diagnosis gives compute x1 and communication x2; a term that is 0 in every run cannot
    be told apart (nan)."""
    from vitfsdp.plan.calibrate import term_scales

    rows = []
    for i in range(8):
        gemm, comm, other, opt = 1 + i, 0.5 + (i % 3), 0.2 + 0.1 * (i % 2), 0.05 * (i * i % 5)
        rows.append({"pred_gemm_s": gemm, "pred_other_s": other, "pred_optimizer_s": opt,
                     "pred_exposed_comm_s": comm, "pred_framework_s": 0.0,
                     "step_time_s": gemm + other + opt + 2 * comm})
    x = term_scales(pd.DataFrame(rows))
    assert x["gemm_s"] == pytest.approx(1, abs=0.02)
    assert x["other_s"] == pytest.approx(1, abs=0.05)
    assert x["exposed_comm_s"] == pytest.approx(2, abs=0.02)
    assert math.isnan(x["framework_s"])


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                    reason="the virtual Slurm cluster is not started (make slurm-up)")
def test_probe_on_the_virtual_slurm_cluster(tmp_path):
    """On a Slurm profile the probe is a job of the world's nodes made as a point's job
    (a task per rank), and the framework run a point's job: both through Slurm."""
    r = run_module("vitfsdp.probe", "-m", "cluster=virtual", "model=vit_tiny",
                   "strategy=FULL_SHARD", "nodes=1", "device=cpu", "--out", str(tmp_path),
                   cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (world,) = read(tmp_path / "probe.json")["worlds"]
    assert world["status"] == "completed" and world["world_size"] == 2
    assert world["collectives"] and world["framework"][0]["status"] == "completed"
    assert not list(tmp_path.glob(".probe-framework-*"))  # its runs are not left behind


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                    reason="the virtual Slurm cluster is not started (make slurm-up)")
@pytest.mark.parametrize("max_jobs", [None, 1])
def test_slurm_world_sizes_past_their_timeout_are_cancelled_and_recorded(tmp_path, max_jobs):
    """On a Slurm profile every world size's job is submitted at once (``cluster.max_jobs=1``:
    one after the other ends) and ``--timeout`` counts from each job's start: a world size
    whose job has not ended 3 s after it started is recorded failed, the reason naming the
    timeout, the job, its state, how long it pended and ran, and the job is cancelled, not
    left in the queue."""
    import re

    cap = [] if max_jobs is None else [f"cluster.max_jobs={max_jobs}"]
    r = run_module("vitfsdp.probe", "-m", "cluster=virtual", *cap, "model=vit_tiny",
                   "strategy=FULL_SHARD", "nodes=1,2", "device=cpu", "--timeout", "3",
                   "--out", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("each at most --timeout 3 s from its start (no --queue-timeout: the queue wait is "
            "not bounded" in r.stdout), r.stdout
    assert ("at most 1 queued at a time" in r.stdout) == (max_jobs == 1), r.stdout
    events = re.findall(r"world size (\d): Slurm job \d+ (submitted|\w+ past --timeout)",
                        r.stdout + r.stderr)
    submitted = [w for w, what in events if what == "submitted"]
    first_cancel = next(i for i, (_, what) in enumerate(events) if what != "submitted")
    assert sorted(submitted) == ["2", "4"], events
    if max_jobs is None:  # both queued before either timed out
        assert first_cancel == 2, events
    else:  # the second once the first was cancelled
        assert events[:3] == [("2", "submitted"), ("2", events[1][1]), ("4", "submitted")], (
            events)
    (kept,) = (tmp_path / "probes").glob("*.json")
    assert [w["world_size"] for w in read(kept)["worlds"]] == [2, 4]
    for world in read(kept)["worlds"]:
        assert world["status"] == "failed", world
        why = world["reason"]
        match = re.fullmatch(r"timed out: --timeout 3 s \(counted from the job's start\) "
                             r"passed with Slurm job (\d+) (\w+), after \d+ s in the queue and "
                             r"(\d+) s running \(state looked at every 1 s\); cancelled", why)
        assert match and match[2] in {"RUNNING", "COMPLETING"} and int(match[3]) >= 3, why
        _assert_cancelled(match[1])


def _assert_cancelled(job_id: str, within_s: float = 15.0) -> None:
    """Slurm job ``job_id`` is cancelled within ``within_s`` seconds: sacct says CANCELLED,
    and squeue lists it no more or as COMPLETING (a job cancelled while RUNNING stays so
    while its processes end: a second or so, over 15 s in one CI run on a loaded host)."""
    import subprocess
    import time

    deadline, queued, state = time.monotonic() + within_s, "", ""
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T"],
                                capture_output=True, text=True).stdout
        state = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
                               capture_output=True, text=True).stdout.strip()
        if state.startswith("CANCELLED") and queued.split()[1:2] in ([], ["COMPLETING"]):
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} after {within_s:g} s: squeue {queued!r}, sacct "
                         f"{state!r}")


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                    reason="the virtual Slurm cluster is not started (make slurm-up)")
def test_a_hangup_while_a_slurm_job_is_waited_for_cancels_it_and_records_why(tmp_path):
    """A dropped login (SIGHUP) while the probe waits for its world size's job: the job is
    cancelled, not left queued or running, and the kept probe records the world size failed
    with the signal and the job; the probe exits 129 (128 + SIGHUP)."""
    import re
    import signal
    import subprocess
    import sys
    import time

    log = tmp_path / "probe.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vitfsdp.probe", "-m", "cluster=virtual", "model=vit_tiny",
             "strategy=FULL_SHARD", "nodes=1", "device=cpu", "--timeout", "120", "--out",
             str(tmp_path)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        job, deadline = None, time.monotonic() + 40
        while job is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"world size 2: Slurm job (\d+) submitted", log.read_text())
            job = found and found[1]
            time.sleep(0.2)
        assert job, log.read_text()
        queued = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True)
        assert job in queued.stdout, queued  # queued (or running) when the login drops
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=30) == 128 + signal.SIGHUP, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    _assert_cancelled(job)
    (kept,) = (tmp_path / "probes").glob("*.json")
    (world,) = read(kept)["worlds"]
    assert world["status"] == "failed" and world["world_size"] == 2, world
    assert re.fullmatch(rf"interrupted by SIGHUP after \d+ s: Slurm job {job} \w+ cancelled",
                        world["reason"]), world["reason"]


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1",
                    reason="the virtual Slurm cluster is not started (make slurm-up)")
def test_a_slurm_framework_job_past_its_timeout_is_cancelled(tmp_path):
    """The framework run of a point (a JAX point's, launched as a point's job) waits at most
    its timeout too: 1 s after its start it is cancelled and the reason says so."""
    import re

    from vitfsdp.plan.__main__ import compose_points
    from vitfsdp.probe.__main__ import framework_overrides
    from vitfsdp.probe.slurm import framework_job, run_jobs

    ((point, cfg),) = compose_points(["cluster=virtual", "model=vit_tiny",
                                      "strategy=FULL_SHARD", "nodes=1", "device=cpu"])
    job = framework_job(cfg, framework_overrides(point), tmp_path / "fw")
    run_jobs([job], 1)
    match = re.fullmatch(r"timed out: --timeout 1 s \(counted from the job's start\) passed "
                         r"with Slurm job (\d+) \w+, after \d+ s in the queue and \d+ s "
                         r"running .*; cancelled", job.outcome)
    assert match and not job.interrupted, job.outcome
    _assert_cancelled(match[1])


def test_terms_that_move_alike_share_one_factor():
    """A weak-scaling sweep of one model: every rank computes the same, so the GEMM and the
    other compute terms are the same seconds in every run and least squares could split
    their share any way (a run printed ``gemm x0.00``). They are fitted as their sum: both
    get its factor, and the communication its own."""
    from vitfsdp.plan.calibrate import term_groups, term_scales

    rows = []
    for i in range(6):
        gemm, other, comm = 1.0, 0.4, 0.2 + 0.3 * i  # compute constant, comm grows
        rows.append({"pred_gemm_s": gemm, "pred_other_s": other, "pred_optimizer_s": 0.0,
                     "pred_exposed_comm_s": comm, "pred_framework_s": 0.0,
                     "step_time_s": 1.5 * (gemm + other) + comm})
    groups = dict(term_groups(pd.DataFrame(rows)))
    assert groups[("gemm_s", "other_s")] == pytest.approx(1.5, abs=0.01)
    assert groups[("exposed_comm_s",)] == pytest.approx(1.0, abs=0.01)
    x = term_scales(pd.DataFrame(rows))
    assert x["gemm_s"] == x["other_s"] == pytest.approx(1.5, abs=0.01)
    assert math.isnan(x["optimizer_s"]) and math.isnan(x["framework_s"])


def test_a_term_the_runs_cannot_pin_is_reported_as_such():
    """The nine runs of a fresh-clone demo (2026-11-26; step and predicted terms in seconds,
    from its calibration.csv): the communication term, which moves across the runs, is
    pinned near x1; the compute terms, nearly constant, are not (least squares gave the
    optimizer x0.00, which the report must not call '100% long')."""
    from vitfsdp.plan.calibrate import _probe_report, term_errors, term_scales

    cols = ("step_time_s", "pred_gemm_s", "pred_other_s", "pred_optimizer_s",
            "pred_exposed_comm_s", "pred_framework_s")
    rows = [(1.952, 0.677, 0.060, 0.322, 0.538, 0.045), (3.332, 0.719, 0.082, 0.383, 2.355, 0.009),
            (4.021, 0.654, 0.048, 0.430, 3.153, 0.020), (2.714, 0.677, 0.060, 0.161, 1.198, 0.467),
            (6.115, 0.719, 0.082, 0.096, 3.993, 0.173), (6.974, 0.654, 0.048, 0.054, 5.254, 0.243),
            (2.280, 0.677, 0.060, 0.161, 1.198, 0.519), (4.027, 0.719, 0.082, 0.191, 2.134, 0.375),
            (4.761, 0.654, 0.048, 0.215, 3.099, 0.353)]
    df = pd.DataFrame(rows, columns=cols)
    errors = {terms[0]: se for terms, se in term_errors(df).items()}
    assert term_scales(df)["exposed_comm_s"] == pytest.approx(1.0, abs=0.1)
    assert errors["exposed_comm_s"] < 0.25 < errors["optimizer_s"]
    df["pred_step_time_s"] = df[list(cols[1:])].sum(axis=1)
    table = pd.DataFrame({"step_time_rel_error": df["pred_step_time_s"] / df["step_time_s"] - 1})
    report = _probe_report(df, table, type("Probe", (), {"path": "probe.json"})())
    optimizer = next(line for line in report.splitlines() if "optimizer" in line)
    assert "do not pin it" in optimizer and "long" not in optimizer, report
    assert "x0.00" not in report, report
    df["pred_framework_s"] = 0.0  # a term the probe measured as nothing: not a factor
    df["pred_step_time_s"] = df[list(cols[1:])].sum(axis=1)
    report = _probe_report(df, table, type("Probe", (), {"path": "probe.json"})())
    framework = next(line for line in report.splitlines() if "framework" in line)
    assert "not measured" in framework and "x0" not in framework, report


def test_a_probe_never_overwrites_another_and_is_kept_with_its_time(tmp_path):
    """The first probe becomes probe.json; a second is kept under probes/ and probe.json
    (what every recorded prediction used) stays, unless --replace; a failed probe never
    replaces one. The printed commands are shell-quoted."""
    import datetime
    import shlex

    from vitfsdp.launch.local import quote_override
    from vitfsdp.probe.__main__ import history_path, publish, write_probe

    sweep = tmp_path / "my sweep"
    path = sweep / "probe.json"
    entry = {"world_size": 2, "status": "failed", "reason": "x"}
    failed = tmp_path / "probe-failed.json"
    write_probe(failed, [entry], "local", 2)
    line = publish(failed, path, replace=False, completed=False, measured="0/2")
    assert not path.exists()  # a probe that failed is not published, nor said to be there
    assert f"no {path} yet: the plan keeps the profile's data sheets" in line
    assert "stays" not in line and "cluster.probe=" not in line
    some = publish(failed, path, replace=False, completed=False, measured="1/2")
    assert shlex.quote(f"cluster.probe={quote_override(str(failed))}") in some
    when = datetime.datetime(2026, 11, 27, 9, 0, tzinfo=datetime.timezone.utc)
    first = history_path(path, when)
    assert first == sweep / "probes" / "probe-2026-11-27T09-00-00Z.json"
    write_probe(first, [entry], "local", 2, {"start": [1.0, 1.0, 1.0], "end": [2.0, 1.5, 1.0]})
    line = publish(first, path, replace=False, completed=True, measured="1/1")
    assert path.read_bytes() == first.read_bytes()
    assert shlex.quote(f"cluster.probe={quote_override(str(path))}") in line
    assert read(path)["load"] == {"start": [1.0, 1.0, 1.0], "end": [2.0, 1.5, 1.0]}
    second = history_path(path, when + datetime.timedelta(hours=1))
    write_probe(second, [entry], "local", 2)
    line = publish(second, path, replace=False, completed=True, measured="1/1")
    assert path.read_bytes() == first.read_bytes() and second.exists()
    assert "stays the one the plan reads" in line
    assert shlex.quote(f"cluster.probe={quote_override(str(second))}") in line
    assert publish(second, path, replace=True, completed=False, measured="0/1").count("stays")
    assert path.read_bytes() == first.read_bytes()  # a failed probe replaces nothing
    publish(second, path, replace=True, completed=True, measured="1/1")
    assert path.read_bytes() == second.read_bytes()
    assert sorted(p.name for p in (sweep / "probes").iterdir()) == [first.name, second.name]
