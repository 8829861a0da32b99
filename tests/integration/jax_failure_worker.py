"""Run by test_jax_failures.py (beside it) as each rank of a JAX run: ``python -m vitfsdp.train``
with the third timing window of rank ``RAISE_RANK`` raising a ValueError where its meter would
gather the window's figures (a rank's own error, while its peers wait for it in that
collective).

    RAISE_RANK=1 RANK=... python tests/integration/jax_failure_worker.py override ...
"""

from __future__ import annotations

import os
import runpy
import sys

from vitfsdp.jax import metrics

_stop = metrics.JaxWindowMeter.stop
_windows = [0]


def _failing_stop(self, *args, **kwargs):
    _windows[0] += 1
    if _windows[0] == 3 and os.environ["RANK"] == os.environ["RAISE_RANK"]:
        raise ValueError(f"test: rank {os.environ['RANK']}'s third window raised")
    return _stop(self, *args, **kwargs)


if __name__ == "__main__":
    metrics.JaxWindowMeter.stop = _failing_stop
    sys.argv = ["vitfsdp.train", *sys.argv[1:]]
    runpy.run_module("vitfsdp.train", run_name="__main__", alter_sys=True)
