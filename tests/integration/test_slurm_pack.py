"""Packing (``hydra.launcher.pack=by_nodes``) and ``cluster.max_jobs``: the pack script and
its time limit, the submission within the job limit, and on the virtual cluster (skipped
unless ``VITFSDP_SLURM=1``) a 6-point sweep under a QOS of 2 jobs per user.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import read, run_module
from tests.integration.test_slurm_scripts import compose_cfg
from tests.integration.test_slurm_scripts_submit import _rows
from tests.integration.test_virtual_slurm import NOT_STARTED, require_cluster, slurm
from vitfsdp.launch import pack
from vitfsdp.sweep import Point

SWEEP_DIR = Path("/lustre/proj/vitfsdp/runs/sweep")  # rendered only: need not exist


def _points(*node_counts: int, time: str = "00:10:00") -> list[Point]:
    points = []
    for num, nodes in enumerate(node_counts):
        overrides = ["cluster=virtual", f"nodes={nodes}", f"train.seed={num}",
                     f"cluster.time={time}"]
        points.append(Point(num, overrides, compose_cfg(*overrides), SWEEP_DIR / f"{num}_p"))
    return points


def test_points_pack_by_node_count_with_summed_time_limits():
    points = _points(1, 2, 1, 1)
    packs = pack.make_packs(points, {2: 150})  # the plan predicts point 2's run time only
    assert [[p.num for p in pk.points] for pk in packs] == [[0, 2, 3], [1]]
    assert packs[0].time_limit_s == pack.PACK_START_S + 600 + 150 + 600
    assert packs[1].time_limit_s == pack.PACK_START_S + 600
    assert pack.slurm_time(packs[1].time_limit_s) == "0-00:12:00"
    assert pack.slurm_time(90_000) == "1-01:00:00"


def _rounds(models=("vit_tiny",), times=None) -> list[Point]:
    """repeat=0,1,2 × models × FULL_SHARD, HYBRID_2GPU at 4 nodes, in the sweep's order
    (repeat slowest); ``times``: strategy → cluster.time, as cluster.time=auto resolves one
    per point (the same for each repeat of a point)."""
    points = []
    for repeat in range(3):
        for model in models:
            for strategy in ("FULL_SHARD", "HYBRID_2GPU"):
                time = (times or {}).get(strategy, "00:10:00")
                overrides = ["cluster=virtual", "nodes=4", f"model={model}",
                             f"strategy={strategy}", f"repeat={repeat}", f"cluster.time={time}"]
                num = len(points)
                points.append(Point(num, overrides, compose_cfg(*overrides),
                                    SWEEP_DIR / f"{num}_p"))
    return points


def _shown(packs) -> list[list[str]]:
    return [[f"r{p.cfg.repeat} {p.cfg.model.name} {p.cfg.strategy.name}" for p in pk.points]
            for pk in packs]


@pytest.mark.parametrize("times", [None, {"FULL_SHARD": "00:10:00", "HYBRID_2GPU": "00:12:00"}],
                         ids=["one cluster.time", "a time per point (auto)"])
def test_a_pack_holds_one_rounds_competing_strategies(times):
    """Before, packs grouped on the whole profile (its resolved cluster.time with it) in
    point order: FULL_SHARD repeat 0, 1 and 2 in one allocation and HYBRID_2GPU's in another
    (a time per point, as cluster.time=auto gives), or all six in one: the spread of the
    repeats measured one allocation, and a difference between strategies could be the
    nodes'. Now a pack holds one round's strategies, each round its own allocation, round 0
    first; its time is the sum of its points' (they run in turn)."""
    packs = pack.make_packs(_rounds(times=times), {})
    assert _shown(packs) == [[f"r{r} vit_tiny FULL_SHARD", f"r{r} vit_tiny HYBRID_2GPU"]
                             for r in range(3)]
    hybrid_s = 720 if times else 600
    assert [pk.time_limit_s for pk in packs] == [pack.PACK_START_S + 600 + hybrid_s] * 3


