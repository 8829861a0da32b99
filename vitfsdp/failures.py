"""Failures are data: what ended a run, agreed by every rank, and the signals that stop it.

A rank whose training raises does not leave its peers waiting in a collective:

1. it classifies the error (:func:`classify`): ``oom`` (torch.OutOfMemoryError, a CPU
   allocation failure, MemoryError), ``timeout`` (a collective waited ``train.timeout_s``),
   ``peer`` (a collective failed because another rank went away) or ``error``;
2. it aborts its process group, so a peer blocked in a collective on it errors at once
   (gloo: "Connection closed by peer") instead of waiting for the timeout;
3. it posts a :class:`Report` (the error, the tail of its traceback, the last step, its memory
   figures) to the job's key-value store, which outlives the process group;
4. rank 0 collects the reports (up to :data:`GRACE_S` seconds for ranks that do not report,
   such as one killed with SIGKILL), decides the run's status (:func:`verdict`), records it
   and posts it; the other ranks read it, so every rank ends with the same status.

Rank 0 may itself be blocked where no error reaches it (NCCL work waits on the device; a
hung rank 0): a watcher thread (:meth:`FailureBoard.watch`) sees the first report on the
store and, if the main thread has not taken the failure up within :data:`GRACE_S`, records
it from there and ends the process. On the other ranks the watcher posts a ``blocked``
report when its main thread has posted none within half of :data:`GRACE_S` (a gloo
collective need not break when its peer aborts: it breaks when the peer exits), so rank 0
hears from every live rank and names as silent only those that died. Once rank 0 has posted
its verdict (or has left, taking the store with it under a bare ``srun``), a watcher whose
main thread has still not taken the failure up within :data:`GRACE_S` (a hung rank) ends
the process with :data:`EXIT_FAILED`: no launcher would (a bare ``srun`` step, unlike
torchrun's agent, would leave it running to the time limit). Rank 0 leaves only once the
ranks that reported have read its verdict and left (at most twice :data:`GRACE_S` more):
under a bare ``srun`` the store is its own and leaves with it, and so does JAX's
coordination service, whose clients abort their processes (SIGABRT) once it is gone.

A rank that hangs without dying keeps beating (the watcher is its own thread), and not every
collective times out at ``train.timeout_s`` (XLA's gloo and NCCL collectives wait for XLA's
own limits; NCCL's watchdog in torch ends the waiting ranks without Python). So the trainers
mark their main thread's progress (:func:`mark_progress`, at each step's start and each
window's end) and the watcher posts the mark with the heartbeat; rank 0's watcher records
``timeout`` when some ranks are behind the others and no rank has marked progress for
:func:`stall_s` (``train.timeout_s`` plus :data:`HEARTBEAT_CHECK_S`, so a collective timeout
that raises, torch's over gloo, comes first), naming the ranks behind; while some rank has not
passed its first step, for :func:`first_stall_s` (the larger of ``train.timeout_s`` and
:data:`FIRST_STEP_ALLOWANCE_S`: one rank's longer compile is not a hang, and a rank that hangs
before its first step is still recorded, that much later). What the marks catch is a rank
whose main thread stopped short of a mark the others passed: in host code between two marks
(data loading, file I/O, a lock, a fault such as the test hook's ``hang``). A rank stuck
inside a step (in a collective, on its device) has the same marks as the ranks waiting for
it in that step's collective: ranks at the same mark (one collective, or one long phase such
as a checkpoint) are not judged, and such a hang is left to the collective's own timeout.

Preemption is not a failure: :class:`StopSignals` turns SIGUSR2 (Slurm, ``--signal=USR2@N``
before the time limit) and SIGTERM (preemption, ``scancel``) into a flag that the training
loop reads at the next window boundary, where every rank agrees on it with one all-reduce.

Test hook: ``VITFSDP_TEST_FAULT=ACTION:RANK:STEP`` makes rank RANK, at the start of step STEP,
``kill`` itself with SIGKILL, ``hang`` (sleep; SIGTERM still kills it), or send itself
``usr2`` / ``term``. It exists for tests of exactly these paths and does nothing when unset.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist

from vitfsdp import provenance, startup_signals
from vitfsdp.core.layout import EXIT_FAILED
from vitfsdp.core.loop import Preempted as Preempted  # the stop exception, framework-neutral
from vitfsdp.core.loop import Progress
from vitfsdp.records import RunRecords, disk_error

log = logging.getLogger(__name__)

#: Seconds rank 0 waits for the other ranks' reports after a failure (capped by the
#: collective timeout). A rank that died without Python (SIGKILL) never reports.
GRACE_S = 5.0
#: Seconds without a heartbeat after which rank 0 takes a rank for dead (capped at half of
#: ``train.timeout_s``, at least :data:`HEARTBEAT_MIN_S`); every rank beats each second.
HEARTBEAT_STALE_S = 60.0
HEARTBEAT_MIN_S = 10.0
#: Seconds between rank 0's checks of the heartbeats and progress marks (one store read
#: per rank each).
HEARTBEAT_CHECK_S = 5.0
#: Seconds a rank may take, beyond ``train.timeout_s``'s bound, to pass its first step
#: before rank 0 judges it behind (:func:`first_stall_s`): set-up, a checkpoint's load and
#: the compile (JAX's ahead of time before the first step, torch.compile's inside it) differ
#: across ranks, e.g. a compile-cache hit on one node and a miss on another, and JAX's
#: dispatch is asynchronous, so the ranks ahead mark many steps meanwhile. Assumed, not
#: measured at scale: the JAX step compiled in 23-24 s (vit_tiny, 2-core CPU VM) and 28 s
#: (ViT-L/16, one H200) in docs/reproduce.md's runs; a larger model's cold compile on many
#: ranks takes longer.
FIRST_STEP_ALLOWANCE_S = 600.0
#: Lines of a failing rank's traceback kept in its report (and in summary.json's reason).
TRACEBACK_LINES = 16
#: Signals that stop a run at the next window boundary with a checkpoint.
STOP_SIGNALS = startup_signals.STOP_SIGNALS
#: The test hook's environment variable (see the module docstring).
FAULT_ENV = "VITFSDP_TEST_FAULT"

_OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory",
                 "std::bad_alloc")
_PEER_MESSAGES = ("connection closed by peer", "connection reset by peer", "broken pipe",
                  "connection refused", "socket closed")
_runs = itertools.count()  # one store namespace per run() in a process (tests run several)


class RunFailed(Exception):
    """The run ended ``status`` (``oom``, ``timeout`` or ``failed``), recorded by rank 0; the
    process group is aborted. ``__cause__`` is this rank's own error."""

    exit_code = EXIT_FAILED

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status, self.reason = status, reason


