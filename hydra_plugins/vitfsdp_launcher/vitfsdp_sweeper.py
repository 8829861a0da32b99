"""Hydra sweeper plugin ``hydra/sweeper=vitfsdp``: Hydra's basic sweeper, with every point
validated before the sweep directory and its multirun.yaml exist, and the process's exit
status saying whether every point completed. All logic lives in :mod:`vitfsdp.sweep`
(:func:`vitfsdp.sweep.run_sweeper`)."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Hydra has no public path to its basic sweeper, which this plugin extends (the points it
# runs equal vitfsdp.overrides.expand's, tests/integration/test_overrides.py)
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore


@dataclass
class VitfsdpSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.vitfsdp_launcher.vitfsdp_sweeper.VitfsdpSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="vitfsdp", node=VitfsdpSweeperConf)


class VitfsdpSweeper(BasicSweeper):
    """Validates the whole sweep first; exits 2 when it is refused, 1 when a point did not
    complete (see vitfsdp.sweep)."""

    def sweep(self, arguments: Sequence[str]) -> Any:
        from vitfsdp import sweep

        return sweep.run_sweeper(self, arguments, super().sweep)

    @staticmethod
    def split_arguments(overrides: list, max_batch_size: int | None) -> list:
        """The basic sweeper's points, ``repeat`` the slowest axis: the sweep runs in rounds
        (vitfsdp.overrides.split_in_rounds)."""
        from vitfsdp.overrides import split_in_rounds

        return split_in_rounds(overrides, max_batch_size)
