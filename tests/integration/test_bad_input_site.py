"""A real site's bad input, refused before anything is queued in one line naming the key:
a time limit out of range, two of Hydra's modes at once, a VITFSDP_CONFIG_PATH Hydra cannot
use, JAX points where JAX is not installed, and an unreachable Slurm said once, not per point.
Each command runs for real (``python -m vitfsdp.sweep``) where a traceback was the failure.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.conftest import run_module
from vitfsdp.launch import time_limit_s

FRONTIER = ["cluster=frontier", "cluster.account=STF218", "--scripts-only"]


def one_line_refusal(proc, tmp_path) -> str:
    """The refusal's single line (exit status 2, no traceback, no sweep directory)."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert not (tmp_path / "s").exists()
    return lines[0]


@pytest.mark.parametrize("value,field", [("25:99:99", "99 minutes"), ("1-24:00", "24 hours"),
                                         ("10:61", "61 seconds"), ("0-00:00:60", "60 seconds")])
def test_time_fields_out_of_range_are_refused(value, field):
    with pytest.raises(ValueError, match=rf"^cluster.time='{value}' has {field}, more than"):
        time_limit_s(value)


@pytest.mark.parametrize("value,seconds", [("25:00:00", 90000), ("90", 5400),
                                           ("2-23:59:59", 259199), ("59:59", 3599)])
def test_time_limits_in_range_are_taken(value, seconds):
    assert time_limit_s(value) == seconds


def test_sweep_refuses_the_audit_time_limit(tmp_path):
    """cluster.time=25:99:99 was submitted (Slurm ran 1-02:41:00)."""
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, "cluster.time=25:99:99",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    assert "cluster.time='25:99:99' has 99 minutes" in one_line_refusal(proc, tmp_path)


@pytest.mark.parametrize("flags", [["-m", "nodes=1,2", "--cfg", "job"],
                                   ["--cfg", "job", "-m", "nodes=1"], ["-m", "--info"]])
def test_two_hydra_modes_are_refused_in_one_line(tmp_path, flags):
    proc = run_module("vitfsdp.sweep", *flags, f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    assert "cannot go together" in one_line_refusal(proc, tmp_path)


@pytest.mark.parametrize("folder,says", [
    ("/srv/" + "x" * 3000, "folder 2 is 3005 characters long"),
    ("/srv/a${", "folder 2 holds '${'"), ("/srv/a${IFS}b", "folder 2 holds '${'"),
    ("/srv/x\ny", "folder 2 holds a control character")])
def test_config_path_refusals_name_the_variable(tmp_path, monkeypatch, folder, says):
    """VITFSDP_CONFIG_PATH's folders: a 3000-character one was a traceback (ENAMETOOLONG), a
    '${' one was refused without naming the variable; the folder's text is never echoed."""
    monkeypatch.setenv("VITFSDP_CONFIG_PATH", f"{tmp_path}{os.pathsep}{folder}")
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, f"hydra.sweep.dir={tmp_path}/s",
                      cwd=tmp_path)
    line = one_line_refusal(proc, tmp_path)
    assert line.startswith(f"error: VITFSDP_CONFIG_PATH's {says}"), line
    assert "xxxx" not in line and "IFS" not in line


#: ``python -m vitfsdp.sweep ARGS`` in a process whose interpreter has no JAX as far as the
#: sweep can tell (``vitfsdp.sweep.check._jax_installed``): the README's set-up installs none.
WITHOUT_JAX = ("import sys; from vitfsdp import sweep; from vitfsdp.sweep import check; "
               "check._jax_installed = lambda: False; "
               "sys.exit(sweep.main_cli(sys.argv[1:]))")


