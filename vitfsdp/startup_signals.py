"""Stop signals that arrive while a training process is still starting.

Slurm sends ``--signal=USR2@N`` up to 60 s before the stated N (sbatch(1), ``--signal``), and a
preemption's SIGTERM can come at any time. A rank that receives one while still importing
torch or building its model would die of it (the default action of both signals ends the
process), before :class:`vitfsdp.failures.StopSignals` is installed, and the point would be
recorded ``failed``. ``python -m vitfsdp.train`` therefore calls :func:`catch` before its slow
imports; this module imports nothing heavy. :class:`~vitfsdp.failures.StopSignals` takes over
the signal received here (:func:`received`), and the training stops as ``preempted`` before
its first step (see ``vitfsdp.torch_train.run``).
"""

from __future__ import annotations

import signal

#: The signals that stop a run: SIGUSR2 (Slurm, before the time limit) and SIGTERM (preemption).
STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)

_received: int | None = None


def _handle(signum: int, frame) -> None:
    global _received
    if _received is None:
        _received = signum


def catch() -> None:
    """Install handlers that remember the first stop signal instead of ending the process.

    Raises:
        ValueError: not called from the main thread (Python's rule for signal handlers).
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, _handle)


def received() -> int | None:
    """The number of the first stop signal caught since :func:`catch`, or ``None``."""
    return _received


def release() -> None:
    """Give the stop signals their default action back (a process that does not train, e.g.
    one that starts the ranks with torchrun), and act on one caught already: the process
    ends of it as it would have without :func:`catch`."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    if _received is not None:
        signal.raise_signal(_received)
