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

On leaving the pause every object tracked so far, the imported modules', classes' and
functions' above all, is frozen (``gc.freeze()``): moved to the permanent generation, which
no later collection scans. Those objects live as long as the process anyway. Without the
freeze each full collection of the run, and the ones the interpreter runs as it exits, scans
them all once more: about 0.7 s of CPU a full collection here, 2-3 s at the exit of a
process that leaves through the interpreter's teardown (a test's worker, a JAX rank, the
probe's worker; the torch trainer leaves by ``os._exit``). The imports' own garbage,
about 12,000 objects, is frozen with them: a full collection before the freeze frees no
resident memory (pymalloc keeps its arenas) and costs 0.7 s.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the ``with`` block, back as it was on leaving it (an
    exception included); a collector already off (``gc.disable()`` by the caller) stays off.
    On leaving, every object tracked by then is frozen (``gc.freeze()``, see the module's
    docstring): later collections scan only what is made after the pause.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # what the imports made lives as long as the process: scan it no more
        if was_enabled:
            gc.enable()