def test_jax_points_are_refused_where_jax_is_not_installed(tmp_path):
    """The README's vertex_single_node_cpu after the README's set-up (no JAX): its JAX points
    failed after 10-13 s each; now refused with the install hint, before anything runs."""
    proc = subprocess.run([sys.executable, "-c", WITHOUT_JAX, "experiment=vertex_single_node_cpu",
                           f"hydra.sweep.dir={tmp_path}/s"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HYDRA_FULL_ERROR": "0"})
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "framework=jax needs JAX" in proc.stderr and "pip install 'vitfsdp[jax]'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "s").exists()


SINFO = """#!/bin/sh
echo "sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host" >&2
echo "sinfo: error: fetch_config: DNS SRV lookup failed" >&2
echo "sinfo: error: _establish_config_source: failed to fetch config" >&2
echo "sinfo: fatal: Could not establish a configuration source" >&2
exit 1
"""


def test_unreachable_slurm_is_said_once_for_the_sweep(tmp_path, monkeypatch):
    """The ORNL preset without Slurm printed sinfo's four lines for each of its 60 points
    (240 lines); now one line: sinfo's fatal one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text(SINFO)
    (bin_dir / "sinfo").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=STF218",
                      "cluster.check_paths=false", "nodes=1,2,4", "strategy=FULL_SHARD,DDP",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    line = one_line_refusal(proc, tmp_path)
    assert "sinfo -h failed: sinfo: fatal: Could not establish" in line, line
    assert "is Slurm reachable from here?" in line


# ---------------------------------------------------------------- Frontier's queue, modules


@pytest.mark.parametrize("overrides,says", [
    (["nodes=8", "cluster.time=06:00:00"],
     "cluster.time=06:00:00 is longer than 02:00:00, the limit of partition batch for a job "
     "of 8 nodes (cluster.queue_limits[0])"),
    (["nodes=100", "cluster.time=12:00:00"], "the limit of partition batch for a job of 100 "
                                             "nodes (cluster.queue_limits[1])"),
    (["cluster.qos=debug", "cluster.max_jobs=1", "cluster.time=03:00:00"],
     "longer than 02:00:00, the limit of QOS debug (cluster.queue_limits[4])"),
    (["cluster.qos=debug", "cluster.time=01:00:00", "nodes=1,2"],
     "QOS debug (cluster.queue_limits[4]) forbids chaining jobs, and this sweep is 2 jobs"),
    (["cluster.partition=extended", "nodes=65"], "nodes=65 is more than partition extended "
                                                 "takes (at most 64 nodes"),
])
def test_frontier_queue_limits_refuse_before_scripts_are_written(tmp_path, overrides, says):
    """The audit's nodes=8 cluster.time=06:00:00 and qos=debug time=03:00:00 were written as
    given; the profile's queue_limits (OLCF's Frontier user guide) refuse them."""
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, *overrides,
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    assert says in one_line_refusal(proc, tmp_path)


@pytest.mark.parametrize("overrides,max_jobs", [
    (["nodes=91", "cluster.time=02:00:00"], 4), (["nodes=92", "cluster.time=06:00:00"], 4),
    (["cluster.qos=debug", "cluster.max_jobs=1", "cluster.time=02:00:00"], 1),
    (["cluster.qos=debug", "cluster.time=02:00:00"], 1),  # the profile's 4, lowered
    (["cluster.qos=debug", "cluster.max_jobs=null"], 1),
    (["cluster.partition=extended", "nodes=64", "cluster.time=24:00:00"], 2),
    (["cluster.partition=extended", "nodes=64", "cluster.max_jobs=1"], 1)])
def test_frontier_queue_limits_take_what_the_queue_runs(overrides, max_jobs):
    from tests.integration.test_slurm_scripts import compose_cfg

    cfg = compose_cfg("cluster=frontier", "cluster.account=STF218", *overrides)
    cfg.cluster.check_queue_limits(cfg.nodes)
    assert cfg.cluster.max_jobs == max_jobs


def test_one_debug_point_lowers_max_jobs_and_says_so(tmp_path):
    """A new Frontier user's first try, one point in the debug QOS, was refused until
    cluster.max_jobs=1 was set too (one point is one job whatever max_jobs says); now the
    profile's 4 is lowered to the QOS's 1 in one line and the script is written."""
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, "cluster.qos=debug", "nodes=1",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]  # written, not submitted
    assert out.count("lowered") == 1 and (
        "cluster.max_jobs=4 lowered to 1: QOS debug allows 1 job of a user at once "
        "(cluster.queue_limits[4]), and forbids chaining jobs: a sweep under it is one "
        "job") in out, out[-3000:]
    assert len(list((tmp_path / "s").glob("*/job.sbatch"))) == 1


def test_four_points_lower_max_jobs_once_for_the_submitter(tmp_path):
    """Four points in the extended partition (2 jobs of a user): the profile's max_jobs=4 is
    lowered in each point's config, said by each (for the sweep to say once: the next test),
    and is what the submitter reads; no point's identity changes (max_jobs is not hashed)."""
    from tests.integration.test_slurm_scripts import compose_cfg
    from vitfsdp.launch import resume
    from vitfsdp.sweep.point import Point
    from vitfsdp.sweep.slurm_jobs import _max_jobs

    cfgs = [compose_cfg(*FRONTIER[:2], "cluster.partition=extended", f"repeat={i}")
            for i in range(4)]
    hashes = [resume.config_hash(cfg) for cfg in cfgs]
    lowered = [[cfg.cluster.check_queue_limits(cfg.nodes),
                cfg.cluster.check_queue_limits(cfg.nodes)] for cfg in cfgs]  # again: nothing
    assert lowered == [[["cluster.max_jobs=4 lowered to 2: partition extended allows 2 jobs of "
                         "a user at once (cluster.queue_limits[3])"], []]] * 4
    assert [resume.config_hash(cfg) for cfg in cfgs] == hashes
    assert _max_jobs([Point(i, [], cfg, tmp_path / str(i)) for i, cfg in enumerate(cfgs)]) == 2
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, "cluster.partition=extended",
                      "repeat=0,1,2,3", f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3 and out.count("lowered to 2") == 1, out[-3000:]
    assert len(list((tmp_path / "s").glob("*/job.sbatch"))) == 4


def _validate_sweep(*overrides: str) -> None:
    """The sweeper's validation of ``python -m vitfsdp.sweep -m *overrides``, in-process."""
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext, RunMode
    from omegaconf import OmegaConf

    from vitfsdp import sweep
    from vitfsdp.config import CONF_DIR, check_overrides

    parsed = check_overrides(["-m", *overrides])
    with initialize_config_dir(str(CONF_DIR), version_base=None, job_name="sweep"):
        hydra = GlobalHydra.instance().hydra
        config = hydra.compose_config("sweep", [o.input_line for o in parsed],
                                      run_mode=RunMode.MULTIRUN, with_log_configuration=False)
        context = HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks())
        sweep.validate_sweep(context, config, OmegaConf.to_container(config.hydra.overrides.task))