@dataclass
class Report:
    """One rank's account of its failure, posted to the store."""

    rank: int
    # oom | timeout | peer | error (see classify) | blocked (a watcher: main thread blocked)
    # | heartbeat (rank 0's watcher: other ranks stopped beating)
    # | stalled (rank 0's watcher: ranks behind the others made no progress, see Stall)
    kind: str
    error: str  # "ExceptionType: first line of the message"
    traceback_tail: str  # last lines of the traceback
    last_step: int  # last optimizer step this rank completed (0: none)
    memory: dict = field(default_factory=dict)  # peak_mem_*_gib, peak_rss_gib at failure
    # SIGUSR2/SIGTERM this rank had received when it failed (waiting for a window boundary)
    stop_signal: str | None = None


def classify(exc: BaseException) -> str:
    """``oom``, ``timeout``, ``peer`` (a collective broke because another rank left) or
    ``error``. A CPU allocation failure (RuntimeError "DefaultCPUAllocator: can't allocate
    memory") counts as ``oom`` like torch.OutOfMemoryError."""
    text = str(exc).lower()
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(
            m in text for m in _OOM_MESSAGES):
        return "oom"
    if not isinstance(exc, RuntimeError):  # DistError and gloo's errors are RuntimeErrors
        return "error"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if any(m in text for m in _PEER_MESSAGES) or isinstance(exc, dist.DistNetworkError):
        return "peer"
    return "error"


def make_report(exc: BaseException, rank: int, last_step: int, memory: dict,
                stop_signal: str | None = None) -> Report:
    """A :class:`Report` of ``exc``; drops the exception's traceback afterwards so the frames
    (and the tensors they hold) can be freed before anything is written. ``stop_signal``:
    the stop signal this rank had received, if any (:attr:`StopSignals.received`)."""
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    tail = "\n".join(lines.splitlines()[-TRACEBACK_LINES:])
    exc.__traceback__ = None
    first_line = (str(exc).strip().splitlines() or [""])[0][:500]
    return Report(rank, classify(exc), f"{type(exc).__name__}: {first_line}", tail, last_step,
                  memory, stop_signal)


