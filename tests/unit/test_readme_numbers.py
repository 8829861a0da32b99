"""tools/readme_numbers.py: the demo's numbers in README.md come from a sweep's records (here a
small synthetic one in the real record format), fill exactly the marked spans, and every span
the script fills is marked in the real README."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import REPO
from vitfsdp.analysis import collect_runs, synthetic
from vitfsdp.analysis.tables import points_table

STRATEGIES, NODES = ("DDP", "FULL_SHARD", "HYBRID_2GPU"), (1, 2, 4)


def _tool():
    """tools/readme_numbers.py as a module (tools/ is no package)."""
    spec = importlib.util.spec_from_file_location("readme_numbers",
                                                  REPO / "tools" / "readme_numbers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


readme_numbers = _tool()


@pytest.fixture(scope="module")
def configs() -> dict[str, dict]:
    """run.json configs of each strategy (composed once: seconds)."""
    return synthetic.base_configs()


#: Bytes each node sent per step over the emulated link, and each rank's model state (params,
#: grads, optimizer) in bytes, by strategy: what the synthetic runs record.
SENT_PER_STEP = {"DDP": 171e6, "FULL_SHARD": 302e6, "HYBRID_2GPU": 130e6}
STATE = {"DDP": (1, 1, 2), "FULL_SHARD": (0.5, 0.5, 1), "HYBRID_2GPU": (0.5, 0.5, 1)}


def _write_run(run_dir: Path, config: dict, nodes: int, day: int, rng, apart=True) -> None:
    """One completed synthetic run of vit_base, started on 2026-11-``day``, 2 host CPUs; with
    ``apart`` on an emulated 0.5 Gbit/s link, with its network.json and its model state (the
    state of FULL_SHARD divided by its ranks)."""
    info = synthetic.run_info(config, "vit_base", nodes, 0)
    info["started_at"] = f"2026-11-{day}T10:00:00+00:00"
    info["device"] = {**info["device"], "host_cpus": 2}
    strategy = config["strategy"]["name"]
    if apart:
        info["network"] = {"emulate": True, "emulated": True, "nodes": nodes,
                           "inter_node_gbit_s": 0.5, "node_cpus": 0.5}
    synthetic.write_synthetic_run(run_dir, info, "completed", rng)
    if not apart:
        return
    summary = json.loads((run_dir / "summary.json").read_text())
    windows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if line.strip()]
    sent = SENT_PER_STEP[strategy] * max(w["step_end"] for w in windows)  # every step sent
    (run_dir / "network.json").write_text(json.dumps(
        {"sent_bytes_per_node": [sent] * nodes, "sent_bytes_total": sent * nodes,
         "inter_node_gbit_s": 0.5, "nodes": nodes, "network": "vitfsdp-1-1"}))
    share = 2 * nodes if strategy == "FULL_SHARD" else 1
    state = {k: int(v * 2**30 / share) for k, v in zip(("params", "grads", "optimizer"),
                                                         STATE[strategy], strict=True)}
    summary |= {"model_state_bytes": state, "model_state_bytes_max": state}
    (run_dir / "summary.json").write_text(json.dumps(summary))


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory, configs) -> Path:
    """A completed 3 strategies x nodes 1,2,4 sweep, started on two days, on a 2-CPU host."""
    sweep_dir, rng = tmp_path_factory.mktemp("demo"), random.Random(7)
    for i, (strategy, nodes) in enumerate((s, n) for s in STRATEGIES for n in NODES):
        _write_run(sweep_dir / f"{i}_{strategy}_{nodes}", configs[strategy], nodes,
                   20 + (i == 4), rng)  # one run a day later
    return sweep_dir


def _run(sweep_dir: Path, strategy: str, j: int) -> Path:
    return sweep_dir / f"{STRATEGIES.index(strategy) * 3 + j}_{strategy}_{NODES[j]}"


def _ips(sweep_dir: Path, strategy: str, j: int) -> float:
    """The images/s of ``strategy``'s run at ``NODES[j]`` nodes, from its summary.json."""
    return json.loads((_run(sweep_dir, strategy, j) / "summary.json").read_text())["ips"]


