"""The package list, which pyproject.toml cannot state: ``packages.find`` discovers only the
folders under ``vitfsdp/`` and ``hydra_plugins/``, not the two data packages that
``[tool.setuptools.package-dir]`` maps from the repository's ``conf/`` and ``launch/sbatch/``.
Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

DATA_PACKAGES = ["vitfsdp.conf", "vitfsdp.launch.sbatch"]

setup(packages=[*find_namespace_packages(include=["vitfsdp*", "hydra_plugins*"]),
                *DATA_PACKAGES])