def test_each_sweep_in_a_process_says_its_lowered_max_jobs_once(tmp_path, caplog):
    """Two debug-QOS sweeps in one process (a notebook, a test session): each lowers
    cluster.max_jobs and says so once. Before, the line was said once per process, and the
    second sweep lowered its max_jobs without a word."""
    line = ("cluster.max_jobs=4 lowered to 1: QOS debug allows 1 job of a user at once "
            "(cluster.queue_limits[4]), and forbids chaining jobs: a sweep under it is one job")
    with caplog.at_level("INFO"):
        for name in ("a", "b"):
            caplog.clear()
            _validate_sweep(*FRONTIER[:2], "hydra.launcher.scripts_only=true",
                            "cluster.qos=debug", "nodes=1",
                            f"hydra.sweep.dir={tmp_path / name}")
            said = [r.getMessage() for r in caplog.records if "lowered" in r.getMessage()]
            assert said == [line], (name, said)


def test_the_debug_qos_runs_one_job_not_a_chain(tmp_path):
    """OLCF: "job chaining using the debug QOS is prohibited"; the docs once advised
    qos=debug with max_jobs=1, which submits the points one after another. Two points are two
    jobs: refused; packed by node count into one job: taken (packs are submitted, not
    written alone: checked on the sweep's own check)."""
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, "cluster.qos=debug",
                      "cluster.max_jobs=1", "nodes=1,2", f"hydra.sweep.dir={tmp_path}/s",
                      cwd=tmp_path)
    assert one_line_refusal(proc, tmp_path) == (
        "error: QOS debug (cluster.queue_limits[4]) forbids chaining jobs, and this sweep is 2 "
        "jobs: run one point under it (or one pack, hydra.launcher.pack=by_nodes, of one node "
        "count and repeat round), or leave cluster.qos unset for the batch queue; nothing was "
        "launched")
    from vitfsdp.launch import LaunchOptions
    from vitfsdp.sweep.check import _queue_refusals

    debug = _points(1, 2, "cluster.qos=debug", "cluster.max_jobs=1")
    assert _queue_refusals(debug, LaunchOptions(pack="by_nodes")) == []  # one pack, one job
    assert _queue_refusals(debug, LaunchOptions())[0].endswith("this sweep is 2 jobs: run one "
                                                               "point under it (or one pack, "
                                                               "hydra.launcher.pack=by_nodes, "
                                                               "of one node count and repeat "
                                                               "round), or leave cluster.qos "
                                                               "unset for the batch queue")