def test_the_queue_cap_splits_a_round_by_model_keeping_its_strategies_together():
    """Under a 35-minute cap a round's four 10-minute points (2 models × 2 strategies) take
    two packs. Filled in point order, the first would hold vit_tiny's two strategies and
    vit_base's FULL_SHARD (32 minutes with the start), leaving vit_base's HYBRID_2GPU to
    another allocation; now each model's strategies share one, each pack within the cap."""
    from vitfsdp.launch import QueueLimit

    points = _rounds(models=("vit_tiny", "vit_base"))
    for p in points:
        p.cfg.cluster.queue_limits = [QueueLimit(max_time="00:35:00")]
    packs = pack.make_packs(points, {})
    assert _shown(packs) == [[f"r{r} {m} {s}" for s in ("FULL_SHARD", "HYBRID_2GPU")]
                             for r in range(3) for m in ("vit_tiny", "vit_base")]
    assert all(pk.time_limit_s <= 35 * 60 for pk in packs)
    assert {pk.nodes for pk in packs} == {4}


def test_pack_script_runs_each_point_as_its_own_step():
    points = _points(2, 2, 2)
    (pk,) = pack.make_packs(points, {})
    text = pack.render(pk, SWEEP_DIR, "vitfsdp", "/lustre/proj/vitfsdp")
    assert "#SBATCH --nodes=2\n" in text and "#SBATCH --time=0-00:32:00\n" in text
    assert "#SBATCH --signal=USR2@20\n" in text
    assert f"#SBATCH --output={SWEEP_DIR}/packs/pack0-%j.out\n" in text
    steps = re.findall(r"^srun .*\n.*hydra\.run\.dir=.*(\d)_p", text, flags=re.M)
    assert steps == ["0", "1", "2"]  # one step per point, in order
    for position in range(3):
        assert f"srun --job-name=vitfsdp-point{position} " in text  # its step, by name
        assert f"export MASTER_PORT=$((PACK_PORT + {position}))" in text
        assert f"--output={SWEEP_DIR}/{position}_p/logs/task%t.log" in text
    # a failed point goes on to the next; a stop on SIGUSR2 (exit 3) ends the pack
    assert text.count("|| rc=$?") == 3 and text.count("exit 3; fi") == 3
    assert "set -e" not in text.split("PACK_PORT=")[1]
    record = pack.pack_job_record(pk, points[1], 1)
    assert record["pack"]["position"] == 1 and record["submitted_with"] == "pack"


def test_the_pack_script_reads_the_stop_file_before_each_point_after_the_first():
    """Before each point after the first, the pack's script looks for its job's line in the
    sweep's stop file (its absolute path: packs/stop) and ends there, exit 4, saying why;
    the first point has no check, and a pack written to be submitted by hand none at all."""
    (pk,) = pack.make_packs(_points(2, 2, 2), {})
    text = pack.render(pk, SWEEP_DIR, "vitfsdp", "/lustre/proj/vitfsdp")

    def check(n: int) -> str:
        return (f'if stop="$(grep -m 1 -e "^${{SLURM_JOB_ID}} " {SWEEP_DIR}/packs/stop '
                f'2>/dev/null)"; then echo "the sweep stopped this pack before point {n}/3 '
                f'({4 - n} not run): ${{stop#* }}"; exit 4; fi\n')

    assert text.count("grep -m 1") == 2 and check(1) not in text
    for n in (2, 3):
        point = text.split(f"# point {n}/3: ")[1]
        assert point.index(check(n)) < point.index("srun ")
    assert "grep -m 1" not in pack.render(pk, SWEEP_DIR, "vitfsdp", "/lustre/proj/vitfsdp",
                                          by_hand=True)


