"""Bad input is refused before anything is queued: one line naming the field, exit status 2.

The table is validated in-process through the sweep's own checks, in the order the command
runs them: :func:`vitfsdp.config.check_overrides` and :func:`vitfsdp.config.check_composes`
(what ``python -m vitfsdp.sweep`` checks before Hydra starts), then
:func:`vitfsdp.sweep.validate_sweep` (what the vitfsdp sweeper checks for every point before
Hydra creates the sweep directory). A few real ``python -m vitfsdp.sweep`` runs check what a
user sees: no traceback, one line, the exit status, nothing left on disk.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import run_module
from vitfsdp import sweep
from vitfsdp.config import CONF_DIR, check_composes, check_overrides

CPU = ["device=cpu"]

#: (overrides, the field the one line must name, a fragment of the line). Every row is a
#: mistake a user can make; the fragment pins the fix the message offers.
BAD = [
    # overrides that do not parse (Hydra: a traceback)
    (["nodes=1,,2"], "nodes", "an empty item between commas"),
    (["nodes=[1,2"], "nodes", "an unclosed bracket"),
    (["+cluster.env.1BAD=x"], "cluster.env.1BAD", "is not a key"),
    (["nodes"], "nodes", "give it a value: nodes=VALUE"),
    (["train.steps=1,2,"], "train.steps", "an empty item between commas"),
    (["model={a:1"], "model", "an unclosed bracket"),
    (["cluster.sbatch_args=[--x=1]"], "cluster.sbatch_args", "quote each item"),
    (["data.path=a=b"], "data.path", "quote the value"),
    (["+cluster.env.MY_API_TOKEN=s3cr3t\nx"], "cluster.env.MY_API_TOKEN",
     "=<redacted>: contains a control character"),  # no secret, no second line
    (["+cluster.env.MY_API_TOKEN=[s3cr3t"], "cluster.env.MY_API_TOKEN",
     "=<redacted> does not parse: quote the value"),
    # keys the config does not have (Hydra: many lines, or silently kept with +)
    (["train.stepz=3"], "train.stepz", "did you mean train.steps?"),
    (["+train.stepz=3"], "train.stepz", "did you mean train.steps?"),
    (["~train.stepz"], "train.stepz", "did you mean train.steps?"),
    (["++train.stepz=3"], "train.stepz", "did you mean train.steps?"),
    (["trian.steps=3"], "trian.steps", "did you mean train.steps?"),
    (["nodez=2"], "nodez", "did you mean nodes?"),
    (["model.img_sise=32"], "model.img_sise", "did you mean model.img_size?"),
    (["strategy.backward_prefech=NONE"], "strategy.backward_prefech",
     "did you mean strategy.backward_prefetch?"),
    (["cluster.gpus_per_nod=4"], "cluster.gpus_per_nod", "did you mean cluster.gpus_per_node?"),
    (["kernels.fused_atn=false"], "kernels.fused_atn", "did you mean kernels.fused_attn?"),
    (["mixed_precision.param_type=bf16"], "mixed_precision.param_type",
     "did you mean mixed_precision.param_dtype?"),
    (["data.pth=/data"], "data.pth", "did you mean data.path?"),
    (["metrics.peek=table"], "metrics.peek", "did you mean metrics.peak?"),
    (["hydra.launcher.detatch=true"], "hydra.launcher.detatch",
     "did you mean hydra.launcher.detach?"),
    (["train.zzzz=1"], "train.zzzz", "the keys of train are: local_batch_size, steps"),
    (["zzz=1"], "zzz", "the keys of the config are: model, strategy"),
    (["+train.steps=3"], "train.steps", "set it without the +: train.steps=3"),
    (["cluster.env.MY_VAR=1"], "cluster.env.MY_VAR", "to add it: +cluster.env.MY_VAR=1"),
    # group options
    (["strategy=BOGUS"], "strategy", "strategy=BOGUS is unknown; valid: DDP, FULL_SHARD"),
    (["strategy=FULL_SHARD,BOGUS"], "strategy", "strategy=BOGUS is unknown"),
    (["model=vit_giant"], "model",
     "model=vit_giant is unknown; did you mean model=vit_giant_patch14_224? valid: vit_15b"),
    (["model=nosuch"], "model", "model=nosuch is unknown; valid: vit_15b"),
    (["strategy=full_shard"], "strategy", "did you mean strategy=FULL_SHARD? valid: DDP"),
    (["cluster=nosuch"], "cluster", "cluster=nosuch is unknown; valid:"),
    (["data=imagenet"], "data",
     "data=imagenet is unknown; did you mean data=imagefolder? valid: digits"),
    (["experiment=nosuch"], "experiment", "experiment=nosuch is unknown; valid: demo"),
    # types
    (["train.steps=abc"], "train.steps", "could not be converted to Integer"),
    (["nodes=x"], "nodes", "could not be converted to Integer"),
    (["train.lr=abc"], "train.lr", "could not be converted to Float"),
    (["train.steps=1.5"], "train.steps", "could not be converted to Integer"),
    (["kernels.fused_attn=maybe"], "kernels.fused_attn", "is not a valid bool"),
    (["cluster.modules=rocm"], "cluster.modules", "is not a ListConfig, list or tuple"),
    # values (each point's dataclasses)
    (["train.lr=0"], "train.lr", "must be a finite number > 0"),
    (["train.lr=-1e-3"], "train.lr", "must be a finite number > 0"),
    (["train.lr=nan"], "train.lr", "must be a finite number > 0"),
    (["train.weight_decay=-0.1"], "train.weight_decay", "must be a finite number >= 0"),
    (["device=tpu"], "device", "valid: auto, cpu, cuda"),
    (["nodes=0"], "nodes", "nodes=0 must be >= 1"),
    (["repeat=-1"], "repeat", "must be >= 0"),
    (["precision=fp8"], "precision", "valid: auto, fp32, bf16, fp16"),
    (["engine=fsdp3"], "engine", "valid: fsdp1, fsdp2"),
    (["framework=tensorflow"], "framework", "valid: torch, jax"),
    (["train.steps=0"], "train.steps", "must be >= 1"),
    (["train.warmup_steps=20"], "train.warmup_steps", "< train.steps=20"),
    (["train.log_every=0"], "train.log_every", "must be >= 1"),
    (["train.local_batch_size=0"], "train.local_batch_size", "must be >= 1"),
    (["train.timeout_s=0"], "train.timeout_s", "must be > 0"),
    (["train.checkpoint_every=-1"], "train.checkpoint_every", "must be >= 0"),
    (["kernels.adamw=fastest"], "kernels.adamw", "valid: auto, for_loop"),
    (["kernels.float32_matmul_precision=low"], "kernels.float32_matmul_precision",
     "valid: highest, high, medium"),
    (["strategy.backward_prefetch=SOMETIMES"], "strategy.backward_prefetch",
     "valid: BACKWARD_PRE"),
    (["mixed_precision.param_dtype=fp8"], "mixed_precision.param_dtype", "valid: fp32"),
    (["mixed_precision.param_dtype=fp16"], "mixed_precision.param_dtype",
     "needs precision=fp16"),
    (["strategy=DDP", "mixed_precision.param_dtype=bf16"], "mixed_precision.param_dtype",
     "applies only to FSDP"),
    (["strategy=DDP", "strategy.backward_prefetch=BACKWARD_PRE"],
     "strategy.backward_prefetch", "applies only to FSDP1"),
    (["engine=fsdp2", "strategy.limit_all_gathers=true"], "strategy.limit_all_gathers",
     "applies only to FSDP1"),
    (["strategy=DDP", "strategy.use_orig_params=true"], "strategy.use_orig_params",
     "applies only to FSDP1"),
    (["strategy.use_orig_params=false", "kernels.compile=true"], "strategy.use_orig_params",
     "set kernels.compile=false"),
    # compile auto compiles FSDP1's blocks on a GPU from a local batch of 128 (below it they
    # run eagerly on flat parameters, and use_orig_params=false is fine)
    (["strategy.use_orig_params=false", "device=cuda", "train.local_batch_size=128"],
     "strategy.use_orig_params", "auto on a GPU"),
    (["strategy=HYBRID_8GPU"], "strategy", "needs shard groups of 8 ranks"),
    (["cluster.gpus_per_node=0"], "cluster.gpus_per_node", "must be >= 1"),
    (["cluster.time=1:2:3:4"], "cluster.time", "is not a Slurm time limit"),
    (["cluster.launcher=kubernetes"], "cluster.launcher", "valid: local, slurm"),
    (["cluster.launch_mode=mpirun"], "cluster.launch_mode", "valid: srun, torchrun"),
    (["cluster.max_requeues=-1"], "cluster.max_requeues", "must be >= 0"),
    # 200 steps of ViT-15B at 128 nodes need 3 jobs of 20 min, and a window of 10 steps is
    # beyond the 75 s the training has to save after SIGUSR2: no attempt would be requeued
    (["cluster=frontier", "cluster.account=X", "cluster.check_paths=false",
      "hydra.launcher.scripts_only=true", "model=vit_15b", "nodes=128",
      "train.activation_checkpointing=true", "train.steps=200", "cluster.time=00:20:00",
      "train.log_every=10", "device=auto"],
     "cluster.signal_delay_s", "an attempt that saved nothing is not requeued"),
    (["cluster.poll_s=0"], "cluster.poll_s", "must be > 0"),
    (["cluster.plan_efficiency=2"], "cluster.plan_efficiency", "must be in (0, 1]"),
    (["cluster.signal_delay_s=0"], "cluster.signal_delay_s", "must be >= 1"),
    (["+cluster.env.MY-VAR=1"], "cluster.env.MY-VAR", "not a shell variable name"),
    (["cluster.sbatch_args=['bogus']"], "cluster.sbatch_args", "is not a long option"),
    (["nodes=100"], "cluster.max_local_procs", "use fewer nodes"),
    (["data=imagefolder"], "data.path", "data=imagefolder needs data.path"),
    (["data.name=imagenet"], "data.name", "valid: synthetic, digits, imagefolder"),
    (["data.num_workers=-2"], "data.num_workers", "must be >= 0, or -1"),
    (["framework=jax", "strategy=NO_SHARD"], "strategy", "framework=jax"),
    (["framework=jax", "engine=fsdp2"], "engine", "framework=jax"),
    (["metrics.peak=guess"], "metrics.peak", "guess"),
    # secrets are named, never valued (vitfsdp.launch.secrets)
    (["+cluster.env.WANDB_API_KEY=s3cr3t"], "+cluster.env.WANDB_API_KEY",
     "name it instead: cluster.secrets=[WANDB_API_KEY]"),
    (["+metrics.api_key=s3cr3t"], "+metrics.api_key", "cluster.secrets=[API_KEY]"),
    (["data.path=https://me:s3cr3t@example.org/x"], "data.path", "types a secret"),
    (["cluster.secrets=[NO_SUCH_SECRET_38]"], "cluster.secrets", "not set in this environment"),
    (["cluster.secrets=[X_38]", "cluster.secrets_file=/no/such/file"], "cluster.secrets_file",
     "cannot be read"),
    # knowable before launch (issue 38)
    (["cluster.max_jobs=0"], "cluster.max_jobs", "must be >= 1"),
    (["nodes=1,1"], "nodes=1", "again: drop the repeated value"),
    (["data=digits", "train.local_batch_size=4096"], "train.local_batch_size",
     "more than data=digits's 1797 images"),
    (["strategy=HYBRID_SHARD", "strategy.shard_group_size=3"], "strategy.shard_group_size",
     "HYBRID_SHARD needs shard groups of 3 ranks"),
    (["strategy=FULL_SHARD,HYBRID_SHARD", "strategy.shard_group_size=2"],
     "strategy.shard_group_size", "name the preset, e.g. strategy=FULL_SHARD,HYBRID_2GPU"),
    (["cluster=virtual", "cluster.venv=/opt/no/such/venv"], "cluster.venv",
     "has no bin/activate here"),
    (["cluster=virtual", "cluster.setup_script=/opt/no/such.sh"], "cluster.setup_script",
     "is not a readable file here"),
    (["cluster=virtual", "cluster.python=/opt/no/python"], "cluster.python",
     "is not an executable here"),
    (["cluster=virtual", "precision=bf16", "cluster.peak_tflops=1", "train.steps=1000000000000"],
     "train.steps", "more than cluster.time=00:10:00 allows"),
    (["cluster=virtual", "hydra.launcher.detach=true", "hydra.launcher.scripts_only=true"],
     "--scripts-only", "nothing for --detach to leave running"),
    # the sweep as a whole
    (["hydra.launcher.detach=true"], "--detach", "applies to Slurm profiles only"),
    (["hydra.launcher.scripts_only=true"], "--scripts-only", "cluster=local runs the points"),
    (["hydra.launcher.pack=by_nodes"], "hydra.launcher.pack",
     "drop it, or choose a Slurm profile"),
    (["nodes=1,2", "hydra.sweep.subdir=same"], "hydra.sweep.subdir",
     "points 0 and 1 would both write into"),
]


@pytest.fixture
def image_dirs(tmp_path):
    """Image-folder roots that torchvision's ImageFolder cannot read: missing, empty, a
    class folder without images."""
    empty, hollow = tmp_path / "empty", tmp_path / "hollow"
    empty.mkdir()
    (hollow / "cat").mkdir(parents=True)
    (hollow / "cat" / "notes.txt").write_text("not an image")
    return {"missing": tmp_path / "missing", "empty": empty, "hollow": hollow}


def refusal(overrides: list[str], sweep_dir) -> str:
    """The refusal of ``python -m vitfsdp.sweep -m *overrides``, in-process: the command
    line's checks, then the sweeper's validation of every point (Hydra's compose API builds
    the master config and context the sweeper is given). Fails the test if accepted."""
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import HydraContext, RunMode
    from omegaconf import OmegaConf

    argv = ["-m", *CPU, *overrides, f"hydra.sweep.dir={sweep_dir}"]
    try:
        parsed = check_overrides(argv)
        check_composes("sweep", parsed)
        with initialize_config_dir(str(CONF_DIR), version_base=None, job_name="sweep"):
            hydra = GlobalHydra.instance().hydra
            config = hydra.compose_config("sweep", [o.input_line for o in parsed],
                                          run_mode=RunMode.MULTIRUN,
                                          with_log_configuration=False)
            context = HydraContext(config_loader=hydra.config_loader, callbacks=Callbacks())
            sweep.validate_sweep(context, config,
                                 OmegaConf.to_container(config.hydra.overrides.task))
    except ValueError as e:  # sweep.SweepRefused is one
        return str(e)
    pytest.fail(f"accepted: {' '.join(overrides)}")


def test_every_bad_input_is_refused_in_one_line_naming_the_field(tmp_path, image_dirs):
    rows = BAD + [
        (["data=imagefolder", f"data.path={image_dirs['missing']}"], "data.path",
         "is not a directory"),
        (["data=imagefolder", f"data.path={image_dirs['empty']}"], "data.path",
         "holds no class folders"),
        (["data=imagefolder", f"data.path={image_dirs['hollow']}"], "data.path",
         "class folder 'cat' holds no image"),
    ]
    assert len(rows) >= 60
    sweep_dir = tmp_path / "sweep"
    wrong = []
    for overrides, field, fragment in rows:
        message = refusal(overrides, sweep_dir)
        multi = "sweep points refused" in message  # a header, then one line per point
        lines = message.splitlines()[1:] if multi else message.splitlines()
        ok = (len(lines) == 1 and re.search(rf"(?<![\w.]){re.escape(field)}", lines[0])
              and fragment in lines[0] and "Traceback" not in message
              and "s3cr3t" not in message)
        if not ok:
            wrong.append(f"{' '.join(overrides)}: {message!r}")
    print(f"{len(rows)} bad inputs refused, each in one line naming its field")
    assert not wrong, "\n".join(wrong)
    assert not sweep_dir.exists()  # no sweep directory, no multirun.yaml, no run directory


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["strategy=full_shard"], "strategy=full_shard is unknown; did you mean "
         "strategy=FULL_SHARD? valid: DDP, FULL_SHARD, HYBRID_16GPU"),
        (["model=vit_3B"], "model=vit_3B is unknown; did you mean model=vit_3b? valid: vit_15b"),
        (["model=vit3b"], "model=vit3b is unknown; did you mean model=vit_3b? valid: vit_15b"),
        (["strategy=FULL_SHARD,hybrid_8gpu"], "strategy=hybrid_8gpu is unknown; did you mean "
         "strategy=HYBRID_8GPU? valid: DDP"),
        (["cluster=Frontier"], "cluster=Frontier is unknown; did you mean cluster=frontier?"),
        (["model=nosuch"], "model=nosuch is unknown; valid: vit_15b, vit_1b"),  # none near
        (["train.STEPS=3"], "train.STEPS is not a config key; did you mean train.steps?"),
        # a group that is not vitfsdp's: Hydra's MissingConfigException, through one_line
        (["hydra/launcher=vitfsdp_launchr"], "hydra/launcher=vitfsdp_launchr is unknown; did "
         "you mean hydra/launcher=vitfsdp? valid: basic, vitfsdp"),
    ],
)
def test_a_mistyped_option_gets_the_nearest_valid_one(overrides, line):
    """Options of config groups are refused as keys are: the nearest valid option (the same
    name in another case first), then every valid option (it was the list alone)."""
    with pytest.raises(ValueError) as refused:
        check_composes("sweep", check_overrides(["-m", *CPU, *overrides]))
    assert str(refused.value).startswith(line), str(refused.value)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["+cluster.env.1BAD=x"], "cluster.env.1BAD is not a key"),
        (["nodes=1,,2"], "nodes=1,,2 does not parse"),
        (["nodes=[1,2"], "nodes=[1,2 does not parse"),
        (["train.stepz=3"], "train.stepz is not a config key; did you mean train.steps?"),
        (["model=vit_3B"], "model=vit_3B is unknown; did you mean model=vit_3b? valid: "),
        (["train.lr=0"], "train.lr=0.0 must be a finite number > 0"),  # the sweeper's check
    ],
)
def test_the_command_refuses_in_one_line_with_status_2(tmp_path, args, line):
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", *CPU, *args, f"hydra.sweep.dir={sweep_dir}",
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == sweep.EXIT_REFUSED, proc.stderr
    assert proc.stderr.startswith("error: ") and line in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "HYDRA_FULL_ERROR" not in proc.stderr and "Traceback" not in proc.stderr
    assert not sweep_dir.exists()  # no multirun.yaml, no run directory


@pytest.mark.parametrize(
    ("module", "args", "line"),
    [
        ("vitfsdp.plan", ["train.stepz=3"], "train.stepz is not a config key; did you mean"),
        ("vitfsdp.plan", ["-m", "model=vit3b", "cluster=frontier", "nodes=1"],
         "model=vit3b is unknown; did you mean model=vit_3b? valid: "),
        ("vitfsdp.train", ["strategy=full_shard"],
         "strategy=full_shard is unknown; did you mean strategy=FULL_SHARD? valid: "),
        ("vitfsdp.plan", ["+train.foo=1"], "train.foo is not a config key"),
        ("vitfsdp.plan", ["nodes=1,,2"], "nodes=1,,2 does not parse"),
        ("vitfsdp.plan", ["cluster=cuda8", "+cluster.env.NCCL_DEBUG=INFO"],  # cuda8 sets it
         "Or add a second + to add or override 'cluster.env.NCCL_DEBUG': "
         "'++cluster.env.NCCL_DEBUG=INFO'"),
        ("vitfsdp.probe", ["train.stepz=3"], "train.stepz is not a config key; did you mean"),
        ("vitfsdp.train", ["nodes=0"], "nodes=0 must be >= 1"),
        ("vitfsdp.train", ["metrics.wandb=ofline", "dry_run=true"],
         "metrics.wandb='ofline' is unknown"),
    ],
)
def test_the_other_commands_refuse_as_the_sweep_does(tmp_path, module, args, line):
    """plan and probe check overrides as the sweep does (they printed Hydra's traceback, or
    took a new key silently); train validates its one run before Hydra makes its directory
    (it printed a traceback and left runs/train/<time>/ behind)."""
    proc = run_module(module, *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.startswith("error: ") and line in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no run directory, no outputs


def test_a_sweep_directory_that_cannot_be_made_is_refused_in_one_line(tmp_path):
    """hydra.sweep.dir under a file (or /proc): one line naming the key, status 2 (it was a
    28-line traceback)."""
    (tmp_path / "file").write_text("")
    proc = run_module("vitfsdp.sweep", "-m", *CPU, f"hydra.sweep.dir={tmp_path}/file/sweep",
                      cwd=tmp_path, timeout=120)
    assert proc.returncode == sweep.EXIT_REFUSED, proc.stderr
    assert proc.stderr == (f"error: hydra.sweep.dir={tmp_path}/file/sweep cannot be made or "
                           "written (Not a directory); choose a directory you can write\n")


def test_a_launcher_refusal_gives_back_the_earlier_multirun_yaml(tmp_path):
    """Refused by the launcher after Hydra wrote multirun.yaml: the earlier file is back."""
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "multirun.yaml").write_text("earlier: sweep\n")
    proc = run_module("vitfsdp.sweep", "-m", *CPU, "--batch-search", "--detach",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=120)
    assert proc.returncode == sweep.EXIT_REFUSED, proc.stderr
    assert "--batch-search waits for each round's results" in proc.stderr
    assert (sweep_dir / "multirun.yaml").read_text() == "earlier: sweep\n"
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["multirun.yaml"]


def test_a_refusal_after_the_lock_takes_back_only_its_own_files(tmp_path):
    """Refused by the launcher once it holds the lock (a run directory of another config):
    the multirun.yaml and lock file this sweep wrote are gone, the earlier run untouched."""
    sweep_dir = tmp_path / "sweep"
    (sweep_dir / "same").mkdir(parents=True)
    (sweep_dir / "same" / "job.json").write_text(json.dumps(  # the code changed since
        {"config_hash": "0123456789abcdef", "overrides": list(CPU)}))
    proc = run_module("vitfsdp.sweep", "-m", *CPU, "hydra.sweep.subdir=same",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=120)
    assert proc.returncode == sweep.EXIT_REFUSED, proc.stderr
    assert "holds a run of the same overrides but a different config" in proc.stderr
    assert sorted(str(p.relative_to(sweep_dir)) for p in sweep_dir.rglob("*")) == \
        ["same", "same/job.json"]


def test_exit_status_says_whether_every_point_completed():
    done = {"status": "completed"}
    assert sweep.exit_status([done, done]) == sweep.EXIT_COMPLETED
    for status in ("oom", "failed", "timeout", "preempted", "cancelled", "skipped_infeasible"):
        assert sweep.exit_status([done, {"status": status}]) == sweep.EXIT_NOT_COMPLETED
    for status in ("submitted", "waiting", "script", None):  # queued, running, written
        assert sweep.exit_status([done, {"status": status}]) == sweep.EXIT_NOT_ENDED
    assert sweep.exit_status([done, None]) == sweep.EXIT_NOT_ENDED  # no summary yet
    assert sweep.exit_status([{"status": "failed"}, {"status": "submitted"}]) == \
        sweep.EXIT_NOT_COMPLETED


def _imported(stderr: str) -> set[str]:
    """Top-level packages in ``python -X importtime``'s report."""
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.mark.parametrize("module", ["vitfsdp.sweep", "vitfsdp.plan"])
def test_help_lists_the_flags_and_imports_no_framework(tmp_path, module):
    """``--help`` of the commands that train nothing: torch, timm, JAX and pandas stay
    unimported (they took ~4 s of the start-up); the sweep lists the launcher's flags."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--help"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    heavy = _imported(proc.stderr) & {"torch", "timm", "jax", "flax", "pandas"}
    assert not heavy, f"{module} --help imports {sorted(heavy)}"
    if module == "vitfsdp.sweep":
        for flag in ("--detach", "--status", "--watch", "--scripts-only", "--batch-search",
                     "--rerun-failed", "--run-infeasible", "--hydra-help", "Exit status"):
            assert flag in proc.stdout, flag
        # every launcher option is listed: as its flag, or as its override with the default
        from dataclasses import fields

        from vitfsdp.launch import LaunchOptions
        for option in fields(LaunchOptions):
            flag, default = option.metadata["flag"], option.default
            shown = "null" if default is None else default
            listed = f"  {flag} " if flag else f"  hydra.launcher.{option.name}={shown}\n"
            assert listed in proc.stdout, option.name


@pytest.mark.skipif(os.environ.get("VITFSDP_SLURM") != "1", reason="no virtual Slurm cluster")
def test_sbatch_refusal_is_quoted_after_the_sbatch_args_entry(tmp_path):
    """An sbatch option Slurm does not know: sbatch's own words, after the entry's name."""
    from tests.integration.test_virtual_slurm import require_cluster

    require_cluster()
    sweep_dir = tmp_path / "sweep"
    message = refusal(["cluster=virtual", "cluster.sbatch_args=['--bogus-option=1']"], sweep_dir)
    assert "cluster.sbatch_args[0]='--bogus-option=1': Slurm would not run it: sbatch: " in message
    assert "--bogus-option" in message.split("sbatch: ", 1)[1]  # sbatch's own message
    assert "Try " not in message and len(message.splitlines()) == 1
    assert not sweep_dir.exists()


def test_a_long_window_is_warned_of_and_periodic_saves_lift_the_refusal(tmp_path):
    """ViT-15B at 128 nodes, 200 steps in 3 jobs of 20 min, windows of 10 steps beyond the
    75 s after SIGUSR2: refused (test_every_bad_input_...); with train.checkpoint_every=10
    each job saves within its time, so the scripts are written, with the warning on the
    window (the signal may still come mid-window) naming the signal_delay_s that covers it."""
    sweep_dir = tmp_path / "sweep"
    proc = run_module("vitfsdp.sweep", "-m", "cluster=frontier", "cluster.account=X",
                      "cluster.check_paths=false", "model=vit_15b", "nodes=128",
                      "train.activation_checkpointing=true", "train.steps=200",
                      "cluster.time=00:20:00", "train.log_every=10",
                      "train.checkpoint_every=10", "--scripts-only",
                      f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]  # scripts written
    assert "a timing window (train.log_every=10 steps) takes" in out
    assert "set cluster.signal_delay_s above" in out and list(sweep_dir.glob("*/job.sbatch"))