def verdict(reports: list[Report], world_size: int) -> tuple[str, str]:
    """The run's (status, reason) from the reports that arrived.

    A rank's own error (``oom``, ``error``) is the cause; ``timeout`` and ``peer`` are
    consequences unless no rank reported a cause: then a timed-out collective gives
    ``timeout`` and a broken one ``failed``, except when a rank had received a stop signal
    (SIGUSR2 before the time limit, SIGTERM): then the job was being ended from outside (its
    time limit, preemption, scancel) before the next window boundary, where the checkpoint
    would have been saved, and the run is ``preempted`` (interrupted: a sweep reruns it);
    but SIGTERM alone while some rank sent no report is torchrun ending the group after that
    rank died, so the broken collective decides (``failed``).
    A ``heartbeat`` report (rank 0 saw ranks stop beating, and nothing else broke) gives
    ``failed`` with its text; a ``stalled`` report (ranks behind the others made no progress
    for longer than ``train.timeout_s``; no rank's own error) gives ``timeout`` with its.
    Ranks that sent no report are named (killed or crashed without Python), first where the
    others only saw a collective break or time out (a ``kill -9`` of rank 1 read as
    "collective broke on rank 0"). Where every rank reported
    and the cause is a timed-out or broken collective, the ranks that reported ``blocked``
    (alive, no error: a hung rank) come first, as the likely cause (a hung rank 1 read as
    "collective timed out on rank 0").
    """
    silent = sorted(set(range(world_size)) - {r.rank for r in reports})
    missing = (f"; ranks {silent} sent no report (hung, or died without Python: killed, e.g. by "
               "SIGKILL or the OOM killer, or crashed)") if silent else ""
    signalled = [r for r in reports if r.stop_signal]
    # SIGTERM alone while some rank died silently is torchrun tearing the group down after
    # that rank's death (its cause), not the job ended from outside; SIGUSR2 only comes from
    # outside (Slurm's --signal, scancel --signal=USR2)
    if silent and all(r.stop_signal == "SIGTERM" for r in signalled):
        signalled = []
    if signalled and not any(r.kind in ("oom", "error") for r in reports):
        first = min(signalled, key=lambda r: r.rank)
        ranks = ", ".join(str(r.rank) for r in signalled)
        return "preempted", (
            f"stopped from outside at step {max(r.last_step for r in reports) + 1}: "
            f"{first.stop_signal} received (ranks {ranks}) but the job ended before the next "
            "window boundary, so no checkpoint was saved; give cluster.signal_delay_s more "
            f"than a timing window plus the save; then: {first.error}{missing}")
    lost = [r for r in reports if r.kind == "heartbeat"]
    if lost and not any(r.kind in ("oom", "error", "timeout", "peer") for r in reports):
        return "failed", f"{lost[0].error} (seen by rank {lost[0].rank} at step " \
                         f"{lost[0].last_step + 1}){missing}"
    stalled = [r for r in reports if r.kind == "stalled"]
    if stalled and not any(r.kind in ("oom", "error") for r in reports):
        return "timeout", f"{stalled[0].error}{missing}"
    for kind, status in (("oom", "oom"), ("error", "failed"), ("timeout", "timeout"),
                         ("peer", "failed"), ("blocked", "failed")):
        hits = [r for r in reports if r.kind == kind]
        if hits:
            first = min(hits, key=lambda r: r.rank)
            ranks = ", ".join(str(r.rank) for r in hits)
            what = {"oom": "out of memory", "error": "raised", "blocked": "blocked",
                    "timeout": "collective timed out", "peer": "collective broke"}[kind]
            seen = (f"{what} on rank {first.rank} (ranks {ranks}) at step "
                    f"{first.last_step + 1}: {first.error}")
            if kind in ("error", "oom"):
                return status, f"{seen}{missing}\n{first.traceback_tail}"
            if silent:  # a consequence: the rank that vanished is the likelier cause, first
                return status, f"{missing[2:]}, the likely cause; then {seen}"
            blocked = [r for r in reports if r.kind == "blocked"]
            if blocked and kind != "blocked":  # a live rank that never errored: hung
                at = min(r.last_step for r in blocked) + 1
                who = ", ".join(str(r.rank) for r in blocked)
                return status, (f"rank{'s' if len(blocked) > 1 else ''} {who} blocked with no "
                                f"error at step {at} (the likely cause); {seen}")
            return status, seen
    return "failed", f"no rank reported its failure{missing}"


#: This process's main-thread progress: (marks so far, step of the last one, when: monotonic
#: s); see :func:`mark_progress`. Written by the main thread, read by the watcher thread.
_mark: tuple[int, int, float] = (0, 0, time.monotonic())


def mark_progress(step: int) -> None:
    """The main thread got past a point every rank passes in the same order (a step's
    start, a window's end), at optimizer step ``step``: posted with the next heartbeat, so
    rank 0's watcher sees a rank that stopped while the others went on (:class:`Stall`).
    No store access, no collective."""
    global _mark
    _mark = (_mark[0] + 1, step, time.monotonic())


def _reset_marks(step: int) -> None:
    global _mark
    _mark = (0, step, time.monotonic())


def _beat(beats: int) -> str:
    """The heartbeat's value: ``beats:marks:step:idle`` (idle: seconds since this rank's
    last mark, by its own clock; no clock is compared across hosts)."""
    count, step, when = _mark
    return f"{beats}:{count}:{step}:{time.monotonic() - when:.1f}"


