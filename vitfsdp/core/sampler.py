"""A driver's current reading, sampled on a thread, so a window's mean can be asked after it.

NVML keeps a history of utilization samples in the driver (``nvmlDeviceGetSamples``), so the
share of a window a kernel ran is read once, at the window's end. AMD SMI keeps none:
``amdsmi_get_gpu_activity`` "returns the current usage of the GPU engines" (AMD SMI API
reference, GPU Monitoring), the SMU's short running average (``AverageGfxActivity``). One
read at a window's end is then one instant of the step (a collective's wait, the optimizer,
a forward), not the window. :class:`ActivitySampler` keeps the history the driver does not:
a daemon thread reads every ``period_s`` and :meth:`ActivitySampler.mean_since` averages the
readings taken after a window's start.

Cost to the loop it measures: one read per period on another thread. A ctypes call (AMD SMI's
Python library) releases the GIL while the driver works, so the loop loses only the Python
side of one read per period. Measured on a quiet 2-core CPU VM (2026-11-28, docs/benchmarks.md,
"A thread reading the driver"), a host-bound loop of small torch ops with a stand-in read
(one ctypes call and a dict, as AMD SMI's wrapper builds) every 50 ms: 6.74 µs per iteration
(6.66-8.99) with the thread, 6.74 (6.58-6.95) without, medians of 11 alternating repeats: no
difference. AMD SMI's own read was not timed (no AMD GPU here).

Standard library only.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds between readings: 20 per second, so a 1 s window holds about 20 of them.
DEFAULT_PERIOD_S = 0.05
#: Seconds of readings kept; a window longer than this is averaged over its last part.
DEFAULT_KEEP_S = 600.0


class ActivitySampler:
    """Reads ``read()`` every ``period_s`` seconds on a daemon thread and keeps the readings
    with the host's wall clock (microseconds of the epoch, NVML's time base), so that
    :meth:`mean_since` can average a window after it ended.

    A reading that raises is skipped, with one warning; the thread goes on.

    Args:
        read: the driver's current value (any unit; the busy share reads 0-1).
        period_s: seconds between readings, > 0.
        keep_s: seconds of readings kept (the oldest drop out first), >= ``period_s``.
        start: start the thread now; False = :meth:`add` readings by hand (tests).

    Raises:
        ValueError: ``period_s`` <= 0 or ``keep_s`` < ``period_s``.
    """

    def __init__(self, read: Callable[[], float], period_s: float = DEFAULT_PERIOD_S,
                 keep_s: float = DEFAULT_KEEP_S, start: bool = True) -> None:
        if not period_s > 0 or not keep_s >= period_s:
            raise ValueError(f"ActivitySampler: period_s must be > 0 and keep_s >= period_s "
                             f"(got period_s={period_s}, keep_s={keep_s})")
        self.read, self.period_s = read, period_s
        self._readings: deque[tuple[float, float]] = deque(maxlen=int(keep_s / period_s) + 1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._warned = False
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="vitfsdp-activity",
                                            daemon=True)
            self._thread.start()
            atexit.register(self.close)

    def add(self, t_us: float, value: float) -> None:
        """Keep one reading ``value`` taken at ``t_us`` (microseconds of the epoch)."""
        with self._lock:
            self._readings.append((t_us, float(value)))

    def mean_since(self, since_us: float) -> float:
        """Mean of the readings taken after ``since_us`` (microseconds of the epoch,
        ``time.time() * 1e6``); where there is none (a window shorter than one period),
        one reading now.

        Raises:
            Exception: whatever ``read`` raises, where it is read now.
        """
        with self._lock:
            values = [v for t, v in self._readings if t > since_us]
        if values:
            return sum(values) / len(values)
        return float(self.read())

    def close(self) -> None:
        """Stop the thread (at most one period's wait); the readings stay."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=max(1.0, 2 * self.period_s))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                value = self.read()
            except Exception as e:  # noqa: BLE001 - a driver error: skip this reading
                if not self._warned:
                    self._warned = True
                    log.warning("a device activity reading failed (skipped): %s", e)
                continue
            self.add(time.time() * 1e6, value)
