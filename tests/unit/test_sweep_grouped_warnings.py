"""The plan's per-point warnings of one kind come as one line per model: a DGX user's
ViT-1B/3B/5B sweep printed 30 near-identical ViT-5B 'squeezed' lines (one per strategy, node
count and repeat) that buried the one warning that mattered. Now one line counts them, names
them compactly and keeps the first one's full reason; each point's own line is at DEBUG
(``hydra.verbose=vitfsdp.sweep``); warnings of another kind or model stay apart. A rerun's
'skip' lines (one per earlier status), the earlier attempts it moves aside and the sweep end's
skipped_infeasible points (one per kind and model) come the same way."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from vitfsdp.launch import LaunchOptions
from vitfsdp.sweep import choose, report
from vitfsdp.sweep.point import points_span


def _point(num, model, strategy, nodes, repeat):
    swept = [f"repeat={repeat}", f"model={model}", f"strategy={strategy}", f"nodes={nodes}"]
    return SimpleNamespace(num=num, cfg=num, swept=swept, overrides=swept)


def _squeezed(margin):
    return SimpleNamespace(fits=False, squeezed=True, tight=False, margin_gib=margin,
                           reason=f"predicted reserved peak, margin {margin:+.1f} GiB; squeezed")


def _consult(monkeypatch, caplog, points, verdicts):
    monkeypatch.setattr(choose.planner, "predict", lambda cfg: verdicts[cfg])
    with caplog.at_level(logging.DEBUG, logger="vitfsdp.sweep"):
        run, skipped = choose._consult_plan(points, LaunchOptions())
    return run, skipped, caplog.records


def test_thirty_squeezed_points_of_a_model_are_one_line_that_keeps_the_first_reason(
        monkeypatch, caplog):
    points = [_point(n, "vit_5b", s, nodes, r) for n, (r, s, nodes) in enumerate(
        (r, s, nodes) for r in (0, 1, 2) for s in ("FULL_SHARD", "HYBRID_8GPU")
        for nodes in (1, 2, 4, 8, 16))]
    points.append(_point(30, "vit_3b", "FULL_SHARD", 1, 0))
    verdicts = {p.num: _squeezed(-10.0 + 0.3 * p.num) for p in points}
    verdicts[31] = SimpleNamespace(fits=True, squeezed=False, tight=True, margin_gib=0.5,
                                   reason="tight reason")
    points.append(_point(31, "vit_5b", "FULL_SHARD", 32, 0))
    run, skipped, records = _consult(monkeypatch, caplog, points, verdicts)
    assert len(run) == 32 and skipped == {}
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert warnings == [
        "30 points squeezed (repeat=0,1,2 model=vit_5b strategy=FULL_SHARD,HYBRID_8GPU "
        "nodes=1,2,4,8,16: every combination), margins -10.0 to -1.3 GiB: the first, repeat=0 "
        "model=vit_5b strategy=FULL_SHARD nodes=1: predicted reserved peak, margin -10.0 GiB; "
        "squeezed; running them (hydra.verbose=vitfsdp.sweep names each)",
        # another model, another kind: their own lines, as one point's always were
        "repeat=0 model=vit_3b strategy=FULL_SHARD nodes=1: predicted reserved peak, margin "
        "-1.0 GiB; squeezed; running it",
        "repeat=0 model=vit_5b strategy=FULL_SHARD nodes=32: tight reason; running it"]
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert len(debug) == 30 and debug[29] == (
        "repeat=2 model=vit_5b strategy=HYBRID_8GPU nodes=16: predicted reserved peak, "
        "margin -1.3 GiB; squeezed; running it")


def test_skipped_points_of_a_model_are_one_line_and_each_is_recorded(monkeypatch, caplog):
    points = [_point(n, "vit_5b", "NO_SHARD", nodes, 0) for n, nodes in enumerate((1, 2))]
    verdicts = {n: SimpleNamespace(fits=False, squeezed=False, tight=False, margin_gib=-50.0,
                                   reason="does not fit") for n in (0, 1)}
    monkeypatch.setattr(choose, "_record_infeasible",
                        lambda p, pred: {"status": "skipped_infeasible"})
    run, skipped, records = _consult(monkeypatch, caplog, points, verdicts)
    assert run == [] and list(skipped) == [0, 1]
    (line,) = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert line.startswith("2 points predicted not to fit (repeat=0 model=vit_5b "
                           "strategy=NO_SHARD nodes=1,2: every combination), margins -50.0 "
                           "to -50.0 GiB: the first, repeat=0 model=vit_5b strategy=NO_SHARD "
                           "nodes=1: does not fit; skipped (skipped_infeasible; "
                           "--run-infeasible runs them)"), line


def test_a_span_that_is_not_every_combination_says_how_many_of_them():
    points = [_point(0, "a", "FULL_SHARD", 1, 0), _point(1, "a", "HYBRID_8GPU", 2, 0),
              _point(2, "a", "FULL_SHARD", 2, 0)]
    assert points_span(points) == ("repeat=0 model=a strategy=FULL_SHARD,HYBRID_8GPU "
                                   "nodes=1,2: 3 of their 4 combinations")


def _ran(num, model, strategy, nodes, repeat, tmp_path):
    """A point with its run directory (named as a sweep names it)."""
    p = _point(num, model, strategy, nodes, repeat)
    p.run_dir = tmp_path / f"{num}_{','.join(p.swept)}"
    return p


def _said(caplog, level):
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_a_rerun_says_the_points_it_skips_in_a_line_per_earlier_status(tmp_path, caplog):
    """A rerun of a 90-point sweep printed 'skip ...: completed in ...' 90 times."""
    points = [_ran(n, "vit_5b", s, nodes, r, tmp_path) for n, (r, s, nodes) in enumerate(
        (r, s, nodes) for r in (0, 1, 2) for s in ("FULL_SHARD", "HYBRID_8GPU")
        for nodes in (1, 2, 4, 8, 16))]
    settled = [(p, f"completed in {p.run_dir.name}", "completed") for p in points[:29]]
    settled.append((points[29], "failed in x; --rerun-failed runs it again", "failed"))
    with caplog.at_level(logging.DEBUG, logger="vitfsdp.sweep"):
        choose._say_settled(settled)
    assert _said(caplog, logging.INFO) == [
        "skip 29 points completed earlier (repeat=0,1,2 model=vit_5b strategy=FULL_SHARD,"
        "HYBRID_8GPU nodes=1,2,4,8,16: 29 of their 30 combinations): the first, repeat=0 "
        "model=vit_5b strategy=FULL_SHARD nodes=1: completed in 0_repeat=0,model=vit_5b,"
        "strategy=FULL_SHARD,nodes=1 (hydra.verbose=vitfsdp.sweep names each)",
        # one point of a status: its own line, as before
        "skip repeat=2 model=vit_5b strategy=HYBRID_8GPU nodes=16: failed in x; --rerun-failed "
        "runs it again"]
    debug = _said(caplog, logging.DEBUG)
    assert len(debug) == 29 and debug[28].startswith("skip repeat=2 model=vit_5b "
                                                     "strategy=HYBRID_8GPU nodes=8: completed")


def test_the_sweeps_end_says_its_skipped_points_in_a_line_per_kind(tmp_path, caplog):
    """The end of a sweep named each skipped_infeasible point on a line of its own (12 of a
    cuda8 ViT-5B sweep's DDP and NO_SHARD points, 2 HYBRID_16GPU points that cannot run);
    the points that failed in their runs keep a line each."""
    points = [_ran(n, "vit_5b", s, nodes, 0, tmp_path)
              for n, (s, nodes) in enumerate((s, nodes) for s in ("DDP", "NO_SHARD")
                                             for nodes in (1, 2, 4))]
    cannot = [_ran(6 + r, "vit_5b", "HYBRID_16GPU", 1, r, tmp_path) for r in (0, 1)]
    failed = _ran(8, "vit_5b", "FULL_SHARD", 1, 0, tmp_path)
    summaries = ([{"status": "skipped_infeasible", "reason": f"predicted {n}"}
                  for n in range(6)]
                 + [{"status": "skipped_infeasible", "reason": "cannot run: no tiling"}] * 2
                 + [{"status": "failed", "reason": "boom"}])
    every = [*points, *cannot, failed]
    with caplog.at_level(logging.DEBUG, logger="vitfsdp.sweep"):
        report._report(every, summaries, tmp_path)
    said = [x for x in _said(caplog, logging.INFO) if x.startswith("  ")]
    assert said == [
        f"  failed repeat=0 model=vit_5b strategy=FULL_SHARD nodes=1: boom (records and "
        f"logs: {failed.run_dir})",
        "  6 skipped_infeasible points (repeat=0 model=vit_5b strategy=DDP,NO_SHARD "
        "nodes=1,2,4: every combination): the first, repeat=0 model=vit_5b strategy=DDP "
        f"nodes=1: predicted 0 (records: {points[0].run_dir}) (hydra.verbose=vitfsdp.sweep "
        "names each)",
        "  2 skipped_infeasible points (repeat=0,1 model=vit_5b strategy=HYBRID_16GPU "
        "nodes=1: every combination): the first, repeat=0 model=vit_5b "
        f"strategy=HYBRID_16GPU nodes=1: cannot run: no tiling (records: {cannot[0].run_dir}) "
        "(hydra.verbose=vitfsdp.sweep names each)"]
    assert len([x for x in _said(caplog, logging.DEBUG) if "skipped_infeasible" in x]) == 8
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vitfsdp.sweep"):  # a point not ended yet
        report._report_not_ended(every, [*summaries[:-1], {"status": "script"}], tmp_path)
    assert [x.split(" (")[0] for x in _said(caplog, logging.INFO)] == [
        "6 skipped_infeasible points", "2 skipped_infeasible points"]


def test_earlier_attempts_moved_aside_are_one_line(tmp_path, caplog):
    points = [_ran(n, "a", "FULL_SHARD", nodes, 0, tmp_path) for n, nodes in enumerate((1, 2))]
    with caplog.at_level(logging.DEBUG, logger="vitfsdp.sweep"):
        choose._say_kept([(p, p.run_dir / "attempts" / "0") for p in points])
    assert _said(caplog, logging.INFO) == [
        "earlier attempts of 2 points kept in their run directories' attempts/<n>/ (repeat=0 "
        "model=a strategy=FULL_SHARD nodes=1,2: every combination): the first in "
        f"{points[0].run_dir}/attempts/0 (hydra.verbose=vitfsdp.sweep names each)"]
    assert len(_said(caplog, logging.DEBUG)) == 2


def test_no_news_says_nothing(caplog):
    with caplog.at_level(logging.DEBUG, logger="vitfsdp.sweep"):
        choose._say_kept([])
        choose._say_settled([])
        report._say_skipped([])
    assert caplog.records == []
