"""Run records: ``run.json``, ``metrics.jsonl`` and ``summary.json``.

Every run directory holds three files, written by rank 0 only:

- ``run.json``: what ran. The resolved config, the world (size, nodes, ranks per node), the
  devices, versions, Slurm ids and the run's status. Written at start with status
  ``running`` and rewritten at the end.
- ``metrics.jsonl``: one JSON object per timing window, appended as the run goes.
  Field names carry units (``ips``, ``step_time_s``, ``peak_mem_allocated_gib`` ...).
- ``summary.json``: the run's status (one of :data:`STATUSES`) and its headline figures,
  computed from the measured (non-warm-up) windows. A run that did not complete has
  ``null`` figures and a ``reason``, so nothing that failed can look like a result.
  ``model_state_bytes`` (PyTorch trainer): ``{"params", "grads", "optimizer"}`` in bytes,
  counted on rank 0 from the tensors it actually holds at its attempt's first step (the
  local shards after wrapping, the local gradient shards after the first backward, the
  AdamW state after the first step); ``model_state_bytes_max`` the same, the maximum over
  ranks. Absent when no step ran. The JAX trainer writes its process's ``params`` and
  ``optimizer`` (the addressable shards) and ``grads`` null (they live inside the compiled
  step), without the max.

JSON files are replaced atomically (write to a temporary file, then ``os.replace``), so a
reader never sees half a file. ``metrics.jsonl`` is append-only; :func:`read_jsonl` skips a
truncated last line with a warning.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import resource
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# the one atomic write (vitfsdp.core.atomic); other modules import default_file_mode from here
from vitfsdp.core import nodecpu
from vitfsdp.core.atomic import default_file_mode as default_file_mode
from vitfsdp.core.atomic import write_atomic

# the file names and statuses are the run directory's (vitfsdp.core.layout); other modules
# import RUN_FILE, METRICS_FILE, SUMMARY_FILE, STATUSES and RUNNING from here too
from vitfsdp.core.layout import (
    ATTEMPTS_DIR,
    COMPLETED,
    JOB_FILE,
    METRICS_FILE,
    RUN_FILE,
    RUNNING,
    STATUSES,
    SUMMARY_FILE,
)
from vitfsdp.sinks import open_sinks

log = logging.getLogger(__name__)

#: Window fields summarised as the median over measured windows.
MEDIAN_FIELDS = ("ips", "ips_per_gpu", "step_time_s", "tflops_per_gpu", "hw_tflops_per_gpu",
                 "mfu", "hfu", "device_busy_frac", "device_busy_min_frac")
#: Window fields summarised as the maximum over measured windows (each already the maximum
#: over ranks).
MAX_FIELDS = ("peak_mem_allocated_gib", "peak_mem_reserved_gib", "peak_rss_gib",
              "device_mem_used_gib")
#: Window fields summarised as the minimum over measured windows (the minimum over ranks).
MIN_FIELDS = ("peak_mem_allocated_min_gib", "peak_mem_reserved_min_gib", "peak_rss_min_gib",
              "device_mem_used_min_gib")
#: Window counts summarised as the sum over measured windows (each summed over ranks).
SUM_FIELDS = ("alloc_retries", "num_ooms")
#: Window fields whose min and max over measured windows are also given (``<name>_min``,
#: ``<name>_max``).
RANGE_FIELDS = ("ips", "step_time_s")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a temporary file and a rename. The
    file gets the permissions ``open()`` would give it (:func:`default_file_mode`), so
    teammates on a shared project directory read the records as the umask allows.

    Raises:
        TypeError: ``obj`` holds something JSON cannot encode.
        OSError: the directory is missing or not writable.
    """
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file of the same folder and a rename
    (:func:`vitfsdp.core.atomic.write_atomic`): a reader sees the old file or the new one,
    never half of one. The file has ``mode`` from its first byte (None:
    :func:`default_file_mode`, as ``open()`` would give it).

    Raises:
        OSError: the directory is missing or not writable.
    """
    write_atomic(path, text, mode)


def append_jsonl(path: str | os.PathLike, obj: dict) -> None:
    """Append one JSON object as a line to ``path`` (created if missing), flushed to disk;
    whole or not at all: a write that fails part-way (a full disk: ENOSPC, a quota: EDQUOT)
    is cut back to the file's length before it, so no truncated line is left behind.

    Raises:
        OSError: the line could not be written (the file is as it was).
    """
    data = (json.dumps(obj, default=str) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # the umask applies
    try:
        start = os.fstat(fd).st_size
        try:
            done = 0
            while done < len(data):
                done += os.write(fd, data[done:])
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, start)  # frees space: works on a full disk
            raise
    finally:
        os.close(fd)


#: errno values of a file system that takes no more writes: full, over quota, read-only.
DISK_ERRNOS = {errno.ENOSPC: "ENOSPC", errno.EDQUOT: "EDQUOT", errno.EROFS: "EROFS"}
#: Python's text of those errors in a log (``OSError: [Errno 28] No space left on device``).
_DISK_ERROR = re.compile(r"\[Errno (" + "|".join(map(str, DISK_ERRNOS)) + r")\] ([^\n]*)")


def disk_error(error: BaseException | str | None) -> str | None:
    """One line naming a full, over-quota or read-only file system (``ENOSPC: [Errno 28] No
    space left on device: 'run/metrics.jsonl'``) when ``error`` is such an ``OSError`` or a
    log text holding one (its last); None otherwise."""
    if isinstance(error, OSError):
        name = DISK_ERRNOS.get(error.errno)
        return f"{name}: [Errno {error.errno}] {one_line_os_error(error)}" if name else None
    found = _DISK_ERROR.findall(error or "") if isinstance(error, str) else []
    if not found:
        return None
    number, text = found[-1]
    return f"{DISK_ERRNOS[int(number)]}: [Errno {number}] {text.strip()}"


def one_line_os_error(e: OSError) -> str:
    """An OSError's message and file, on one line (``No space left on device: 'x'``)."""
    return f"{e.strerror}: {e.filename!r}" if e.filename else str(e.strerror or e)


