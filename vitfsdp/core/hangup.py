"""The one way a command ends on SIGTERM or SIGHUP (a ``kill``, a closed login session):
``SystemExit`` (128 + the signal's number) where the signal would end the process outright,
so the command's ``finally`` and ``except SystemExit`` paths run (a sweep stops its local
points' processes, the probe cancels the Slurm job it waits for and records why). Standard
library only."""

from __future__ import annotations

import signal

#: The signals :func:`exit_on_hangup` turns into ``SystemExit``.
HANGUP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def exit_on_hangup(once: bool = False) -> None:
    """Make SIGTERM and SIGHUP raise ``SystemExit(128 + signum)`` in the main thread; a
    signal already ignored (``nohup``) or handled stays as it is (only ``SIG_DFL`` is
    replaced). ``once``: after the first, both are ignored, so a second one does not cut
    short what the first set going (the probe's cancel-and-record).

    Raises:
        ValueError: called outside the main thread (``signal.signal``'s rule).
    """

    def leave(signum: int, _frame) -> None:
        if once:
            for sig in HANGUP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    for sig in HANGUP_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, leave)
