"""Hydra launcher plugin ``hydra/launcher=vitfsdp`` (Hydra loads plugins only from the
``hydra_plugins`` namespace package). All logic lives in :mod:`vitfsdp.sweep`."""


from collections.abc import Sequence
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, setup_globals
from hydra.plugins.launcher import Launcher


@dataclass
class VitfsdpLauncherConf:
    _target_: str = "hydra_plugins.vitfsdp_launcher.vitfsdp_launcher.VitfsdpLauncher"
    detach: bool = False  # Slurm profiles: return once every point's job is submitted
    scripts_only: bool = False  # Slurm profiles: write each point's job.sbatch, submit nothing
    job_name: str = "vitfsdp"  # Slurm job name of every point
    rerun_failed: bool = False  # rerun points that ended oom/failed/timeout in the run itself
    run_infeasible: bool = False  # run points the plan predicts not to fit (only warn)
    batch_search: bool = False  # search each point's largest power-of-two local batch
    batch_search_max: int = 1024  # the largest local batch the search tries
    # Slurm profiles: null = one job per point; by_nodes = one job per node count runs its
    # points one after another, each its own job step and records (vitfsdp.launch.pack)
    pack: str | None = None


ConfigStore.instance().store(group="hydra/launcher", name="vitfsdp", node=VitfsdpLauncherConf)


class VitfsdpLauncher(Launcher):
    """Validates every sweep point, then runs each as its own job (see vitfsdp.sweep)."""

    def __init__(self, **options) -> None:
        self.options = options  # read from the config by vitfsdp.sweep

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.hydra_context = hydra_context
        self.config = config

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from vitfsdp import sweep

        setup_globals()
        return sweep.launch(self.hydra_context, self.config, job_overrides, initial_job_idx)