def read_json(path: str | os.PathLike) -> dict | None:
    """Read a JSON object; ``None`` if the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSON-lines file; a truncated (unparsable) last line is skipped with a warning.

    Raises:
        ValueError: a line other than the last one is not valid JSON (the file is corrupt).
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                log.warning("%s: skipping truncated last line %d", path, i + 1)
                continue
            raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e})") from e
    return rows


def summarize_windows(windows: Iterable[dict]) -> dict[str, float | None]:
    """Headline figures from timing windows, warm-up windows excluded.

    Rates and times are the median over measured windows (robust to one slow window), with
    the min and max of ``ips`` and ``step_time_s`` beside them; peak memory is the maximum
    (the ``*_min_gib`` fields, minima over ranks, the minimum); allocator retries and OOMs
    are summed. ``ips_spread`` = (max - min) / median of ``ips`` tells how steady the
    measurement was. Older records without a field give ``None`` for it.

    Returns:
        A dict with every field of :data:`MEDIAN_FIELDS`, :data:`MAX_FIELDS`,
        :data:`MIN_FIELDS` and :data:`SUM_FIELDS`, ``<f>_min``/``<f>_max`` for
        :data:`RANGE_FIELDS`, plus ``loss`` (the last measured window's), ``num_windows``
        and ``ips_spread``; a field no window measured is ``None``.
    """
    measured = [w for w in windows if not w.get("warmup")]
    out: dict[str, float | None] = {"num_windows": len(measured)}
    for fields, reduce in ((MEDIAN_FIELDS, statistics.median), (MAX_FIELDS, max),
                           (MIN_FIELDS, min), (SUM_FIELDS, sum)):
        for key in fields:
            vals = [w[key] for w in measured if _is_number(w.get(key))]
            out[key] = reduce(vals) if vals else None
    for key in RANGE_FIELDS:
        vals = [w[key] for w in measured if _is_number(w.get(key))]
        out[f"{key}_min"], out[f"{key}_max"] = (min(vals), max(vals)) if vals else (None, None)
    ips = [w["ips"] for w in measured if _is_number(w.get("ips"))]
    out["ips_spread"] = (max(ips) - min(ips)) / out["ips"] if len(ips) > 1 and out["ips"] else None
    out["loss"] = measured[-1].get("loss") if measured else None
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class RunRecords:
    """The records of one run directory; only the writer (rank 0) touches the files.

    Args:
        run_dir: the run directory; created if missing.
        is_writer: ``True`` on rank 0. On other ranks every method is a no-op, so callers
            need no ``if rank == 0`` around them.
    """

    def __init__(self, run_dir: str | os.PathLike, is_writer: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.is_writer = is_writer
        self.windows: list[dict] = []
        self._competition: dict | None = None  # competition() at start(): the noise gauge
        self.run_info: dict = {}
        #: metric sinks (vitfsdp.sinks) fed each window record; closed by finish()
        self.sinks: list = []
        #: fields the trainer measured along the way (``model_state_bytes`` ...), written
        #: into summary.json by finish() whatever the status
        self.summary_extra: dict = {}
        self._started_at = process_started_at()  # this process's start (wall clock)
        if is_writer:
            self.run_dir.mkdir(parents=True, exist_ok=True)

    def open_sinks(self, metrics: Any) -> None:
        """On the writer, open the metric sinks ``metrics`` (a MetricsConfig) asks for (call
        after :meth:`start`); a resumed attempt sends only its own windows (the earlier
        attempts sent theirs)."""
        if not self.is_writer:
            return
        self.sinks = open_sinks(metrics, self.run_dir, self.run_info)

    def start(self, run_info: dict, resume_step: int | None = None, attempt: int = 0) -> None:
        """Write ``run.json`` with status ``running`` and start ``metrics.jsonl``.

        Args:
            resume_step: the step a checkpoint restores; ``None`` = start afresh (an
                unfinished earlier run's metrics.jsonl and summary.json are removed). When
                resuming, the earlier attempts' windows up to that step are kept, read from
                this directory's metrics.jsonl or, where a launcher moved the earlier attempt
                aside, from the latest ``attempts/<n>/metrics.jsonl``; each keeps the
                ``attempt`` that measured it (0 = the first). Windows past the step are
                dropped: they are measured again. The summary covers the measured windows of
                all attempts.
            attempt: this attempt's number (0 = the first; one more than the attempt that
                saved the checkpoint), recorded in run.json.

        Raises:
            FileExistsError: the directory holds a completed run (never overwritten).
        """
        self.run_info = {**run_info, "status": RUNNING, "attempt": attempt,
                         "resumed_from_step": resume_step}
        self._competition = competition()
        self.windows = []
        if not self.is_writer:
            return
        done = read_json(self.run_dir / SUMMARY_FILE) or {}
        if done.get("status") == COMPLETED:
            raise FileExistsError(f"{self.run_dir} holds a completed run; it is never "
                                  "overwritten (choose another hydra.run.dir)")
        if resume_step is not None:
            self.windows = [{**w, "attempt": w.get("attempt", 0)}
                            for w in self._earlier_windows()
                            if w.get("step_end", resume_step + 1) <= resume_step]
            write_atomic(self.run_dir / METRICS_FILE,
                         "".join(json.dumps(w, default=str) + "\n" for w in self.windows))
        else:
            (self.run_dir / METRICS_FILE).unlink(missing_ok=True)
        (self.run_dir / SUMMARY_FILE).unlink(missing_ok=True)
        write_json_atomic(self.run_dir / RUN_FILE, self.run_info)

    def _earlier_windows(self) -> list[dict]:
        """Windows of the attempt before this one: here, or in the latest attempts/<n>/."""
        if (self.run_dir / METRICS_FILE).exists():
            return read_jsonl(self.run_dir / METRICS_FILE)
        moved = [p for p in (self.run_dir / ATTEMPTS_DIR).glob("*") if p.name.isdigit()]
        if not moved:
            return []
        return read_jsonl(max(moved, key=lambda p: int(p.name)) / METRICS_FILE)

    def window(self, metrics: dict) -> None:
        """Append one timing window to ``metrics.jsonl``; at this attempt's first, record
        ``startup_s`` for summary.json: the seconds from this process's start
        (:func:`process_started_at`) to the window's first step (its end less ``time_s``):
        imports, rendezvous, building and sharding the model, a checkpoint's restore, and
        under JAX the step's compilation (torch compiles in the first step, inside the
        warm-up window). Not the job's own set-up before the process (modules, an
        environment unpacked on the node) nor a launcher's (torchrun, submitit). Only the
        first run of a process records it: a later one (a bench or a test running several
        in one process) would count the runs before it."""
        global _STARTUP_TAKEN
        if not _STARTUP_TAKEN and self._started_at is not None:
            _STARTUP_TAKEN = True
            first_step = time.time() - float(metrics.get("time_s") or 0.0)
            self.summary_extra["startup_s"] = round(max(0.0, first_step - self._started_at), 3)
        self.windows.append(metrics)
        if self.is_writer:
            append_jsonl(self.run_dir / METRICS_FILE, metrics)
            for sink in self.sinks:
                sink.write(metrics)

    def finish(self, status: str, reason: str | None = None, **extra: Any) -> dict:
        """Write ``summary.json`` and the final status into ``run.json``.

        Figures are included only for ``completed`` runs; any other status gets ``null``
        figures so that it cannot be plotted as a result.

        Raises:
            ValueError: ``status`` is not one of :data:`STATUSES`.
        """
        if status not in STATUSES:
            raise ValueError(f"status={status!r} is not one of {STATUSES}")
        figures = summarize_windows(self.windows)
        if status != COMPLETED:
            figures = {k: None for k in figures} | {"num_windows": figures["num_windows"]}
            figures["last_loss"] = self.windows[-1].get("loss") if self.windows else None
            figures["last_step"] = self.windows[-1].get("step_end") if self.windows else None
        summary = {"status": status, "reason": reason, **figures, **self.summary_extra,
                   "competition": competed(self._competition), **extra}
        if self.is_writer:
            write_json_atomic(self.run_dir / SUMMARY_FILE, summary)
            self.run_info.update(status=status, reason=reason)
            write_json_atomic(self.run_dir / RUN_FILE, self.run_info)
        for sink in self.sinks:
            sink.close(status)
        self.sinks = []
        return summary


#: Whether a run of this process recorded its start-up (:meth:`RunRecords.window`).
_STARTUP_TAKEN = False


def process_started_at(stat: Path = Path("/proc/self/stat"),
                       boot: Path = Path("/proc/stat")) -> float | None:
    """When this process started, in seconds since the epoch: its ``starttime`` (field 22 of
    ``/proc/self/stat``, clock ticks after boot) plus the boot time (``btime`` of
    ``/proc/stat``), proc(5); None where unreadable (not Linux). Whole seconds of ``btime``
    bound its precision to about a second."""
    try:
        fields = stat.read_text(encoding="utf-8").rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22 counted from 1, the 3rd after the command's ")"
        btime = next(int(line.split()[1]) for line in
                     boot.read_text(encoding="utf-8").splitlines() if line.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def competition() -> dict[str, float | None]:
    """What this host's processes compete with now: ``load_1m`` (the 1-minute load average,
    ``os.getloadavg``) and ``throttled_s`` (seconds its emulated node's cgroup, else its own
    cgroup v2, was held back by its CPU quota: :func:`vitfsdp.core.nodecpu.throttled_s`;
    None outside a limited cgroup)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"load_1m": load, "throttled_s": nodecpu.throttled_s()}