@dataclass
class Stall:
    """Ranks behind the others (fewer progress marks) while no rank has marked progress for
    ``seconds``: ``behind`` stopped after their mark at ``behind_step`` (None: before their
    first mark), ``ahead`` waited at ``ahead_step``; ``first_step``: some rank had not passed
    its first step, so the bound was :func:`first_stall_s`'s."""

    behind: list[int]
    behind_step: int | None
    ahead: list[int]
    ahead_step: int
    seconds: float
    first_step: bool = False

    def text(self, timeout_s: float) -> str:
        """The record's reason: who stopped where, the bound it exceeded, and what the marks
        tell (its main thread stopped short of a mark the others passed)."""
        s = "s" if len(self.behind) > 1 else ""
        bound = (f"{first_stall_s(timeout_s) - HEARTBEAT_CHECK_S:g} s, the bound before "
                 "every rank's first step" if self.first_step
                 else f"train.timeout_s={timeout_s:g}")
        where = ("before its first step" if self.behind_step is None
                 else f"after step {self.behind_step}")
        return (f"rank{s} {_few(self.behind)} made no progress for {self.seconds:.0f} s "
                f"(more than {bound}): stopped {where} while "
                f"rank{'s' if len(self.ahead) > 1 else ''} {_few(self.ahead)} waited at step "
                f"{self.ahead_step} (main thread stuck outside the step's collectives, e.g. "
                "in data loading, file I/O or a lock)")


def _few(ranks: list[int], shown: int = 8) -> str:
    """``1, 2, 3`` or ``0, 1, ... (+120 more)``."""
    more = f" (+{len(ranks) - shown} more)" if len(ranks) > shown else ""
    return ", ".join(str(r) for r in ranks[:shown]) + more


def find_stall(beats: dict[int, bytes | str], world_size: int, stall_s: float,
               first_s: float | None = None) -> Stall | None:
    """A :class:`Stall` in the ranks' heartbeats (rank → ``beats:marks:step:idle``, as
    :func:`mark_progress`'s marks are posted) when every rank has one, some ranks have fewer
    marks than others and every rank has been idle for more than ``stall_s`` seconds, or,
    while some rank has not passed its first step (fewer than 2 marks: the first is at its
    first step's start), more than ``first_s`` (default: ``stall_s`` grown to
    :data:`FIRST_STEP_ALLOWANCE_S` plus :data:`HEARTBEAT_CHECK_S`); else None. Ranks at the
    same mark (all inside one collective, one long checkpoint, or one stuck inside a step
    while the others wait in its collective) are not judged."""
    marks = {}
    for r, beat in beats.items():
        parts = (beat.decode() if isinstance(beat, bytes) else beat).split(":")
        if len(parts) == 4:
            marks[r] = (int(parts[1]), int(parts[2]), float(parts[3]))
    if len(marks) < world_size:
        return None
    idle = min(m[2] for m in marks.values())
    low, high = min(m[0] for m in marks.values()), max(m[0] for m in marks.values())
    first = low < 2
    if first_s is None:
        first_s = max(stall_s, FIRST_STEP_ALLOWANCE_S + HEARTBEAT_CHECK_S)
    if low == high or idle <= (first_s if first else stall_s):
        return None
    behind = sorted(r for r, m in marks.items() if m[0] == low)
    ahead = sorted(r for r, m in marks.items() if m[0] == high)
    return Stall(behind, marks[behind[0]][1] if low else None, ahead, marks[ahead[0]][1],
                 idle, first)


def max_memory(reports: list[Report]) -> dict:
    """Each memory figure's maximum over the reports that carry it (``None`` if none)."""
    keys = {k for r in reports for k in r.memory}
    return {k: max((r.memory[k] for r in reports if r.memory.get(k) is not None),
                   default=None) for k in sorted(keys)}