def _windows(sweep_dir: Path, strategy: str, j: int) -> list[float]:
    """The images/s of each measured window (metrics.jsonl, warm-up left out) of that run."""
    lines = (_run(sweep_dir, strategy, j) / "metrics.jsonl").read_text().splitlines()
    return [w["ips"] for w in map(json.loads, lines) if not w["warmup"]]


def _efficiencies(sweep_dir: Path) -> str:
    """Images/s at 4 nodes over 4x that at 1 node, from the runs' summary.json, and in
    brackets the 4-node run's slowest measured window (metrics.jsonl) over 4x the 1-node
    run's fastest, and its fastest over 4x the 1-node run's slowest (both terms' noise), as
    the span writes them (FULL_SHARD, HYBRID_2GPU, DDP)."""
    d = sweep_dir
    return ", ".join(f"{s} {_ips(d, s, 2) / (4 * _ips(d, s, 0)):.2f} "
                     f"({min(_windows(d, s, 2)) / (4 * max(_windows(d, s, 0))):.2f}-"
                     f"{max(_windows(d, s, 2)) / (4 * min(_windows(d, s, 0))):.2f})"
                     for s in ("FULL_SHARD", "HYBRID_2GPU", "DDP"))


def _one_node(sweep_dir: Path) -> str:
    """Images/s of each strategy's 1-node run (summary.json), and in brackets its slowest and
    fastest measured window (metrics.jsonl), as the span writes them."""
    return ", ".join(f"{s} {_ips(sweep_dir, s, 0):.1f} ({min(_windows(sweep_dir, s, 0)):.1f}-"
                     f"{max(_windows(sweep_dir, s, 0)):.1f})"
                     for s in ("FULL_SHARD", "HYBRID_2GPU", "DDP"))


def _peaks(sweep_dir: Path, strategy: str) -> list[float]:
    """The peak allocated GiB of ``strategy``'s runs from their summary.json, by nodes."""
    return [json.loads((sweep_dir / f"{STRATEGIES.index(strategy) * 3 + j}_{strategy}_{n}"
                        / "summary.json").read_text())["peak_mem_allocated_gib"]
            for j, n in enumerate(NODES)]


def _prediction(sweep_dir: Path) -> str:
    """The plan's images/s against the measured, from the analysis's runs table."""
    from vitfsdp.analysis import collect_runs

    runs = collect_runs(sweep_dir)
    err = (runs["pred_ips"] / runs["ips"] - 1).abs().dropna()
    assert len(err) == 9, runs[["pred_ips", "ips"]]
    return f"median {err.median():.0%}, worst {err.max():.0%} over 9 runs"


def _host(sweep_dir: Path) -> str:
    """The host's cores and the CPU model the records name, as the demo-host span says."""
    from vitfsdp.analysis import collect_runs

    names = sorted(set(collect_runs(sweep_dir)["device_name"].dropna().astype(str)))
    assert names, "the synthetic demo's runs name their CPU"
    return f"2 CPU cores ({' / '.join(names)})"


NEW_SPANS = ("On <!-- readme-numbers:demo-link -->9 Gbit/s<!-- /readme-numbers -->: "
             "<!-- readme-numbers:demo-efficiency -->old<!-- /readme-numbers -->; "
             "<!-- readme-numbers:demo-1node-ips -->old<!-- /readme-numbers -->; "
             "<!-- readme-numbers:demo-sent -->old\nMB<!-- /readme-numbers -->; "
             "<!-- readme-numbers:demo-state -->old<!-- /readme-numbers -->; "
             "<!-- readme-numbers:demo-prediction -->old<!-- /readme-numbers -->.\n")
STALE = ("FULL_SHARD (measured <!-- readme-numbers:demo-measured -->2020-01-01"
         "<!-- /readme-numbers --> on <!-- readme-numbers:demo-host -->9 CPU cores"
         "<!-- /readme-numbers -->:\n<!-- readme-numbers:fsdp-peak-gib -->1.03, 0.96, 0.92 GiB"
         "<!-- /readme-numbers -->), DDP (<!-- readme-numbers:ddp-peak-gib -->1.26 GiB"
         "<!-- /readme-numbers -->) and the rest, untouched: 1.26 GiB.\n" + NEW_SPANS)