#: Fields of ``/proc/stat``'s ``cpu`` line counted as busy by :func:`host_busy_cpu_s`
#: (proc(5)): user (guest time included), nice, system, and steal (time a hypervisor gave
#: this VM's CPUs to others: competition too). irq and softirq are left out: the kernel's
#: packet work for an emulated link lands there, not in any process's time.
BUSY_FIELDS = {"user": 0, "nice": 1, "system": 2, "steal": 7}


def host_busy_cpu_s(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds this host's CPUs have been busy since boot, summed over CPUs
    (:data:`BUSY_FIELDS` of ``/proc/stat``'s ``cpu`` line, in ``SC_CLK_TCK`` ticks); None
    where unreadable (not Linux)."""
    try:
        line = stat.read_text(encoding="utf-8").splitlines()[0].split()
        ticks = sum(int(line[1 + i]) for i in BUSY_FIELDS.values() if 1 + i < len(line))
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


#: Where a Linux host names its boot (proc(5)): one value per running kernel, so processes
#: that read the same one share one ``/proc/stat``.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def host_id(boot_id: Path = BOOT_ID) -> float | None:
    """A number naming this host's running kernel, for ranks to tell which of them share a
    ``/proc/stat`` (:class:`vitfsdp.metrics.WindowMeter` gathers it as a float64): the first
    48 bits of ``boot_id`` (exact in a float64's 53-bit mantissa; a collision of two hosts
    of one job has odds of 2^-48), None where unreadable (not Linux). The emulated nodes of
    a local point share the host's kernel, and so its id, as they share its cores."""
    try:
        return float(int(boot_id.read_text(encoding="ascii").strip().replace("-", "")[:12], 16))
    except (OSError, ValueError):
        return None


def _children(pid: int, proc: Path) -> list[int]:
    """The live child processes of ``pid``: the ``children`` files of its threads
    (``/proc/<pid>/task/<tid>/children``, proc(5), Linux >= 3.5 with CONFIG_PROC_CHILDREN,
    as distribution kernels have it); a thread that ended meanwhile is skipped.

    Raises:
        OSError: ``/proc/<pid>/task`` cannot be listed.
    """
    kids = []
    for task in (proc / str(pid) / "task").iterdir():
        try:
            kids += [int(k) for k in (task / "children").read_text(encoding="ascii").split()]
        except (OSError, ValueError):
            continue
    return kids


def _stat_cpu_s(pid: int, proc: Path) -> float:
    """utime + stime + cutime + cstime of process ``pid`` (all its threads, and its children
    it waited for: a loader worker's own helpers; fields 14-17 of ``/proc/<pid>/stat``,
    clock ticks, proc(5)), in seconds; 0 for one that ended meanwhile."""
    try:
        fields = (proc / str(pid) / "stat").read_text(encoding="utf-8").rpartition(")")[2].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def descendants_cpu_s(pid: int | None = None, proc: Path = Path("/proc")) -> float | None:
    """CPU seconds (user + system, all threads) of the live descendants of process ``pid``
    (this process where None): its data loader workers, torch.compile's worker pool; read
    from ``/proc/<pid>/stat`` of each, found through :func:`_children`; None where
    ``/proc`` cannot be read. A descendant that ended and was waited for counts in its
    parent's ``RUSAGE_CHILDREN`` instead (:func:`process_tree_cpu_s`). None as well where
    the kernel keeps no ``children`` files (built without CONFIG_PROC_CHILDREN): the
    descendants cannot be found, and counting none would call a loader worker's CPU time
    other work."""
    pid = pid or os.getpid()
    if not (proc / str(pid) / "task" / str(pid) / "children").exists():
        return None
    try:
        todo, total, seen = _children(pid, proc), 0.0, set()
        while todo:
            kid = todo.pop()
            if kid in seen:
                continue
            seen.add(kid)
            total += _stat_cpu_s(kid, proc)
            try:
                todo += _children(kid, proc)
            except OSError:  # it ended meanwhile
                continue
        return total
    except OSError:
        return None


def process_tree_cpu_s(proc: Path = Path("/proc")) -> float | None:
    """CPU seconds of this process and of every process under it, since it started: its own
    and its children's that ended and were waited for (:func:`own_cpu_s`), and its live
    descendants' (:func:`descendants_cpu_s`: data loader workers with ``data.num_workers``
    > 0, which are the run's work, not other work); None where ``/proc`` cannot be read."""
    kids = descendants_cpu_s(proc=proc)
    return None if kids is None else own_cpu_s() + kids


def own_cpu_s() -> float:
    """CPU seconds of this process and of its children it has waited for (user + system,
    ``getrusage``): a child's figure includes its own waited-for children (torchrun's
    ranks)."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


class OtherWork:
    """What else this host ran while a point's processes ran here: made as they start,
    :meth:`record` once all of them have been waited for. Other processes' CPU seconds are
    the host's busy CPU seconds (:func:`host_busy_cpu_s`) less this process's and its
    children's (:func:`own_cpu_s`) over the same interval.

    A local point's emulated nodes share one host with whatever else runs there: work beside
    it (another sweep, a build, a busy loop) takes CPU time the point's ranks wanted, and its
    figures then measure the contention (the analysis calls such a run not a result:
    :func:`vitfsdp.analysis.tables.competition_text`).
    """

    def __init__(self, host_cpus: int | None = None, stat: Path = Path("/proc/stat")) -> None:
        self.stat = stat
        self.host_cpus = host_cpus or os.cpu_count()
        self.started = time.monotonic()
        self.busy = host_busy_cpu_s(stat)
        self.own = own_cpu_s()

    def record(self) -> dict[str, float | int | None]:
        """``host.json`` (:data:`vitfsdp.core.layout.HOST_FILE`): ``wall_s``, ``host_cpus``,
        ``host_busy_cpu_s``, ``own_cpu_s`` (this process and the point's processes),
        ``other_cpu_s`` (the rest, clipped at 0: tick rounding) and ``other_cpus`` (other
        processes' CPU seconds per second: the cores they kept busy on average); the last
        three None where ``/proc/stat`` is unreadable."""
        wall = time.monotonic() - self.started
        end = host_busy_cpu_s(self.stat)
        own = own_cpu_s() - self.own
        busy = end - self.busy if end is not None and self.busy is not None else None
        other = max(0.0, busy - own) if busy is not None else None
        return {"wall_s": round(wall, 3), "host_cpus": self.host_cpus,
                "host_busy_cpu_s": None if busy is None else round(busy, 3),
                "own_cpu_s": round(own, 3),
                "other_cpu_s": None if other is None else round(other, 3),
                "other_cpus": None if other is None or wall <= 0 else round(other / wall, 4)}


def competed(start: dict | None) -> dict[str, float | None]:
    """summary.json's ``competition``: the host's 1-minute load average at the run's start
    and end (``load_1m_start``, ``load_1m_end``: what rank 0's node ran besides) and the
    seconds its cgroup's CPU quota held it back in between (``cpu_throttled_s``; None
    without a quota)."""
    end, start = competition(), start or {}
    throttled = (end["throttled_s"] - start["throttled_s"]
                 if end["throttled_s"] is not None and start.get("throttled_s") is not None
                 else None)
    return {"load_1m_start": start.get("load_1m"), "load_1m_end": end["load_1m"],
            "cpu_throttled_s": throttled}


def mark_failed(run_dir: str | os.PathLike, status: str, reason: str, **extra: Any) -> None:
    """Record a run that died without writing its own summary (killed, crashed at start).

    Keeps any ``run.json`` and ``metrics.jsonl`` already written, writes ``summary.json``
    with ``null`` figures and sets the status in ``run.json``; a run that ended before its
    training wrote ``run.json`` gets the config the sweep put in its ``job.json``, so the
    analysis knows which point it is. Used by launchers; ``extra`` fields go into the
    summary (``interrupted=True``: ended from outside the run).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    records = RunRecords(run_dir)
    records.windows = read_jsonl(run_dir / METRICS_FILE)
    records.run_info = read_json(run_dir / RUN_FILE) or {}
    if "config" not in records.run_info:
        config = (read_json(run_dir / JOB_FILE) or {}).get("config")
        if config:
            records.run_info["config"] = config
    records.finish(status, reason, **extra)


#: Characters a failure reason keeps on one line (tables, the sweep's progress lines): room
#: for an error's cause and its fix (``device=auto: torch ... sees no GPU on <host>, but
#: cluster=local describes GPUs ...: <fix>; or set device=cpu``, about 320 with its prefix).
REASON_CHARS = 300
#: Hydra's closing hint after a failed task: never the cause, so never the line shown.
HYDRA_HINT = "Set the environment variable HYDRA_FULL_ERROR"


#: Characters of a reason's end that a cut keeps (:func:`reason_line`): an error's cause is
#: often its last words (``Unable to find address for: ib0``).
REASON_TAIL_CHARS = 100
#: A source location in an error (``[enforce fail at /__w/pytorch/pytorch/third_party/gloo/
#: gloo/transport/tcp/device.cc:84]``): its directories, which :func:`reason_line` drops.
_SOURCE_DIRS = re.compile(r"(?<![\w.])(?:/[\w.+-]+)+/(?=[\w.+-]+:\d+)")


def reason_line(reason: str | None, max_chars: int = REASON_CHARS) -> str | None:
    """A failure reason on one line: its first line (a Python traceback: its last line, the
    exception; a first line ending in ``:`` gets the last line after it, e.g. ``exit code 1
    without a summary; log tail: RuntimeError: ...``), Hydra's closing hint
    (:data:`HYDRA_HINT`) left out, spaces collapsed, a source location's directories left
    out (``.../device.cc:84``), at most ``max_chars`` characters: a longer one is cut in
    the middle (`` ... ``), keeping its start and its last :data:`REASON_TAIL_CHARS`
    characters (at most half of ``max_chars``), where an error names its cause.
    ``None`` or ``""`` come back as they are."""
    if not reason:
        return reason
    lines = [line.strip() for line in str(reason).splitlines()
             if line.strip() and not line.lstrip().startswith(HYDRA_HINT)]
    if not lines:
        return None
    text = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[-1]}"
    text = _SOURCE_DIRS.sub(".../", " ".join(text.split()))
    if len(text) <= max_chars:
        return text
    tail = min(REASON_TAIL_CHARS, max_chars // 2)
    return f"{text[:max_chars - tail - 5].rstrip()} ... {text[-tail:].lstrip()}"
