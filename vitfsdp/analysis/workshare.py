"""Tasks shared by this process and a pool's processes, whichever is free first: the one
scheduler of the analysis, built on :mod:`concurrent.futures` (the reading of the runs in
parts, :func:`vitfsdp.analysis.collect.collect_runs`, and the drawing of the figures,
:class:`vitfsdp.analysis.figures.PendingFigures`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Executor, Future


class WorkShare:
    """Tasks, each a key, done by ``pool``'s processes and by this one together.

    Each of the pool's processes holds one task at a time and is handed the next when it is
    done with one (by that task's done callback, in the pool's thread), so no task waits in
    the pool's queue behind a busy process while this one could do it: this process takes
    the others (:meth:`take`) as it gets to them. The pool takes tasks from the front of
    ``keys`` (from the back with ``from_back``), this process from the front. What the pool
    was handed is in :attr:`futures`; their results and errors are the caller's.

    Args:
        keys: the tasks, in the order they are taken.
        submit: ``submit(pool, key)`` hands one task to the pool (``pool.submit(fn, ...)``)
            and returns its future; a ``RuntimeError`` (a pool shut down or broken) leaves
            the task and those after it to this process.
        pool: the processes beside this one (with an attribute ``workers``: how many;
            default 1); ``None``: every task is this process's, unless :meth:`attach`
            brings a pool later.
        from_back: the pool takes the last task left, this process the first (the two
            meet in the middle: each part it reads is next to the one before).
    """

    def __init__(self, keys: Iterable[Hashable],
                 submit: Callable[[Executor, Hashable], Future],
                 pool: Executor | None = None, from_back: bool = False) -> None:  # fmt: skip
        self.left = collections.deque(keys)  # neither handed to the pool nor taken here
        self.futures: dict[Hashable, Future] = {}  # handed to the pool, in that order
        self._submit, self._from_back, self.pool = submit, from_back, None
        self._lock = threading.RLock()  # left and futures: this thread and the pool's
        self.attach(pool)

    def attach(self, pool: Executor | None) -> None:
        """Hand the tasks left to ``pool``'s processes from now on (a pool started once the
        tasks are known); ``None``, or a pool already attached: nothing changes."""
        if pool is None or self.pool is not None:
            return
        self.pool = pool
        self._hand_out()

    def take(self) -> Hashable | None:
        """The next task for this process, taken off those left; ``None`` when none is."""
        with self._lock:
            return self.left.popleft() if self.left else None

    def _hand_out(self, *_: Future) -> None:
        """Give the next tasks to the pool's idle processes, one each (also the done
        callback of each task a process finished)."""
        with self._lock:
            busy = sum(not f.done() for f in self.futures.values())
            while self.left and busy < getattr(self.pool, "workers", 1):
                key = self.left.pop() if self._from_back else self.left.popleft()
                try:
                    future = self._submit(self.pool, key)
                except RuntimeError:  # the pool is shutting down or broken: done here
                    (self.left.append if self._from_back else self.left.appendleft)(key)
                    return
                self.futures[key], busy = future, busy + 1
                future.add_done_callback(self._hand_out)
