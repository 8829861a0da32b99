"""The Slurm job-script template, installed as the package data ``vitfsdp.launch.sbatch``
(see pyproject.toml); :mod:`vitfsdp.launch.slurm` reads it with ``importlib.resources``."""