def test_spans_are_rewritten_from_the_records_and_nothing_else(demo_dir, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(STALE)
    assert readme_numbers.main([str(demo_dir), "--readme", str(readme), "--check"]) == 1
    assert readme.read_text() == STALE  # --check writes nothing
    assert readme_numbers.main([str(demo_dir), "--readme", str(readme)]) == 0
    fsdp = ", ".join(f"{v:.2f}" for v in _peaks(demo_dir, "FULL_SHARD"))
    ddp = sorted(f"{v:.2f}" for v in _peaks(demo_dir, "DDP"))
    ddp = ddp[0] if ddp[0] == ddp[-1] else f"{ddp[0]}-{ddp[-1]}"
    assert readme.read_text() == (
        "FULL_SHARD (measured <!-- readme-numbers:demo-measured -->2026-11-21"
        f"<!-- /readme-numbers --> on <!-- readme-numbers:demo-host -->{_host(demo_dir)}"
        f"<!-- /readme-numbers -->:\n<!-- readme-numbers:fsdp-peak-gib -->{fsdp} GiB"
        f"<!-- /readme-numbers -->), DDP (<!-- readme-numbers:ddp-peak-gib -->{ddp} GiB"
        "<!-- /readme-numbers -->) and the rest, untouched: 1.26 GiB.\n"
        "On <!-- readme-numbers:demo-link -->0.5 Gbit/s<!-- /readme-numbers -->: "
        f"<!-- readme-numbers:demo-efficiency -->{_efficiencies(demo_dir)}"
        "<!-- /readme-numbers -->; "
        f"<!-- readme-numbers:demo-1node-ips -->{_one_node(demo_dir)}"
        "<!-- /readme-numbers -->; <!-- readme-numbers:demo-sent -->FULL_SHARD 302 MB, "
        "HYBRID_2GPU 130 MB, DDP 171 MB<!-- /readme-numbers -->; "
        "<!-- readme-numbers:demo-state -->DDP 4.00, 4.00, 4.00 GiB; FULL_SHARD 1.00, 0.50, "
        "0.25 GiB; HYBRID_2GPU 2.00, 2.00, 2.00 GiB<!-- /readme-numbers -->; "
        f"<!-- readme-numbers:demo-prediction -->{_prediction(demo_dir)}"
        "<!-- /readme-numbers -->.\n")
    assert "fsdp-peak-gib: '1.03, 0.96, 0.92 GiB' -> " in capsys.readouterr().out
    assert readme_numbers.main([str(demo_dir), "--readme", str(readme), "--check"]) == 0


def _scaled_copy(demo_dir: Path, tmp_path: Path, strategy: str, factor: float) -> Path:
    """A copy of the demo sweep whose ``strategy`` 4-node run measured ``factor`` x the
    images/s (summary and every window): another run of the demo."""
    import shutil

    copy = tmp_path / f"again-{factor}"
    shutil.copytree(demo_dir, copy)
    _scale_run(_run(copy, strategy, 2), factor)
    return copy


def _scale_run(run: Path, factor: float) -> None:
    """Multiply the images/s a run measured (its summary and every window) by ``factor``."""
    summary = json.loads((run / "summary.json").read_text())
    for key in ("ips", "ips_per_gpu", "ips_min", "ips_max"):  # the windows' figures too
        if summary.get(key) is not None:
            summary[key] *= factor
    (run / "summary.json").write_text(json.dumps(summary))
    windows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({**w, "ips": w["ips"] * factor}) + "\n" for w in windows))