class FailureBoard:
    """Reports and the verdict of one run, kept in the process group's store (the store
    outlives an aborted process group; under torchrun it is the agent's)."""

    def __init__(self, rank: int, world_size: int, grace_s: float) -> None:
        self.rank, self.world_size, self.grace_s = rank, world_size, grace_s
        self.store = None
        self._claim = threading.Lock()
        self._stop = threading.Event()
        # set once this process's main thread has posted its report (the watcher's ``blocked``
        # report for it does not count): the main thread has taken the failure up
        self.posted = threading.Event()
        self.store_lost = False  # a read of the store failed: its host has gone
        if dist.is_initialized():
            base = dist.distributed_c10d._get_default_store()
            self.store = dist.PrefixStore(f"vitfsdp/failures/{next(_runs)}/", base)

    def post(self, report: Report, from_watcher: bool = False) -> None:
        """Put this rank's report on the board (logged, not raised, if the store is gone);
        a later post of the same rank replaces it. ``from_watcher``: posted by the watcher
        thread on behalf of its blocked main thread (leaves :attr:`posted` unset)."""
        if not from_watcher:
            self.posted.set()
        self._set(f"report/{report.rank}", json.dumps(asdict(report)))
        self._add(1)

    def claim(self) -> bool:
        """True for the first caller in this process (main thread or watcher) to record."""
        return self._claim.acquire(blocking=False)

    def watch(self, on_report: Callable[[], None], poll_s: float = 1.0,
              on_silent: Callable[[list[int], float], None] | None = None,
              stale_s: float = HEARTBEAT_STALE_S,
              on_stalled: Callable[[Stall], None] | None = None,
              stall_s: float = float("inf"), first_s: float | None = None) -> None:
        """From a daemon thread, until :meth:`stop`: post this rank's heartbeat and progress
        mark (:func:`mark_progress`) every ``poll_s`` seconds, and call ``on_report()`` once
        any rank has posted a report (one store read per ``poll_s``). With ``on_silent``
        (rank 0), call ``on_silent(ranks, seconds)`` once ranks whose heartbeat had started
        have not beaten for ``stale_s`` seconds; with ``on_stalled`` (rank 0), call
        ``on_stalled(stall)`` once some ranks are behind the others and no rank has marked
        progress for ``stall_s`` seconds (``first_s`` while some rank has not passed its
        first step; :func:`find_stall`); both checked every
        :data:`HEARTBEAT_CHECK_S`.

        Over NCCL a collective does not error when a peer dies (it waits for the collective
        timeout, then the watchdog ends the process without Python): the heartbeat is how
        rank 0 learns of a killed rank or a lost node in time to record it, the marks how it
        learns of a hung one.
        """

        def loop() -> None:
            beats, seen, next_check = 0, {}, time.monotonic() + HEARTBEAT_CHECK_S
            self._set(f"alive/{self.rank}", _beat(0))
            while not self._stop.wait(poll_s):
                beats += 1
                self._set(f"alive/{self.rank}", _beat(beats))
                if self._add(0) > 0:
                    on_report()
                    return
                if on_silent is not None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + HEARTBEAT_CHECK_S
                    silent = self._silent(seen, stale_s)
                    if silent:
                        on_silent(silent, stale_s)
                        return
                    stall = find_stall({r: b for r, (b, _) in seen.items()},
                                       self.world_size, stall_s, first_s)
                    if stall is not None and on_stalled is not None:
                        on_stalled(stall)
                        return

        if self.store is not None:
            threading.Thread(target=loop, name="vitfsdp-failure-watch", daemon=True).start()

    def stop(self) -> None:
        """End the watcher thread (the run is over)."""
        self._stop.set()

    def _silent(self, seen: dict[int, tuple[bytes, float]], stale_s: float) -> list[int]:
        """The other ranks whose heartbeat has not changed for ``stale_s`` seconds of this
        process's clock (``seen``: rank → (last beat, when it changed), this rank's too; no
        clock is compared across hosts). A rank that has not beaten yet is not judged."""
        now, silent = time.monotonic(), []
        for r in range(self.world_size):
            beat = self._get_if_set(f"alive/{r}")
            if r == self.rank:
                if beat is not None:
                    seen[r] = (beat, now)
                continue
            if beat is None:
                continue
            if r not in seen or seen[r][0] != beat:
                seen[r] = (beat, now)
            elif now - seen[r][1] > stale_s:
                silent.append(r)
        return silent

    def collect(self, known: Report | None = None) -> list[Report]:
        """The reports of all ranks, waiting up to ``grace_s`` for those not yet posted;
        ``known``: this rank's own, not waited for."""
        deadline = time.monotonic() + self.grace_s
        found: dict[int, Report] = {known.rank: known} if known else {}
        while True:
            for r in set(range(self.world_size)) - set(found):
                raw = self._get_if_set(f"report/{r}")
                if raw is not None:
                    found[r] = Report(**json.loads(raw))
            if len(found) == self.world_size or time.monotonic() > deadline:
                return [found[r] for r in sorted(found)]
            time.sleep(0.1)

    def post_verdict(self, status: str, reason: str) -> None:
        """Rank 0: the status it recorded, for the other ranks."""
        self._set("verdict", json.dumps([status, reason]))

    def wait_verdict(self) -> tuple[str, str] | None:
        """The status rank 0 recorded, waiting up to ``grace_s`` + 10 s; ``None`` if it never
        came (rank 0 died) or the store went away (:attr:`store_lost`: under a bare srun the
        store is rank 0's, gone once rank 0 has left, recorded or not)."""
        deadline = time.monotonic() + self.grace_s + 10.0
        while time.monotonic() < deadline and not self.store_lost:
            raw = self._get_if_set("verdict")
            if raw is not None:
                status, reason = json.loads(raw)
                return status, reason
            time.sleep(0.1)
        return None

    def leave(self) -> None:
        """A rank other than 0, done with the failure (verdict read or given up on), about to
        end its process: rank 0 may leave now (:meth:`wait_left`)."""
        self._set(f"left/{self.rank}", "1")

    def wait_left(self, ranks: list[int]) -> list[int]:
        """Rank 0, after :meth:`post_verdict`: wait up to twice ``grace_s`` (a rank whose main
        thread is blocked leaves ``grace_s`` after the verdict) until ``ranks`` (those that
        reported: alive a moment ago) have :meth:`leave`-d, so that rank 0's exit (under a
        bare srun it takes the store and JAX's coordination service along) cuts none of
        them off; returns the ranks that did not."""
        deadline = time.monotonic() + 2 * self.grace_s
        waiting = [r for r in ranks if r != self.rank]
        while waiting and time.monotonic() < deadline and not self.store_lost:
            waiting = [r for r in waiting if self._get_if_set(f"left/{r}") is None]
            if waiting:
                time.sleep(0.1)
        return waiting

    def _set(self, key: str, value: str) -> None:
        if self.store is None:
            return
        try:
            self.store.set(key, value)
        except Exception as e:  # the store's host died: nothing to tell anyone
            log.warning("rank %d: could not post %s to the store: %s", self.rank, key, e)

    def _add(self, amount: int) -> int:
        if self.store is None:
            return 0
        try:
            return self.store.add("num_reports", amount)
        except Exception:
            return 0

    def _get_if_set(self, key: str) -> bytes | None:
        if self.store is None:
            return None
        try:
            return self.store.get(key) if self.store.check([key]) else None
        except Exception:  # the store's host (rank 0 under srun, torchrun's agent) is gone
            self.store_lost = True
            return None


