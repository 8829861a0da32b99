"""The framework-neutral run core: what both trainers and every launcher share.

Nothing here imports torch, jax or hydra at module level, so a launcher, the analysis or a
login node without an accelerator build reads it cheaply. :mod:`vitfsdp.core.layout` names
the run directory's files, the ranks' exit codes and the run statuses; beside it, the loop's
schedule (``loop``), the mesh axes (``mesh``), a window's figures (``throughput``), run.json's
"what ran" (``runinfo``), one rank's resolved choices (``resolved``), the commit of a
checkout (``checkout``), the node CPU quotas of emulated nodes (``nodecpu``), the bytes a
node sent over its link, counted by the ranks (``netcount``), the one atomic file write
(``atomic``), the one lock on a file (``locks``), the one way a command ends on SIGTERM or
SIGHUP (``hangup``) and the one hash of a run config, a sweep
point's identity and a checkpoint's (``confighash``).
"""