def test_a_machine_of_another_speed_is_named_before_the_efficiencies(demo_dir, tmp_path,
                                                                      capsys):
    """Every point of a new run twice as fast (another machine): the 1-node images/s lie
    outside the printed ones and --check says so first; the efficiencies, each over its
    own 1-node point, agree. Only the 4-node runs twice as fast: the efficiencies fail, the
    1-node points agree, and no word of another machine."""
    import shutil

    readme = tmp_path / "README.md"
    readme.write_text(STALE)
    assert readme_numbers.main([str(demo_dir), "--readme", str(readme)]) == 0
    capsys.readouterr()
    for name, nodes in (("faster", range(3)), ("four-faster", (2,))):
        copy = tmp_path / name
        shutil.copytree(demo_dir, copy)
        for strategy in STRATEGIES:
            for j in nodes:
                _scale_run(_run(copy, strategy, j), 2.0)
        assert readme_numbers.main([str(copy), "--readme", str(readme), "--check"]) == 1
        lines = capsys.readouterr().out.splitlines()
        if name == "faster":
            assert len(lines) == 1 and lines[0].startswith("demo-1node-ips: FULL_SHARD "), lines
            assert lines[0].endswith(readme_numbers.SPEED_HINT)
            assert all(f"{s} " in lines[0] for s in STRATEGIES)
        else:
            assert len(lines) == 1 and lines[0].startswith("demo-efficiency: "), lines
            assert readme_numbers.SPEED_HINT not in lines[0]


@pytest.mark.parametrize(("factor", "status"), [(1.0005, 0), (0.7, 1)])
def test_check_passes_a_new_run_within_the_printed_spread_and_only_then(
        demo_dir, tmp_path, capsys, factor, status):
    readme = tmp_path / "README.md"
    readme.write_text(STALE)
    assert readme_numbers.main([str(demo_dir), "--readme", str(readme)]) == 0
    capsys.readouterr()
    again = _scaled_copy(demo_dir, tmp_path, "FULL_SHARD", factor)
    assert readme_numbers.main([str(again), "--readme", str(readme), "--check"]) == status
    out = capsys.readouterr().out
    if status:  # one line naming the span, the strategy and the printed spread
        assert out.startswith("demo-efficiency: FULL_SHARD ") and " outside " in out, out
        assert "HYBRID_2GPU" not in out and "DDP" not in out
    else:
        assert out == ""


def test_several_demos_are_repeats_whose_span_a_new_run_must_fall_in(demo_dir, tmp_path,
                                                                     capsys):
    """Two demos, the second's FULL_SHARD 4-node run at 0.8x: the efficiency printed is the
    median of both demos' and its bracket spans both runs' windows (each over its own 1-node
    point); a third run between them agrees, one below both does not."""
    readme = tmp_path / "README.md"
    readme.write_text(STALE)
    slow = _scaled_copy(demo_dir, tmp_path, "FULL_SHARD", 0.8)
    assert readme_numbers.main([str(demo_dir), str(slow), "--readme", str(readme)]) == 0
    capsys.readouterr()
    one = readme_numbers.efficiency(points_table(collect_runs(demo_dir)))
    both = readme_numbers.efficiency([points_table(collect_runs(d)) for d in (demo_dir, slow)])
    assert both in readme.read_text()
    (_, fast_low, fast_high), (value, low, high) = (
        [float(x) for x in re.search(r"FULL_SHARD ([\d.]+) \(([\d.]+)-([\d.]+)\)", t).groups()]
        for t in (one, both))
    # each demo over its own ideal, the span from the slow run's slowest window to the fast
    # run's fastest: wider than either run
    assert high == fast_high and low < 0.82 * fast_low and low < value < high
    assert readme_numbers.main([str(_scaled_copy(demo_dir, tmp_path, "FULL_SHARD", 0.9)),
                                "--readme", str(readme), "--check"]) == 0
    assert readme_numbers.main([str(_scaled_copy(demo_dir, tmp_path, "FULL_SHARD", 0.6)),
                                "--readme", str(readme), "--check"]) == 1


