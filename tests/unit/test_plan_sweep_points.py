"""The plan counts points as the sweep runs them. Review (a DGX 8xH100 user):

- ``repeat=0,1,2`` on the README's cuda8 study ranked FULL_SHARD at 8 nodes ``4=`` among two
  strategies: each of HYBRID's three repeats counted as a faster point;
- ``strategy=FULL_SHARD,HYBRID_8GPU,HYBRID_SHARD`` on cluster=cuda8 (HYBRID_SHARD is
  HYBRID_8GPU there) priced 15 points where the sweep refuses the command ("point 10 ... is
  point 5 ... again");
- ``--terms`` printed DDP points that do not fit with their step time and no word of it.
"""

from __future__ import annotations

import json
import re

import pytest

from vitfsdp.plan.__main__ import compose_all, main, plan_table, summary_line

#: The README's cuda8 study (`python -m vitfsdp.sweep -m cluster=cuda8 ...`, "On a Slurm
#: cluster"), as its plan: the partition named (`<PARTITION>` does not parse unquoted).
README_CUDA8 = ["-m", "cluster=cuda8", "cluster.partition=gpu", "cluster.venv=/path/to/venv",
                "model=vit_huge_patch14_224", "strategy=FULL_SHARD,HYBRID_SHARD",
                "nodes=1,2,4,8", "precision=bf16", "train.steps=100", "train.log_every=20",
                "repeat=0,1,2", "hydra.sweep.dir=/path/on/shared/storage/vith_scaling"]
DUPLICATED = ["model=vit_3b", "strategy=FULL_SHARD,HYBRID_8GPU,HYBRID_SHARD",
              "nodes=1,2,4,8,16", "cluster=cuda8"]


@pytest.fixture(scope="module")
def repeated():
    return plan_table(README_CUDA8[1:])


def test_repeats_of_a_point_share_its_rank_and_do_not_outrank_other_points(repeated):
    df = repeated
    at8 = df[df["nodes"] == 8]
    ranks = {(s, r, t) for s, r, t in zip(at8["strategy"], at8["rank"], at8["rank_tied"],
                                           strict=True)}
    assert ranks == {("HYBRID_8GPU", 1, False), ("FULL_SHARD", 2, False)}  # was 1= and 4=
    at1 = df[df["nodes"] == 1]  # two points within the error: a tie of two, three rows each
    assert set(at1["rank"]) == {1} and set(at1["rank_tied"]) == {True}
    assert len(df) == 24 and df["point_id"].nunique() == 8  # --json/--csv: the point of a run


def test_the_summary_counts_points_once_and_prices_every_run(repeated):
    line = summary_line(repeated)
    assert line.startswith("8 point(s) (24 runs with their repeats): 8 fit, 0 predicted not "
                           "to fit"), line
    runs = line.split("\n")[1]
    assert runs.startswith("the 8 that run (24 runs with their repeats): ")
    assert "(300 s a run, assumed)" in runs
    once = summary_line(repeated[repeated["overrides"].str.contains("repeat=0")])
    hours = [float(re.search(r": ([\d.,]+) node hours", t.split("\n")[1]).group(1))
             for t in (line, once)]
    assert hours[0] == pytest.approx(3 * hours[1], rel=0.02)
    assert "three repeats" not in line  # it has them


def test_a_point_the_sweep_refuses_as_an_earlier_one_is_said_first_and_planned_once(capsys):
    assert main(DUPLICATED) == 0
    out, err = capsys.readouterr()
    refused = err.splitlines()[1:]
    # the sweep's own wording may change (vitfsdp.sweep.check): its points, loosely
    assert [re.findall(r"point (\d+)", ln)[:2] for ln in refused] == [
        [str(n), str(n - 5)] for n in range(10, 15)]
    assert all("HYBRID_SHARD" in ln and "HYBRID_8GPU" in ln for ln in refused)
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] == ["vit_3b"]]
    assert len(rows) == 10 and len({(r[1], r[2]) for r in rows}) == 10
    assert "\n10 point(s): 10 fit" in out
    assert main([*DUPLICATED, "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 10 and "is point 5" in err  # stdout stays JSON


def test_the_plan_finds_the_points_the_sweep_finds_repeated():
    """The plan's check (vitfsdp.plan.impossible.repeated_points, below the sweep's layer) and
    the sweep's (vitfsdp.sweep.check._repeated_points) name the same points."""
    from pathlib import Path

    from vitfsdp.launch.resume import config_hash
    from vitfsdp.plan.impossible import repeated_points
    from vitfsdp.sweep.check import _repeated_points
    from vitfsdp.sweep.point import Point

    points = [Point(n, o, cfg, Path(f"/tmp/p{n}"), config_hash(cfg))
              for n, (o, cfg) in enumerate(compose_all([*DUPLICATED, "repeat=0,1"]))]
    named = [[re.findall(r"point (\d+)", ln)[:2] for ln in lines]
             for lines in (repeated_points(points), _repeated_points(points))]
    assert named[0] == named[1] and len(named[0]) == 10


def test_terms_says_which_points_fit_and_what_the_sweep_would_run(capsys):
    assert main(["model=vit_5b", "strategy=FULL_SHARD,HYBRID_8GPU,DDP", "nodes=1,2,16",
                 "cluster=cuda8", "--terms"]) == 0
    out = capsys.readouterr().out
    rows = {(r[1], r[2]): r[3] for r in (ln.split() for ln in out.splitlines())
            if r[:1] == ["vit_5b"] and len(r) > 4}
    assert out.splitlines()[0].split()[:4] == ["model", "strategy", "nodes", "fits"]
    assert {v for (s, _), v in rows.items() if s == "DDP"} == {"NO"}
    assert {v for (s, _), v in rows.items() if s != "DDP"} == {"squeezed"}
    flat = " ".join(out.split())
    assert ("9 point(s): 0 fit, 6 squeezed (the sweep runs them, warned), 3 predicted not to "
            "fit (the sweep skips them)") in flat
    assert "vit_5b: 0 of 9 points fit; 6 would with train.activation_checkpointing=true" in flat