def test_a_resumed_debug_sweep_counts_only_the_jobs_it_submits(tmp_path):
    """Resuming a two-point debug-QOS sweep whose first point completed submits one job: not
    refused; the first point failed, it is skipped (one job) unless --rerun-failed (two)."""
    from vitfsdp.launch import LaunchOptions, slurm
    from vitfsdp.records import SUMMARY_FILE, write_json_atomic
    from vitfsdp.sweep.check import _queue_refusals

    debug = _points(1, 2, "cluster.qos=debug", "cluster.max_jobs=1")
    for p in debug:
        p.run_dir, p.config_hash = tmp_path / f"{p.num}_repeat={p.num}", f"hash{p.num}"
    assert len(_queue_refusals(debug, LaunchOptions())) == 1  # nothing ran yet: 2 jobs
    debug[0].run_dir.mkdir()
    write_json_atomic(debug[0].run_dir / slurm.JOB_FILE, {"config_hash": "hash0"})
    for status, rerun, refused in [("completed", False, 0), ("completed", True, 0),
                                   ("failed", False, 0), ("failed", True, 1)]:
        write_json_atomic(debug[0].run_dir / SUMMARY_FILE, {"status": status})
        assert len(_queue_refusals(debug, LaunchOptions(rerun_failed=rerun))) == refused, \
            (status, rerun)


def _points(nodes: int, count: int, *overrides: str) -> list:
    from tests.integration.test_slurm_scripts import compose_cfg
    from vitfsdp.sweep.point import Point

    cfg = compose_cfg("cluster=frontier", "cluster.account=STF218", f"nodes={nodes}",
                      *overrides)
    return [Point(i, [], cfg, f"/x/{i}") for i in range(count)]


def test_packs_split_to_fit_the_queue_bin_and_one_beyond_it_is_refused(monkeypatch):
    """Frontier's batch bin of 1-91 nodes runs 2 h: five 50-minute points at one node count
    made one pack of 4 h 12 min; they fill packs of two, two and one (120 s to start each).
    A point whose cluster.time is the whole 2 h leaves no room for the pack's start."""
    from vitfsdp.launch import LaunchOptions, pack
    from vitfsdp.sweep.check import _queue_refusals

    points = _points(1, 5)
    packs = pack.make_packs(points, {p.num: 50 * 60 for p in points})
    assert [[p.num for p in pk.points] for pk in packs] == [[0, 1], [2, 3], [4]]
    assert [pk.time_limit_s for pk in packs] == [pack.PACK_START_S + 6000] * 2 + [
        pack.PACK_START_S + 3000]
    assert [pk.index for pk in packs] == [0, 1, 2]
    whole = _points(1, 1, "cluster.time=02:00:00")
    assert pack.make_packs(whole, {})[0].time_limit_s == 7200 + pack.PACK_START_S
    monkeypatch.setattr("vitfsdp.sweep.slurm_jobs._predicted_time_s", lambda p: None)
    (line,) = _queue_refusals(whole, LaunchOptions(pack="by_nodes"))  # no plan: its 2 h
    assert line.startswith("the pack of nodes=1 (1 point of vit_tiny) needs 0-02:02:00 (120 s "
                           "to start "
                           "and its points' times), beyond 0-02:00:00, the limit of a job of 1 "
                           "node(s) (cluster.queue_limits), and a pack is not requeued "
                           "(cluster.time=auto is not held to the limit in one): run its "
                           "points unpacked (drop hydra.launcher.pack: each is then held to "
                           "the limit and requeued from its checkpoint) or with fewer "
                           "train.steps, or, where the plan has no time for the point, a "
                           "shorter cluster.time")