def test_measured_memory_agrees_within_the_tolerance_number_by_number():
    check = readme_numbers.check_span
    assert check("fsdp-peak-gib", "1.12, 1.14, 1.06 GiB", "1.11, 1.13, 1.07 GiB") is None
    assert check("ddp-peak-gib", "1.20 GiB", "1.19-1.21 GiB") is None  # a range: its ends
    assert check("ddp-peak-gib", "1.20 GiB", "1.19-1.30 GiB") is not None
    assert "more than 0.05 GiB apart" in check("fsdp-peak-gib", "1.12, 1.14, 1.06 GiB",
                                                "1.12, 1.14, 0.96 GiB")
    assert check("demo-state", "FULL_SHARD 0.16 GiB", "FULL_SHARD 0.15 GiB") is not None


def test_check_compares_a_span_without_a_spread_exactly_and_never_the_day():
    assert readme_numbers.check_span("demo-measured", "2026-11-26", "2026-11-27") is None
    assert readme_numbers.check_span("demo-link", "0.5 Gbit/s", "1 Gbit/s") == (
        "demo-link: '0.5 Gbit/s' -> '1 Gbit/s'")
    printed = "FULL_SHARD 0.30 (0.28-0.33), DDP 0.40 (0.35-0.45)"
    assert readme_numbers.check_span("demo-efficiency", printed,
                                     "FULL_SHARD 0.33 (0.3-0.4), DDP 0.35 (0.3-0.4)") is None
    assert readme_numbers.check_span("demo-efficiency", printed, "FULL_SHARD 0.33, DDP 0.4")
    printed = "median 9%, worst 15% over 9 points"
    assert readme_numbers.check_span("demo-prediction", printed,
                                     "median 15%, worst 40% over 9 points") is None
    assert readme_numbers.check_span("demo-prediction", printed,
                                     "median 16%, worst 20% over 9 points") == (
        "demo-prediction: median 16% outside the printed 0-15%")


def test_the_prediction_error_is_the_median_and_worst_over_points():
    points = pd.DataFrame({"ips": [10.0, 20.0, 40.0, 8.0], "pred_ips": [11.0, 15.0, 40.0, None]})
    assert readme_numbers.prediction_error(points) == "median 10%, worst 25% over 3 points"


@pytest.mark.parametrize(("text", "message"), [
    (STALE.replace("ddp-peak-gib", "ddp-peak"), "span ddp-peak is not one this script fills"),
    (STALE.split("), DDP")[0], "no span ddp-peak-gib in the file; mark where it goes"),
])
def test_unknown_or_missing_spans_are_refused_in_one_line(demo_dir, tmp_path, capsys, text,
                                                          message):
    readme = tmp_path / "README.md"
    readme.write_text(text)
    assert readme_numbers.main([str(demo_dir), "--readme", str(readme)]) == 2
    # the last line (a logging handler an earlier test left on a closed stream may print a
    # "--- Logging error ---" report before it, under pytest-xdist)
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.rstrip("\n").splitlines()[-1].startswith(f"error: {message}")
    assert err.count("error: ") == 1
    assert readme.read_text() == text


def test_a_sweep_without_the_demos_points_is_refused(tmp_path, capsys, configs):
    sweep_dir = tmp_path / "sweep"
    _write_run(sweep_dir / "0", configs["DDP"], 1, 20, random.Random(1))
    readme = tmp_path / "README.md"
    readme.write_text(STALE)
    assert readme_numbers.main([str(sweep_dir), "--readme", str(readme)]) == 2
    assert "no completed FULL_SHARD point" in capsys.readouterr().err
    for i, model in enumerate(("vit_base", "vit_huge")):  # another study: two models
        info = synthetic.run_info(configs["FULL_SHARD"], model, 1, 0)
        info |= {"started_at": "2026-11-20T10:00:00+00:00",
                 "device": {**info["device"], "host_cpus": 2}}
        synthetic.write_synthetic_run(sweep_dir / f"fs{i}", info, "completed", random.Random(i))
    assert readme_numbers.main([str(sweep_dir), "--readme", str(readme)]) == 2
    assert "FULL_SHARD has more than one point at a node count" in capsys.readouterr().err
    assert readme.read_text() == STALE


def test_the_readme_marks_every_span_the_script_fills():
    spans = [m["name"] for m in readme_numbers.SPAN.finditer((REPO / "README.md").read_text())]
    assert sorted(spans) == sorted(readme_numbers.SPANS)
