"""Integration tests: real processes (trainings over gloo, the command-line tools, Slurm
jobs, network namespaces, JAX compilations); minutes in all."""
