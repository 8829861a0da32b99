"""Hydra launcher plugin ``hydra/launcher=vitfsdp`` (Hydra loads plugins only from the
``hydra_plugins`` namespace package). All logic lives in :mod:`vitfsdp.sweep`; the options are
declared once, by :class:`vitfsdp.launch.LaunchOptions` (a light module: Hydra imports every
plugin at each start)."""


from collections.abc import Sequence
from dataclasses import field, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, setup_globals
from hydra.plugins.launcher import Launcher

from vitfsdp.launch import hydra_launcher_fields

#: Options the sweep checks itself, with one line naming the key and the fix
#: (:func:`vitfsdp.sweep.options.composed_options`): all of them, typed ``Any`` here, so that
#: a value a config file gives (a preset's ``hydra: launcher: stall_floor_s: ten minutes`` or
#: ``detach: maybe``) reaches that check rather than OmegaConf's ValidationError while Hydra
#: composes (OmegaConf would also read the text ``yes`` as true).
CHECKED_BY_THE_SWEEP = tuple(name for name, _, _ in hydra_launcher_fields())

#: ``hydra.launcher``'s config: the launcher class and every option of LaunchOptions.
VitfsdpLauncherConf = make_dataclass("VitfsdpLauncherConf", [
    ("_target_", str,
     field(default="hydra_plugins.vitfsdp_launcher.vitfsdp_launcher.VitfsdpLauncher")),
    *((name, Any if name in CHECKED_BY_THE_SWEEP else kind, f)
      for name, kind, f in hydra_launcher_fields()),
])
VitfsdpLauncherConf.__module__ = __name__

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