def abort_process_group() -> None:
    """Abort the default process group so peers blocked on this rank error at once."""
    if not dist.is_initialized():
        return
    try:
        dist.distributed_c10d._abort_process_group()
    except Exception as e:  # an older torch or an already broken group: destroy instead
        log.debug("abort failed (%s); destroying the process group", e)
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def board_on_store(store, rank: int, world_size: int, grace_s: float) -> FailureBoard:
    """A :class:`FailureBoard` kept in ``store`` (a ``torch.distributed.Store``; None: no
    peers, every post a no-op) instead of the default process group's: for a trainer that
    has no torch process group (the JAX trainer), whose ranks reach the job's store
    themselves (:func:`vitfsdp.jax.distributed.failure_store`)."""
    board = FailureBoard(rank, world_size, grace_s)
    if board.store is None and store is not None:
        board.store = dist.PrefixStore(f"vitfsdp/failures/{next(_runs)}/", store)
    return board


def stall_s(timeout_s: float) -> float:
    """Seconds without progress (:func:`mark_progress`) on any rank, some ranks behind,
    after which rank 0 records ``timeout``: ``timeout_s`` (``train.timeout_s``) plus
    :data:`HEARTBEAT_CHECK_S`, so a framework's collective timeout that raises (torch over gloo) is
    recorded first, as the more precise cause."""
    return timeout_s + HEARTBEAT_CHECK_S


def first_stall_s(timeout_s: float) -> float:
    """:func:`stall_s` while some rank has not passed its first step: the larger of
    ``timeout_s`` and :data:`FIRST_STEP_ALLOWANCE_S`, plus :data:`HEARTBEAT_CHECK_S`, s, so
    that one rank's longer set-up or compile is not recorded as a hang."""
    return max(timeout_s, FIRST_STEP_ALLOWANCE_S) + HEARTBEAT_CHECK_S


def heartbeat_stale_s(timeout_s: float) -> float:
    """Seconds without a heartbeat after which rank 0 records a rank as dead: half the
    collective timeout (``train.timeout_s``), within [:data:`HEARTBEAT_MIN_S`,
    :data:`HEARTBEAT_STALE_S`], so the record is written before the timeout ends the ranks."""
    return max(HEARTBEAT_MIN_S, min(HEARTBEAT_STALE_S, timeout_s / 2))


@dataclass
class Recorder:
    """What a trainer's failure path needs, framework-neutral: the board, the run's records
    (rank 0 writes), its progress and start time (``time.time()``), and this rank's memory
    figures (``memory()``: ``peak_mem_allocated_gib``, ``peak_mem_reserved_gib``,
    ``peak_rss_gib``, GiB or None; no collective). The functions below are both trainers'
    failure path (:mod:`vitfsdp.torch_train`, :mod:`vitfsdp.jax.train`), the process
    group's abort left to the caller (torch: :func:`abort_process_group`)."""

    board: FailureBoard
    records: RunRecords
    progress: Progress
    t0: float
    memory: Callable[[], dict]