def _stub_bin(tmp_path: Path) -> Path:
    """A folder of stand-ins: ``srun`` (writes its step's name to $SRUN_CALLS, appends
    $STOP_LINE to $STOP_FILE where set, as the sweep's stop does while a point runs, and
    fails like a point in a broken environment) and ``scontrol`` (one node)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        '#!/bin/sh\necho "$1" >> "$SRUN_CALLS"\n'
        'if [ -n "$STOP_LINE" ]; then mkdir -p "$(dirname "$STOP_FILE")"; '
        'echo "$STOP_LINE" >> "$STOP_FILE"; fi\nexit 1\n')
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho vnode1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("stop_line", [None, "41 another pack", "420 a longer job id",
                                       "42 3 jobs failed the same way; fix it and rerun"])
def test_a_pack_named_in_the_stop_file_runs_no_further_point(tmp_path, stop_line):
    """The rendered script, run by bash with stand-ins for srun and scontrol (job 42): a
    line for job 42 appended to the stop file while its first point runs ends the pack
    before the second (exit 4, the reason in its output: before, it ran all three, each
    failing the same way); without the file, or with other jobs' lines (41, 420), every
    point runs."""
    sweep_dir = tmp_path / "sweep"
    points = [Point(p.num, p.overrides, p.cfg, sweep_dir / f"{p.num}_p")
              for p in _points(1, 1, 1)]
    (pk,) = pack.make_packs(points, {})
    script = tmp_path / "pack0.sbatch"
    script.write_text(pack.render(pk, sweep_dir, "vitfsdp", str(tmp_path)))
    calls = tmp_path / "srun_calls"
    env = {**os.environ, "PATH": f"{_stub_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}",
           "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "vnode1", "SRUN_CALLS": str(calls),
           "STOP_FILE": str(sweep_dir / "packs" / "stop"), "STOP_LINE": stop_line or ""}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=60)
    steps = calls.read_text().split()
    if stop_line and stop_line.startswith("42 "):
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert steps == ["--job-name=vitfsdp-point0"]
        assert proc.stdout.strip().splitlines()[-1] == (
            "the sweep stopped this pack before point 2/3 (2 not run): 3 jobs failed the "
            "same way; fix it and rerun")
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert steps == [f"--job-name=vitfsdp-point{i}" for i in range(3)]


def test_stop_packs_appends_a_line_per_pack_that_status_reads(tmp_path):
    """:func:`pack.stop_packs` appends ``<job id> <reason>`` (the reason on one line) for
    each pack; the status reads each pack's own, none for a pack not named."""
    from vitfsdp.launch.status import pack_stop_reason

    pack.stop_packs(tmp_path, ["7"], "an earlier stop")
    path = pack.stop_path(tmp_path)
    assert path == tmp_path.resolve() / "packs" / "stop"
    pack.stop_packs(tmp_path, ["12", "13"], "3 jobs failed\nthe same way")
    assert path.read_text() == ("7 an earlier stop\n12 3 jobs failed the same way\n"
                                "13 3 jobs failed the same way\n")
    assert pack_stop_reason(tmp_path, "13") == "3 jobs failed the same way"
    assert pack_stop_reason(tmp_path, "7") == "an earlier stop"
    assert pack_stop_reason(tmp_path, "1") is None and pack_stop_reason(tmp_path, None) is None
    assert pack_stop_reason(tmp_path / "elsewhere", "12") is None


def test_a_pack_probes_its_allocation_first_when_asked(tmp_path):
    """``cluster.probe=allocation``: the pack's first step runs the probe's worker on every
    rank of the allocation (its own port, after the points'), merging into the sweep's
    probe.json; its failure does not stop the points; the time limit allows for it; and the
    request names the pack's points. A profile that cannot run it is refused in one line."""
    points = [Point(n, o, compose_cfg(*o), SWEEP_DIR / f"{n}_p") for n, o in enumerate(
        [["cluster=virtual", "nodes=2", f"train.seed={n}", "cluster.time=00:10:00",
          "cluster.probe=allocation"] for n in range(2)])]
    (pk,) = pack.make_packs(points, {})
    assert pk.probes and pk.time_limit_s == pack.PACK_START_S + pack.PROBE_STEP_S + 1200
    text = pack.render(pk, SWEEP_DIR, "vitfsdp", "/lustre/proj/vitfsdp")
    probe_step = text.index("srun --job-name=vitfsdp-probe ")
    assert probe_step < text.index("srun --job-name=vitfsdp-point0 ")
    step = text[probe_step:].split("\n\n")[0]
    assert f"-m vitfsdp.probe.worker {SWEEP_DIR}/packs/probe0.json --merge " \
           f"{SWEEP_DIR}/probe.json" in step
    assert "|| echo " in step and "export MASTER_PORT=$((PACK_PORT + 2))" in text
    request = pack.probe_request(pk)
    assert request["nodes"] == 2 and request["points"] == [list(p.overrides) for p in points]
    with pytest.raises(ValueError, match="cluster.probe=allocation measures inside"):
        compose_cfg("cluster=local", "cluster.probe=allocation")


