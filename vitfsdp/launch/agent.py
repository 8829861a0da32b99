"""torchrun's agent as the local launcher starts it: ``python -m vitfsdp.launch.agent ARGS``
runs ``torch.distributed.run.main()`` on ``ARGS``, exactly what ``python -m
torch.distributed.run ARGS`` (``torchrun``) runs: same options, same environment (the
``PET_*`` variables of :func:`vitfsdp.launch.local.torchrun_signal_env` included), same exit
codes and error file.

The one difference is that torch is imported with the garbage collector paused and its
objects then frozen (:func:`vitfsdp.startup_gc.paused`). The agent imports all of torch,
and the collector scans torch's objects hundreds of times during the import and again at
exit: a 1-rank torchrun of a script that does nothing took 4.7-5.1 s of CPU here as
torch's command, 3.5-3.9 s as this one (docs/benchmarks.md, "What the suite's processes
spend, the imports frozen, torchrun's agent"). A local sweep or the probe starts one agent
per point or world size and node. Slurm job scripts (``cluster.launch_mode=torchrun``)
keep torch's own ``python -m torch.distributed.run``: the script a site's user reads names
torch's command, and one agent a job is nothing to save.
"""

from __future__ import annotations

import os
from types import ModuleType

from vitfsdp import startup_gc

#: torchrun's ``--log-dir``: nowhere. Without it the agent makes a ``torchelastic_*`` folder
#: tree in the temporary directory for every launch and never removes it (665 empty trees
#: on a development VM after one day of sweeps and tests), for per-rank log files and error
#: files that are only written with ``--redirects``/``--tee`` or ``@record``, neither of
#: which vitfsdp uses: the ranks' output goes to the point's ``train.log``, and a failure's
#: reason to its records. With ``os.devnull`` torchrun makes no folder (torch's
#: ``DefaultLogsSpecs``) and its failure report reads as before (``error_file: <N/A>``).
LOG_DIR_ARG = f"--log-dir={os.devnull}"
#: The argv head that starts the agent: ``[sys.executable, *AGENT]`` in place of
#: ``[sys.executable, "-m", "torch.distributed.run", LOG_DIR_ARG]``.
AGENT = ("-m", "vitfsdp.launch.agent", LOG_DIR_ARG)


def load() -> ModuleType:
    """``torch.distributed.run`` (torchrun's module), imported with the collector paused and
    what the import made frozen (:func:`vitfsdp.startup_gc.paused`)."""
    with startup_gc.paused():
        # torch only here: this module is named by the launchers that import no framework
        from torch.distributed import run
    return run


def main() -> None:
    """Run torchrun's agent on ``sys.argv[1:]``: it parses them, starts the ranks, waits and
    raises ``torch.distributed.elastic.multiprocessing.errors.ChildFailedError`` (exit
    code 1, the failed ranks named) when a rank fails, as ``torchrun`` does."""
    load().main()


if __name__ == "__main__":
    main()
