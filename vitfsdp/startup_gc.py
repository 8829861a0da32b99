"""Python's cyclic garbage collector paused while a process imports its frameworks.

Importing torch, torch.distributed.tensor and timm (or jax, flax and optax) creates a few
hundred thousand Python objects, almost none of them garbage. CPython (3.11 here) runs a
young-generation pass every 700 net allocations and a full pass over every tracked object
after ten of those, so the collector rescans the import's objects again and again while
finding nothing to free. Paused for the imports, a rank starts on less CPU; docs/benchmarks.md
("Start-up without the collector") gives the figures measured here and the command.

Only imports run inside the pause: no model is built, no tensor allocated, so what
the collector would have freed is the import's own short-lived cycles (kilobytes). It runs
again, as it was, as soon as the imports are done (:func:`paused`), before any step whose
memory a run records.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the ``with`` block, back as it was on leaving it (an
    exception included); a collector already off (``gc.disable()`` by the caller) stays off.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
