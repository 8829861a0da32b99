"""The training command: one run of a config, torch or JAX.

    python -m vitfsdp.train model=vit_tiny strategy=FULL_SHARD data=digits nodes=2

Run under torchrun or srun, each rank executes this; run plainly for a run of more than one
process, it starts the processes itself with torchrun on this machine. Rank 0 writes
``run.json``, ``metrics.jsonl`` and ``summary.json`` into Hydra's run directory.

This module is the entry point only: it composes and validates the config (Hydra), answers
``dry_run=true``, starts local ranks when run plainly, discovers this process's rank and
hands the run to its trainer: :func:`vitfsdp.torch_train.main` (``framework=torch``, FSDP
over torch.distributed) or :func:`vitfsdp.jax.train.main` (``framework=jax``). The two
trainers share the run core (:mod:`vitfsdp.core`) and import neither each other nor this
module.

Failures are data (:mod:`vitfsdp.failures`): an out-of-memory error, a collective that times
out or a rank that dies ends the run on every rank with status ``oom``, ``timeout`` or
``failed`` in summary.json and exit code 1, without a hang. SIGUSR2 or SIGTERM saves a
checkpoint (:mod:`vitfsdp.checkpoint`) at the next window boundary, records ``preempted`` and
exits with code 3; running again in the same directory resumes from it.
"""

from __future__ import annotations

if __name__ == "__main__":  # before the slow imports: a stop signal from now on is kept
    from vitfsdp import startup_signals

    startup_signals.catch()

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vitfsdp import plan, provenance, sinks, startup_gc, startup_signals
from vitfsdp.config import CONF_DIR, RunConfig, cli, register_configs, to_run_config

log = logging.getLogger("vitfsdp.train")

register_configs()


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def main(dcfg: DictConfig) -> None:
    """Hydra entry point: validate the config, then train in this process or launch ranks.

    Raises:
        ValueError: the processes launched are not ``nodes × cluster.gpus_per_node``.
        SystemExit: with the run's exit code (1 failed, 3 preempted; the local launcher's
            status when this process started the ranks).
    """
    hydra_cfg = HydraConfig.get()  # Hydra saved the overrides raw: secrets out
    provenance.redact_hydra_outputs(Path(hydra_cfg.runtime.output_dir), hydra_cfg.output_subdir)
    cfg = to_run_config(dcfg)
    if cfg.dry_run:
        print(dry_run_report(cfg))
        return
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # torch and timm imported past the dry run and past starting the ranks: the dry run
    # answers from the architecture table in well under a second, the process that only
    # starts ranks never needs them, a rank does (seconds to import)
    from vitfsdp import distributed

    env = distributed.discover()
    if not env.is_distributed and cfg.world_size > 1:
        startup_signals.release()  # torchrun handles SIGTERM for the ranks it starts
        sys.exit(_launch_ranks_here(cfg, run_dir))
    if env.world_size != cfg.world_size:
        raise ValueError(
            f"launched {env.world_size} processes but nodes={cfg.nodes} × "
            f"cluster.gpus_per_node={cfg.cluster.gpus_per_node} = {cfg.world_size}; "
            "launch as many processes as nodes × cluster.gpus_per_node"
        )
    # before timm's import: wandb only where this rank writes W&B metrics (sinks: rank 0)
    sinks.keep_wandb_out(opens_wandb=bool(cfg.metrics.wandb) and env.rank == 0)
    trainer_main(cfg.framework)(cfg, env, run_dir)


def trainer_main(framework: str) -> Callable[..., None]:
    """The trainer's ``main(cfg, env, run_dir)`` of ``framework`` (``torch``:
    :func:`vitfsdp.torch_train.main`, ``jax``: :func:`vitfsdp.jax.train.main`), imported here
    with Python's garbage collector paused (:mod:`vitfsdp.startup_gc`): seconds of imports.

    Raises:
        ValueError: ``framework`` is neither.
        ImportError: the framework is not installed (``jax``: the ``jax`` extra).
    """
    with startup_gc.paused():
        if framework == "jax":  # no torch process group: jax.distributed instead
            # imported here: jax is an optional heavy dependency, needed by JAX runs only
            from vitfsdp.jax.train import main as jax_main

            return jax_main
        if framework != "torch":
            raise ValueError(f"framework={framework} is unknown; valid: torch, jax")
        # torch and timm (torch_train imports both): in a torch rank only (see main)
        from vitfsdp import torch_train

        return torch_train.main


def dry_run_report(cfg: RunConfig) -> str:
    """Per-rank parameter, gradient and optimizer bytes of ``cfg`` at its world size, from the
    parameter count of the architecture table (nothing allocated, no process started)."""
    b = plan.state_bytes(cfg.model, cfg.num_classes, cfg.strategy, cfg.world_size,
                         cfg.precision_settings().param_dtype)
    label = (f"{cfg.model.name} {cfg.strategy.name} on {cfg.world_size} ranks "
             f"({cfg.nodes} nodes × {cfg.cluster.gpus_per_node})")
    return plan.format_state_bytes(b, label)


def _launch_ranks_here(cfg: RunConfig, run_dir: Path) -> int:
    """Start ``cfg.world_size`` ranks of this command with torchrun on this machine and wait
    for them; returns their exit status."""
    # the launchers sit above the trainers (docs/architecture.md): imported only here
    from vitfsdp.launch import local

    provenance.setup_logging(0)
    overrides = list(HydraConfig.get().overrides.task)
    log.info("starting %d local processes with torchrun", cfg.world_size)
    return local.run_point(overrides, run_dir, cfg.world_size, env=cfg.cluster.env,
                           nodes=cfg.nodes, network=cfg.cluster.network)


#: Added to a dry run's command line (unless the user set them): no run directory and no
#: ``.hydra/`` left behind by a command that writes nothing.
DRY_RUN_OVERRIDES = {"hydra.run.dir": "hydra.run.dir=.", "hydra.output_subdir":
                     "hydra.output_subdir=null"}


def dry_run_argv(argv: list[str]) -> list[str]:
    """``argv`` with :data:`DRY_RUN_OVERRIDES` added where it asks for ``dry_run=true``."""
    if not any(a.lstrip("+") in ("dry_run=true", "dry_run=True") for a in argv):
        return argv
    return [*argv, *(o for key, o in DRY_RUN_OVERRIDES.items()
                     if not any(a.lstrip("+").startswith(f"{key}=") for a in argv))]


if __name__ == "__main__":
    sys.argv = dry_run_argv(sys.argv)
    cli(main, validate=True)  # one run: its values checked before Hydra makes its directory
