"""Python's cyclic garbage collector paused while a process imports its frameworks.

Importing torch, torch.distributed.tensor and timm leaves about 390,000 objects tracked by
the collector (counted with ``gc.get_objects()`` here), almost none of them garbage (jax,
flax and optax are imported under the same pause, not counted). CPython 3.11 collects the
youngest generation every 700 net allocations, the next every ten of those, and everything
every ten of those once the long-lived objects have grown by a quarter, so during the
imports the collector scans the same objects again and again and frees next to nothing: 1076
collections in one rank's imports. Paused for them, a rank starts on about 1.7 s less CPU;
docs/benchmarks.md ("The collector paused for imports") gives the figures and the commands.

Only imports run inside the pause: no model is built and no tensor allocated, so what the
collector would have freed is the imports' own short-lived cycles. It runs again, as it
was, as soon as the imports are done (:func:`paused`), before anything whose memory a run
records.
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