def test_submission_stays_within_max_jobs():
    submitted = []

    def unit(name: str, num_jobs: int = 1) -> pack.Unit:
        return pack.Unit(num_jobs, lambda: submitted.append(name) or [name])

    units = [unit("a"), unit("b"), unit("c"), unit("d", 3)]
    assert pack.submit_free(units, 2, num_alive=0) == 2 and submitted == ["a", "b"]
    assert pack.submit_free(units, 2, num_alive=2) == 0  # both still queued
    assert pack.submit_free(units, 2, num_alive=1) == 1 and submitted[-1] == "c"
    # a unit larger than the limit goes alone, once nothing is queued
    assert pack.submit_free(units, 2, num_alive=1) == 0
    assert pack.submit_free(units, 2, num_alive=0) == 1 and submitted[-1] == "d"
    assert [len(c) for c in pack.chunks(list(range(5)), 2)] == [2, 2, 1]
    assert [len(c) for c in pack.chunks(list(range(5)), None)] == [5]


QOS_WORDS = ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission "
             "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or "
             "time limits)")


def test_a_refusal_with_no_job_of_the_sweep_queued_names_sbatchs_words():
    """sbatch's refusal of a unit while none of the sweep's jobs is queued or running raises
    (no end to wait for), with sbatch's words on one line, as submitit and a pack's sbatch
    quote them; with a job queued it waits for its end."""

    def refused(message: str) -> pack.Unit:
        def submit() -> list[str]:
            raise RuntimeError(message)
        return pack.Unit(3, submit)

    for message in (QOS_WORDS, f"sbatch refused pack 0 (3 points of 1 node(s)): {QOS_WORDS}; "
                    "lower cluster.max_jobs to the site's limit"):
        units = [refused(message)]
        with pytest.raises(pack.SubmitRefused) as e:
            pack.submit_free(units, None, num_alive=0)
        assert e.value.num_jobs == 3 and units[0].job_ids is None
        assert e.value.words == QOS_WORDS.replace("\n", "; ")
        assert pack.submit_free(units, None, num_alive=1) == 0  # again once one has ended