def watch_failures(rec: Recorder, timeout_s: float) -> None:
    """Start ``rec.board``'s watcher (:meth:`FailureBoard.watch`): on rank 0 (the writer) it
    records the run when another rank reports and the main thread does not take it up
    within the grace period, when ranks stop beating for :func:`heartbeat_stale_s` of
    ``timeout_s``, or when ranks behind the others made no progress for :func:`stall_s`
    (:func:`first_stall_s` before every rank's first step; a hung rank: ``timeout``); on
    the other ranks it posts ``blocked`` for a main thread that has not reported (and ends
    a hung one once the verdict is in). The progress marks start again from
    ``rec.progress.step`` (:func:`mark_progress`)."""
    _reset_marks(rec.progress.step)
    if rec.records.is_writer:
        rec.board.watch(lambda: _record_from_watcher(rec),
                        on_silent=lambda ranks, stale_s: _record_silent_from_watcher(
                            rec, ranks, stale_s),
                        stale_s=heartbeat_stale_s(timeout_s),
                        on_stalled=lambda stall: _record_stalled_from_watcher(
                            rec, stall, timeout_s),
                        stall_s=stall_s(timeout_s), first_s=first_stall_s(timeout_s))
    else:
        rec.board.watch(lambda: _report_blocked_from_watcher(rec))


def record_failure(exc: BaseException, rec: Recorder, stop_signal: int | None = None,
                   abort: Callable[[], None] | None = None,
                   kind: str | None = None) -> RunFailed:
    """Post this rank's report of ``exc``, call ``abort`` (peers blocked on this rank error
    at once); rank 0 gathers the reports and records the agreed status, the other ranks
    wait for it. Returns the error to raise (``raise ... from exc``).

    Args:
        stop_signal: the stop signal this rank had received (:attr:`StopSignals.received`).
        kind: the report's kind where the trainer knows it better than :func:`classify`
            (XLA's ``RESOURCE_EXHAUSTED``: ``oom``); None = :func:`classify`'s.
    """
    board = rec.board
    report = make_report(exc, board.rank, rec.progress.step, rec.memory(),
                         signal.Signals(stop_signal).name if stop_signal else None)
    report.kind = kind or report.kind
    board.post(report)
    if abort is not None:
        abort()
    if report.kind in ("oom", "error"):  # this rank's own error: the cause, worth a trace
        log.error("rank %d failed at step %d:\n%s", board.rank, rec.progress.step + 1,
                  report.traceback_tail)
    if rec.records.is_writer and board.claim():
        status, reason = decide_and_record(rec, report)
    else:  # another rank, or rank 0's watcher thread got there first
        agreed = board.wait_verdict()
        board.leave()  # the caller ends the process (RunFailed)
        status, reason = agreed or ("failed", f"rank 0 recorded nothing; here: {report.error}")
    log.error("run ended %s: %s", status, reason.splitlines()[0])
    return RunFailed(status, reason)


def decide_and_record(rec: Recorder, own: Report) -> tuple[str, str]:
    """Rank 0: collect the reports, record the verdict (summary.json), post it and wait
    (:meth:`FailureBoard.wait_left`) until the ranks that reported have read it and left;
    returns (status, reason).

    Raises:
        OSError: the record could not be written (the verdict is posted first)."""
    reports = rec.board.collect(known=own)
    status, reason = verdict(reports, rec.board.world_size)
    try:
        rec.records.finish(status, reason=reason[:4000], elapsed_s=time.time() - rec.t0,
                           last_step=max(r.last_step for r in reports),
                           memory_at_failure=max_memory(reports),
                           reported_ranks=[r.rank for r in reports],
                           num_attempts=rec.progress.attempt + 1,
                           **({"interrupted": True} if status == "preempted" else {}))
    except OSError as e:  # a full or read-only disk: the other ranks still hear why, first
        disk = disk_error(e)
        rec.board.post_verdict(status, f"{disk}; then: {reason}" if disk else reason)
        rec.board.wait_left([r.rank for r in reports])
        raise
    rec.board.post_verdict(status, reason)
    stayed = rec.board.wait_left([r.rank for r in reports])
    if stayed:
        log.warning("ranks %s reported but had not left %.0f s after the verdict",
                    stayed, 2 * rec.board.grace_s)
    return status, reason


def _record_from_watcher(rec: Recorder) -> None:
    """Rank 0's watcher, after another rank reported: unless the main thread takes the
    failure up within the grace period, record the run from here and end the process."""
    time.sleep(rec.board.grace_s)
    if not rec.board.claim():
        return
    own = Report(rec.board.rank, "blocked", "RuntimeError: rank 0 was blocked (in a "
                 "collective or a device synchronization) when others failed", "",
                 rec.progress.step, rec.memory())
    _end_from_watcher(rec, own)


def _record_silent_from_watcher(rec: Recorder, ranks: list[int], stale_s: float) -> None:
    """Rank 0's watcher, when ``ranks`` stopped beating and the main thread has not taken a
    failure up (a collective that waits for its timeout): record ``failed``, end the
    process."""
    if not rec.board.claim():
        return
    own = Report(rec.board.rank, "heartbeat", f"ranks {ranks} stopped responding (no "
                 f"heartbeat for {stale_s:.0f} s: killed, stopped (SIGSTOP, a debugger), out "
                 "of host memory or node lost)",
                 "", rec.progress.step, rec.memory())
    rec.board.post(own, from_watcher=True)
    _end_from_watcher(rec, own)