def test_more_jobs_than_frontier_queues_are_refused_or_warned_of_with_packs_named(caplog,
                                                                                 monkeypatch):
    """Frontier rejects a user's jobs beyond 100 queued ([G] "batch Partition (queue)
    Policy"); --scripts-only printed 126 'submit with' lines without a word of it. Now one
    line names the cap and packs as the fix (--scripts-only: a warning after its line that
    names submit.sh, scripts_queue_warning; a submission that would queue them at once,
    cluster.max_jobs=null: refused before anything is queued). Packed, or with the
    profile's cluster.max_jobs=4 (the rest submitted as jobs end), it takes the sweep."""
    import logging

    from vitfsdp.launch import LaunchOptions
    from vitfsdp.sweep.check import _queue_refusals
    from vitfsdp.sweep.slurm_jobs import scripts_queue_warning

    monkeypatch.setattr("vitfsdp.sweep.slurm_jobs._predicted_time_s", lambda p: None)
    points = _points(1, 101, "cluster.time=00:10:00")  # packs of 11 within the 2 h bin
    assert points[0].cfg.cluster.max_queued_jobs == 100
    with caplog.at_level(logging.WARNING):
        assert _queue_refusals(points, LaunchOptions(scripts_only=True)) == []
        assert _queue_refusals(points, LaunchOptions(scripts_only=True, pack="by_nodes")) == []
        assert _queue_refusals(points, LaunchOptions()) == []  # max_jobs=4 at once
    assert not caplog.records  # --scripts-only's warning comes once they are written
    assert scripts_queue_warning(points, LaunchOptions(scripts_only=True), 101) == (
        "--scripts-only wrote 101 job scripts to submit by hand, and cluster=frontier queues "
        "at most 100 jobs of a user (cluster.max_queued_jobs; sbatch rejects more): add "
        "hydra.launcher.pack=by_nodes (10 jobs: one per node count and repeat round), or submit "
        "at most 100 at a time, the next as earlier jobs end (submit.sh stops at the first "
        "script sbatch refuses and prints the command that goes on from it)")
    assert scripts_queue_warning(points, LaunchOptions(scripts_only=True, pack="by_nodes"),
                                 10) is None
    unlimited = _points(1, 101, "cluster.time=00:10:00", "cluster.max_jobs=null")
    assert _queue_refusals(unlimited, LaunchOptions()) == [
        "this sweep would queue 101 jobs at once (cluster.max_jobs=null), and cluster=frontier "
        "queues at most 100 jobs of a user (cluster.max_queued_jobs; sbatch rejects more): add "
        "hydra.launcher.pack=by_nodes (10 jobs: one per node count and repeat round), or set "
        "cluster.max_jobs=100 or fewer (the sweep submits the others as its jobs end)"]
    assert _queue_refusals(unlimited, LaunchOptions(pack="by_nodes")) == []
    assert _queue_refusals(unlimited[:100], LaunchOptions()) == []
    one_a_pack = _points(1, 101, "cluster.time=01:30:00")  # two would pass the 2 h bin
    assert scripts_queue_warning(one_a_pack, LaunchOptions(scripts_only=True, pack="by_nodes"),
                                 101) == (
        "--scripts-only wrote 101 job scripts to submit by hand, and cluster=frontier queues "
        "at most 100 jobs of a user (cluster.max_queued_jobs; sbatch rejects more): submit at "
        "most 100 at a time, the next as earlier jobs end (submit.sh stops at the first script "
        "sbatch refuses and prints the command that goes on from it)")


