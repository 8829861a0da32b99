"""Your own config directories on Hydra's search path, without editing the package.

``VITFSDP_CONFIG_PATH=DIR[:DIR...]`` (:data:`vitfsdp.launch.CONFIG_PATH_ENV`): each DIR may
hold config groups (``DIR/cluster/mysite.yaml``, ``DIR/experiment/...``) that
``cluster=mysite`` then finds in every command (train, sweep, plan, bench). The directories
come after the package's own ``conf/``: a profile of yours adds to the shipped ones and extends
one by naming it in its defaults list. Slurm job scripts export the variable, so the training on
the compute nodes finds the same profile (Hydra's own ``hydra.searchpath=[file://DIR]`` is
given per command; the sweep passes it on to each point's command).
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from vitfsdp.launch import config_path_dirs


class VitfsdpSearchPathPlugin(SearchPathPlugin):
    """Appends each directory of ``VITFSDP_CONFIG_PATH`` to the config search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for folder in config_path_dirs():
            search_path.append(provider="vitfsdp-user", path=f"file://{folder}")