def test_a_refused_first_submission_takes_back_what_it_wrote(tmp_path, monkeypatch):
    """A stand-in sbatch refuses the sweep's first pack: the sweep is refused in one line
    (sbatch's words, the fix), and the pack script, the points' job scripts and run
    directories it wrote are gone; a file there before stays."""
    from vitfsdp.launch import LaunchOptions
    from vitfsdp.sweep import SweepRefused
    from vitfsdp.sweep.slurm_jobs import launch_slurm

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(QOS_WORDS)} >&2\n"
                                    "exit 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "notes.txt").write_text("mine")
    points = [Point(n, o, compose_cfg(*o), sweep_dir / f"{n}_p") for n, o in enumerate(
        [["cluster=virtual", "cluster.qos=limit2", "nodes=1", f"train.seed={n}"]
         for n in range(2)])]
    with pytest.raises(SweepRefused) as e:
        launch_slurm(points, sweep_dir, LaunchOptions(pack="by_nodes"))
    line = str(e.value)
    assert "\n" not in line and line.startswith(
        "error: sbatch refused the sweep's first submission (1 job(s)): sbatch: error: "
        "QOSMaxSubmitJobPerUserLimit; sbatch: error: Batch job submission failed: ")
    assert line.endswith("or choose another cluster.qos (now limit2), then run the sweep "
                         "again"), line
    assert "cluster.max_jobs" not in line  # one job: fewer at once cannot help
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["notes.txt"]


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_a_first_submission_over_the_qos_limit_is_refused_in_one_line(tmp_path):
    """On the virtual cluster, a job array of 3 points in QOS limit2 (2 jobs a user): sbatch
    refuses the sweep's first submission; the sweep exits 2 with one line naming sbatch's
    words and cluster.max_jobs, and leaves no sweep directory that --status or a rerun would
    misread (none: it was new)."""
    require_cluster()
    sweep_dir = tmp_path / "sweep"
    proc = run_module(
        "vitfsdp.sweep", "-m", "model=vit_tiny", "cluster=virtual", "cluster.qos=limit2",
        "strategy=DDP,FULL_SHARD,SHARD_GRAD_OP", "nodes=1", f"hydra.sweep.dir={sweep_dir}",
        f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}", cwd=tmp_path,
        timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: sbatch refused the sweep's first submission (3 job(s)): "
                           "sbatch: error: QOSMaxSubmitJobPerUserLimit"), proc.stderr[-3000:]
    assert "set cluster.max_jobs to the site's limit on a user's queued jobs (below 3)" in line
    assert not sweep_dir.exists()


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_six_points_in_packs_under_a_two_job_limit(tmp_path):
    """The virtual cluster's QOS limit2 refuses a third job of a user: one job per point
    cannot queue 6 points; packed by node count (3 packs of 2 points: a step after another
    in one allocation) with cluster.max_jobs=2, the sweep submits the third pack once one
    has ended, and every point completes with its own records. (The script's loop over more
    points per pack is tested on the rendered script above.)"""
    require_cluster()
    held = []
    for _ in range(3):
        proc = slurm("sbatch", "--parsable", "--hold", "--qos=limit2", "-o", "/dev/null",
                     "--wrap", "true")
        held += [proc.stdout.strip()] if proc.returncode == 0 else []
    slurm("scancel", *held)
    assert len(held) == 2 and "QOSMaxSubmitJobPerUserLimit" in proc.stderr, proc.stderr
    sweep_dir = tmp_path / "sweep"
    proc = run_module(
        "vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
        "train.steps=2", "train.warmup_steps=1", "train.log_every=1",
        "train.local_batch_size=4", "cluster.gpus_per_node=1", "cluster.poll_s=1",
        "cluster.qos=limit2", "cluster.max_jobs=2", "nodes=1,2,3", "train.seed=1,2",
        "hydra.launcher.pack=by_nodes", f"hydra.sweep.dir={sweep_dir}",
        f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
        cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sweep done: 6 completed" in proc.stdout
    points = [p for p in sweep_dir.iterdir() if (p / "job.json").exists()]
    assert len(points) == 6
    packs: dict[str, list[int]] = {}
    for p in points:
        job, summary, run = read(p / "job.json"), read(p / "summary.json"), read(p / "run.json")
        assert summary["status"] == "completed" and summary["ips"] > 0
        assert len(read(p / "metrics.jsonl")) == 2  # its own windows
        assert run["world"]["size"] == run["config"]["nodes"]
        position = job["pack"]["position"]
        assert summary["slurm"]["job_id"] == f"{job['job_id']}.{position}"  # its own step
        assert summary["slurm"]["state"] == "COMPLETED"
        packs.setdefault(job["job_id"], []).append(position)
    assert sorted(sorted(v) for v in packs.values()) == [[0, 1]] * 3


#: The reason the breaker gives the points it held back, after its opening words.
BREAKER_WHY = re.compile(r"3 jobs failed before their first timed window with the same reason "
                         r"\(Slurm job .*Unable to find address for: ib0\); fix it and rerun")


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_the_breaker_cancels_a_pending_pack_and_stops_the_running_ones(tmp_path):
    """Packs (by_nodes) of 4 points in a broken environment (GLOO_SOCKET_IFNAME=ib0: every
    point fails at start-up): three packs (three cluster.sbatch_args, one shape each) run,
    the fourth is held in the queue. Once a point of each of the three has failed, the held
    pack is cancelled and its points are recorded cancelled with the breaker's reason; the
    packs still running run no further point (before: each ran its remaining points into
    the same failure): the breaker names them with the scancel of the point they run now,
    each ends at its next check of the stop file (exit 4), and the points it did not reach
    are recorded cancelled, held back, with the reason: with the failed ones, on the sweep's
    --rerun-failed line."""
    require_cluster()
    sweep_dir = tmp_path / "sweep"
    job_name = f"vitfsdp-test-{uuid.uuid4().hex[:8]}"
    try:  # the held pack goes even on a timeout
        proc = run_module(
            "vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
            "strategy=FULL_SHARD", "nodes=1", "train.seed=1,2,3,4",  # not repeats: a pack
            # holds one repeat round
            "+cluster.env.GLOO_SOCKET_IFNAME=ib0", "train.steps=4", "train.warmup_steps=1",
            "cluster.gpus_per_node=1", "cluster.poll_s=1",
            'cluster.sbatch_args=[],["--comment=b"],["--comment=c"],["--hold"]',
            "hydra.launcher.pack=by_nodes", f"hydra.sweep.dir={sweep_dir}",
            f"hydra.launcher.job_name={job_name}", cwd=tmp_path, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out[-3000:]
        points = [p for p in sweep_dir.iterdir() if (p / "job.json").exists()]
        held = [p for p in points if "--hold" in p.name]
        ran = [p for p in points if "--hold" not in p.name]
        (pack_id,) = {read(p / "job.json")["job_id"] for p in held}
        ran_ids = {read(p / "job.json")["job_id"] for p in ran}
        assert len(held) == 4 and len(ran_ids) == 3
        line = re.search(r"the points of 3 jobs failed before their first timed window with "
                         r"the same reason, none completed: (.*)$", out, re.M)
        assert line, out[-3000:]
        assert (f"Unable to find address for: ib0; 1 pending job cancelled ({pack_id}), as it "
                "would fail the same way after the wait in the queue") in line[1], line[1]
        named = re.search(r"; \d running packs? \(([\d ]+)\) runs? no further point; stop the "
                          r"points? (?:it runs|they run) now with: scancel ([\d ]+)[.;]",
                          line[1])
        assert named and named[1] == named[2], line[1]  # packs past their last point: left
        stopped = set(named[1].split())
        assert stopped <= ran_ids
        for p in held:
            summary = read(p / "summary.json")
            assert summary["status"] == "cancelled", summary
            assert summary["reason"].startswith("cancelled before it started: "), summary
            assert BREAKER_WHY.fullmatch(summary["reason"].split(": ", 1)[1]), summary
            assert summary["slurm"]["job_state"] == "CANCELLED"
        by_pack: dict[str, list[dict]] = {}
        for p in ran:
            job = read(p / "job.json")
            by_pack.setdefault(job["job_id"], []).append(
                {**read(p / "summary.json"), "position": job["pack"]["position"]})
        not_reached = 0
        for job_id, summaries in by_pack.items():
            statuses = [s["status"] for s in sorted(summaries, key=lambda s: s["position"])]
            # the points it ran failed; those after the stop have no records of their own
            assert statuses[0] == "failed" and statuses == sorted(statuses, reverse=True) \
                and set(statuses) <= {"failed", "cancelled"}, (job_id, statuses)
            for s in summaries:
                if s["status"] == "cancelled":
                    assert job_id in stopped and s["held_back"] is True, s
                    assert s["reason"].startswith(
                        f"cancelled before it started: its pack, Slurm job {job_id}, ran no "
                        "further point: "), s
                    assert BREAKER_WHY.fullmatch(s["reason"].split(": ", 2)[2]), s
            if "cancelled" in statuses:
                output = (sweep_dir / "packs").glob(f"pack*-{job_id}.out")
                assert "the sweep stopped this pack before point " in next(output).read_text()
                not_reached += statuses.count("cancelled")
        assert not_reached, by_pack  # the stop did stop a pack before a point
        # every point either failed or was held back: all on the --rerun-failed line
        assert f"{len(points)} failed/cancelled points" in out and "--rerun-failed" in out
        assert "(interrupted from outside)" not in out, out[-3000:]
        states = slurm("sacct", "-n", "-P", "-X", "-j", ",".join([pack_id, *ran_ids]),
                       "-o", "JobID,State,ExitCode")
        assert states.returncode == 0, states.stderr
        ended = {r.split("|")[0]: r.split("|")[1:] for r in states.stdout.splitlines()}
        assert ended.pop(pack_id)[0].startswith("CANCELLED"), states.stdout
        assert not any(s.startswith("CANCELLED") for s, _ in ended.values()), states.stdout
        for job_id, summaries in by_pack.items():
            if any(s["status"] == "cancelled" for s in summaries):
                assert ended[job_id][1] == "4:0", states.stdout  # ended on the stop file
    finally:
        slurm("scancel", "-n", job_name)


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_the_probe_of_a_packs_allocation_lands_in_the_sweeps_probe_file(tmp_path):
    """On the virtual cluster, a pack of 2 nodes with ``cluster.probe=allocation`` measures
    its allocation (world size 4: collectives across the 2 nodes) into the sweep's
    probe.json before its point, and the analysis predicts the point from that probe."""
    require_cluster()
    sweep_dir = tmp_path / "sweep"
    proc = run_module(
        "vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
        "model.img_size=32", "train.steps=2", "train.warmup_steps=1", "train.log_every=1",
        "train.local_batch_size=4", "cluster.poll_s=1", "cluster.probe=allocation",
        "strategy=FULL_SHARD", "nodes=2", "hydra.launcher.pack=by_nodes",
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.launcher.job_name=vitfsdp-test-{uuid.uuid4().hex[:8]}",
        cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    probe = read(sweep_dir / "probe.json")
    assert probe["status"] == "completed" and probe["cluster"] == "virtual"
    (world,) = probe["worlds"]
    assert world["world_size"] == 4 and world["status"] == "completed"
    assert {(c["op"], c["ranks"], c["nodes"]) for c in world["collectives"]} >= {
        ("all_gather", 4, 2), ("reduce_scatter", 4, 2)}
    analysis = run_module("vitfsdp.analysis", str(sweep_dir), cwd=tmp_path, timeout=300)
    assert analysis.returncode == 0, analysis.stderr[-2000:]
    import pandas as pd

    (row,) = pd.read_csv(sweep_dir / "analysis" / "runs.csv").to_dict("records")
    assert row["status"] == "completed" and row["pred_step_time_s"] > 0


def test_a_pack_written_to_be_submitted_by_hand_links_its_output_and_skips_completed():
    """``--scripts-only`` with packs: before each point's step the pack links its output
    into the run directory as slurm-<job id>.out (where --status finds a hand-submitted
    job), moves an earlier attempt's files away as a point's own script does, and runs the
    step only where that says so (a completed point is left out); the points' job.json says
    written, not submitted."""
    points = _points(2, 2)
    (pk,) = pack.make_packs(points, {})
    text = pack.render(pk, SWEEP_DIR, "vitfsdp", "/lustre/proj/vitfsdp", by_hand=True)
    for position in range(2):
        point = text.split(f"# point {position + 1}/2: ")[1].split("\n\n")[0]
        run_dir = f"{SWEEP_DIR}/{position}_p"
        assert (f'ln -sfn {SWEEP_DIR}/packs/pack0-"${{SLURM_JOB_ID}}".out '
                f'{run_dir}/slurm-"${{SLURM_JOB_ID}}".out\n') in point
        assert (f"-m vitfsdp.launch.resume {run_dir} --keep job.sbatch job.json "
                '"slurm-${SLURM_JOB_ID}.out" --mkdir logs || rc=$?') in point
        assert point.index("vitfsdp.launch.resume") < point.index("if [[ $rc -eq 0 ]]; then\n"
                                                                  "    srun ")
    assert "ln -sfn" not in pack.render(pk, SWEEP_DIR, "vitfsdp", "/lustre/proj/vitfsdp")
    record = pack.pack_job_record(pk, points[1], 1, "script")
    assert record["submitted_with"] == "script" and record["job_id"] is None


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason=NOT_STARTED)
def test_scripts_only_writes_a_pack_per_node_count_that_status_follows(tmp_path):
    """``--scripts-only hydra.launcher.pack=by_nodes`` was refused (a script per point
    only); now it writes one script per pack and submits nothing. Its one script's submit
    line was ``sbatch <script>``, which recorded no job id (--status showed the points
    written until the job started); it is submit.sh's now, as for many scripts: pasted with
    --hold, --status shows both points PENDING in that job; released, the pack runs both
    points, each its own step that --status --watch follows to COMPLETED; a second sbatch of
    it leaves the completed points out."""
    require_cluster()
    sweep_dir = tmp_path / "sweep"
    job_name = f"vitfsdp-test-{uuid.uuid4().hex[:8]}"
    proc = run_module(
        "vitfsdp.sweep", "-m", "cluster=virtual", "model=vit_tiny", "device=cpu",
        "train.steps=2", "train.warmup_steps=1", "train.log_every=1",
        "train.local_batch_size=4", "cluster.gpus_per_node=1", "cluster.poll_s=1", "nodes=1",
        "train.seed=1,2", "hydra.launcher.pack=by_nodes", "--scripts-only",
        f"hydra.sweep.dir={sweep_dir}", f"hydra.launcher.job_name={job_name}",
        cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]  # written, not ended
    script = sweep_dir / "packs" / "pack0.sbatch"
    (submit,) = [x.split("submit with: ", 1)[1] for x in out.splitlines()
                 if "submit with: " in x]
    assert shlex.split(submit) == ["bash", str(sweep_dir / "submit.sh")]
    assert "pack 0, 2 point(s) of 1 node(s)" in out
    points = sorted(p for p in sweep_dir.iterdir() if (p / "job.json").exists())
    assert len(points) == 2 and not list(sweep_dir.glob("*/slurm-*.out"))
    for p in points:
        assert read(p / "job.json")["submitted_with"] == "script"
        assert (p / "job.sbatch").read_text() == script.read_text()
    submitted = slurm("bash", "-c", f"{submit} 1 --hold", cwd=tmp_path)
    (job_id,) = [x.split()[-1] for x in submitted.stdout.splitlines() if "Submitted batch" in x]
    try:
        _, rows = _rows(sweep_dir)
        assert [r.split()[1:3] for r in rows.values()] == [[job_id, "PENDING"]] * 2, rows
        slurm("scontrol", "release", job_id)
        watch, _ = _rows(sweep_dir, "--watch", "--poll-s", "1")
    finally:
        slurm("scancel", job_id)
    assert "2 points: 2 completed" in watch.stdout, watch.stdout[-3000:] + watch.stderr[-3000:]
    assert re.search(rf"^0 +{job_id}\.0 +COMPLETED ", watch.stdout, re.M) and re.search(
        rf"^1 +{job_id}\.1 +COMPLETED ", watch.stdout, re.M), watch.stdout[-3000:]
    for position, p in enumerate(points):
        summary = read(p / "summary.json")
        assert summary["status"] == "completed"
        assert summary["slurm"]["job_id"] == f"{job_id}.{position}"  # its own step
    again = slurm("sbatch", "--parsable", "--wait", str(script), cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    output = (sweep_dir / "packs" / f"pack0-{again.stdout.strip()}.out").read_text()
    assert output.count("completed before: left out") == 2, output