def test_points_the_plan_skips_are_no_jobs_for_the_queue_cap(monkeypatch):
    """A reviewer's vit_3b,vit_5b sweep (no checkpointing) was refused as '126 jobs at once'
    where the plan skips ViT-5B's 63 points as not fitting: only 63 jobs would queue. The
    cap counts the points that run; --run-infeasible runs them all, and counts them."""
    from vitfsdp.launch import LaunchOptions
    from vitfsdp.sweep.check import _queue_refusals

    monkeypatch.setattr("vitfsdp.sweep.slurm_jobs._predicted_time_s", lambda p: None)
    fits = _points(1, 60, "model=vit_3b", "cluster.time=00:10:00", "cluster.max_jobs=null")
    not_fit = _points(1, 60, "model=vit_5b", "strategy=DDP", "cluster.time=00:10:00",
                      "cluster.max_jobs=null")
    assert _queue_refusals(fits + not_fit, LaunchOptions()) == []  # 60 jobs queue, not 120
    (line,) = _queue_refusals(fits + not_fit, LaunchOptions(run_infeasible=True))
    assert line.startswith("this sweep would queue 120 jobs at once"), line


def test_a_queue_limit_refusal_shows_the_time_as_typed(tmp_path):
    """cluster.time=01:00:00,03:00:00 at 8 nodes: the refused point was named by Hydra's
    escaped override, cluster.time=03\\:00\\:00; now as the user typed it."""
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, "nodes=8",
                      "cluster.time=01:00:00,03:00:00", f"hydra.sweep.dir={tmp_path}/s",
                      cwd=tmp_path)
    line = one_line_refusal(proc, tmp_path)
    assert line.startswith("error: point 1 (cluster=frontier cluster.account=STF218 nodes=8 "
                           "cluster.time=03:00:00): cluster.time=03:00:00 is longer than "
                           "02:00:00"), line
    assert "\\" not in line


#: A site's `module` (an exported shell function, as Lmod's is) that knows no rocm/9.9.9 and,
#: as Lmod's hierarchy, offers rccl-net-plugin only once a rocm module is loaded.
MODULE = {"BASH_FUNC_module%%": (
    '() { case "$1" in load) export LOADED="$LOADED:$2";; is-avail) case "$2" in '
    'rccl-net-plugin/*) [[ "$LOADED" == *:rocm/* ]];; rocm/9.9.9) false;; *) true;; esac;; '
    'esac; }')}


def test_unknown_module_is_refused_where_the_module_system_answers(tmp_path):
    """cluster.modules=[rocm/9.9.9] was queued, then failed on the node; the login node's
    module system is asked first (module is-avail), with --scripts-only too."""
    proc = subprocess.run([sys.executable, "-m", "vitfsdp.sweep", "-m", *FRONTIER,
                           "cluster.modules=[rocm/7.1.1,rocm/9.9.9]",
                           f"hydra.sweep.dir={tmp_path}/s"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **MODULE})
    line = one_line_refusal(proc, tmp_path)
    assert ("cluster.modules[1]='rocm/9.9.9' is not available here after rocm/7.1.1 (module "
            "is-avail)") in line
    proc = subprocess.run([sys.executable, "-m", "vitfsdp.sweep", "-m", *FRONTIER,
                           "cluster.modules=[rccl-net-plugin/1.0,rocm/7.1.1]",
                           f"hydra.sweep.dir={tmp_path}/s"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **MODULE})
    assert "cluster.modules[0]='rccl-net-plugin/1.0' is not available here (module is-avail)" \
        in one_line_refusal(proc, tmp_path)
    # a module of the hierarchy: available once the one before it is loaded, as the job does;
    # the environment those modules make is then asked, and this machine's torch is not ROCm's
    proc = subprocess.run([sys.executable, "-m", "vitfsdp.sweep", "-m", *FRONTIER,
                           "cluster.modules=[rocm/7.1.1,rccl-net-plugin/1.0]",
                           f"hydra.sweep.dir={tmp_path}/s"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **MODULE})
    line = one_line_refusal(proc, tmp_path)
    assert "cluster.modules" not in line.partition("):")[2] and "cluster.torch_build=rocm" in line


