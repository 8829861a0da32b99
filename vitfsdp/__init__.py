"""vitfsdp: FSDP scaling studies of Vision Transformers on Slurm clusters."""

__version__ = "0.1.0"
