"""The framework-neutral run core: what both trainers and every launcher share.

Nothing here imports torch, jax or hydra at module level, so a launcher, the analysis or a
login node without an accelerator build reads it cheaply. :mod:`vitfsdp.core.layout` names
the run directory's files, the ranks' exit codes and the run statuses.
"""