def _record_stalled_from_watcher(rec: Recorder, stall: Stall, timeout_s: float) -> None:
    """Rank 0's watcher, when ranks behind the others made no progress for longer than
    ``timeout_s`` and no rank has reported (a hung rank; a collective that does not time
    out): record ``timeout`` naming them, end the process."""
    if not rec.board.claim():
        return
    own = Report(rec.board.rank, "stalled", stall.text(timeout_s), "", rec.progress.step,
                 rec.memory())
    rec.board.post(own, from_watcher=True)
    _end_from_watcher(rec, own)


def _end_from_watcher(rec: Recorder, own: Report) -> None:
    status, reason = decide_and_record(rec, own)
    log.error("run ended %s: %s", status, reason.splitlines()[0])
    provenance.exit_now(EXIT_FAILED)


def _report_blocked_from_watcher(rec: Recorder) -> None:
    """A non-zero rank's watcher, after some rank reported: post ``blocked`` for a main
    thread that has not reported within half the grace period; end the process when the
    main thread has still not taken the failure up ``grace_s`` after the verdict (or after
    rank 0 left with its store): a hung rank that no bare srun would end."""
    board = rec.board
    time.sleep(board.grace_s / 2)
    if board.posted.is_set():
        return
    board.post(Report(board.rank, "blocked", f"RuntimeError: rank {board.rank} was blocked "
                      "(in a collective or a device synchronization) when another rank "
                      "failed", "", rec.progress.step, rec.memory()), from_watcher=True)
    agreed = board.wait_verdict()
    if agreed is None and not board.store_lost:
        return  # rank 0 is there but recorded nothing in time: it or its launcher decides
    if board.posted.wait(board.grace_s):
        return  # the main thread took the failure up: it ends with the agreed status
    ended = (f"run ended {agreed[0]}: {agreed[1].splitlines()[0]}" if agreed else
             "rank 0 has left (its store is gone) before this rank read its verdict")
    log.error("%s; rank %d's main thread is still blocked at step %d %.0f s later: "
              "exiting with code %d", ended, board.rank, rec.progress.step + 1, board.grace_s,
              EXIT_FAILED)
    board.leave()
    provenance.exit_now(EXIT_FAILED)


class StopSignals:
    """While active (a context manager), SIGUSR2 and SIGTERM set :attr:`received` instead
    of ending the process; :meth:`agreed` tells every rank whether any rank got one. A signal
    caught during start-up (:mod:`vitfsdp.startup_signals`) counts as received on entry.

    Only the main thread can install handlers; elsewhere this is inert (never stops).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if self.received is None and startup_signals.received() is not None:
            self.received = startup_signals.received()
            log.warning("%s received during start-up", signal.Signals(self.received).name)
        try:
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread
            log.warning("signal handlers need the main thread: SIGUSR2/SIGTERM not caught")
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            log.warning("%s received: checkpoint and stop at the next window boundary",
                        signal.Signals(signum).name)

    def agreed(self, device: torch.device) -> str | None:
        """The signal some rank received (its name), the same on every rank; ``None`` if no
        rank got one. One all-reduce (MAX of the signal numbers)."""
        flag = torch.tensor([self.received or 0], dtype=torch.int64, device=device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        signum = int(flag.item())
        return signal.Signals(signum).name if signum else None


Fault = tuple[str, int, int]  # (action, rank, step)


def parse_fault(value: str | None) -> Fault | tuple[Fault, ...] | None:
    """``VITFSDP_TEST_FAULT`` as (action, rank, step), or a tuple of them for a
    comma-separated list (e.g. ``kill:1:3,hang:0:3``); ``None`` when unset.

    Raises:
        ValueError: an item is not ``ACTION:RANK:STEP`` with ACTION in kill, hang, usr2, term.
    """
    if not value:
        return None
    faults = []
    for item in value.split(","):
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in ("kill", "hang", "usr2", "term"):
            raise ValueError(f"{FAULT_ENV}={value!r}: expected ACTION:RANK:STEP with ACTION "
                             "one of kill, hang, usr2, term (several: comma-separated)")
        faults.append((parts[0], int(parts[1]), int(parts[2])))
    return faults[0] if len(faults) == 1 else tuple(faults)


def inject_fault(fault: Fault | tuple[Fault, ...] | None, rank: int, step: int) -> None:
    """Apply the test hook's fault (or faults) meant for this rank and step."""
    if fault and isinstance(fault[0], tuple):
        for one in fault:
            inject_fault(one, rank, step)
        return
    if fault is None or (fault[1], fault[2]) != (rank, step):
        return
    action = fault[0]
    log.warning("test fault: %s on rank %d at step %d", action, rank, step)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the launcher can still end it
        while True:
            time.sleep(3600)
    else:
        os.kill(os.getpid(), signal.SIGUSR2 if action == "usr2" else signal.SIGTERM)