def test_scripts_only_checks_the_interpreter(tmp_path):
    """--scripts-only checks cluster.python as a sweep does (it wrote scripts running an
    interpreter that does not exist), and says when the scripts run the sweeping one."""
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, "cluster.python=/no/such/python",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    assert "cluster.python=/no/such/python is not an executable here" in one_line_refusal(
        proc, tmp_path)
    proc = run_module("vitfsdp.sweep", "-m", *FRONTIER, "nodes=1,2",
                      f"hydra.sweep.dir={tmp_path}/s", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert out.count(f"the scripts run {sys.executable}, the interpreter sweeping here") == 1


def test_one_node_jobs_get_nccl_net_socket(tmp_path):
    """OLCF's PyTorch guide: NCCL_NET=Socket in a job of one node (the plugin does not start
    there), OFI in more; the rendered script's branch, run by bash."""
    from tests.integration.test_slurm_scripts import POINT, PROFILES, render_point
    text = render_point(PROFILES["frontier"], POINT)
    start = text.index('if [[ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]]')
    block = text[start:text.index("fi\n", start) + 3]
    for nodes, net in ((1, "Socket"), (2, "OFI"), (8, "OFI")):
        proc = subprocess.run(["bash", "-c", block + 'echo "$NCCL_NET"'], capture_output=True,
                              text=True, env={"SLURM_JOB_NUM_NODES": str(nodes)}, timeout=30)
        assert proc.stdout.strip() == net


def test_a_sweep_in_the_small_nfs_home_is_warned_of(tmp_path):
    """Frontier's homes ($HOME, /ccs/proj) are 50 GB of NFS: a sweep directory there is
    warned of once (its checkpoints can fill the quota and fail the jobs); one on the work
    file system is not."""
    home = tmp_path / "home"
    home.mkdir()
    for where, warned in ((home / "study", 1), (tmp_path / "work" / "study", 0)):
        proc = subprocess.run([sys.executable, "-m", "vitfsdp.sweep", "-m", *FRONTIER,
                               "nodes=1,2", f"hydra.sweep.dir={where}"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HOME": str(home)})
        assert proc.returncode == 3, proc.stderr[-3000:]  # written
        out = proc.stdout + proc.stderr
        assert out.count(f"is under $HOME = {home}, a file system of a small quota") == warned


def test_an_environment_in_the_nfs_home_is_warned_of_unless_broadcast():
    """A venv under Frontier's $HOME (NFS): every rank imports torch from it; warned of with
    the largest point's ranks, not for a cluster.sbcast_env (copied to the nodes' NVMe), a
    venv on the work file system or a conda env given by name."""
    from vitfsdp.launch import ClusterConfig
    from vitfsdp.launch.slurm_checks import small_path_environment_warning

    home = os.environ["HOME"]
    base = dict(name="frontier", launcher="slurm", small_paths=["$HOME"])
    warning = small_path_environment_warning(
        ClusterConfig(**base, venv="$HOME/envs/torch"), 1024)
    assert warning.startswith(f"cluster.venv=$HOME/envs/torch is under $HOME = {home}")
    assert "up to 1024 ranks import torch from it" in warning and "cluster.sbcast_env" in warning
    assert small_path_environment_warning(ClusterConfig(
        **base, sbcast_env="$HOME/env.tar.gz"), 1024) is None  # unpacked on the nodes
    assert small_path_environment_warning(ClusterConfig(**base, venv="/lustre/envs/t"), 8) \
        is None
    assert small_path_environment_warning(ClusterConfig(**base, conda_env="torch"), 8) is None
    assert small_path_environment_warning(ClusterConfig(
        **base, conda_env=f"{home}/miniforge3/envs/t"), 8).startswith("cluster.conda_env=")
    assert small_path_environment_warning(ClusterConfig(
        **base, python=f"{home}/envs/t/bin/python"), 8).startswith("cluster.python=")
