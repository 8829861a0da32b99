"""Local launcher: one point as ``torchrun`` processes on this machine.

A "node" is simulated as ``cluster.gpus_per_node`` processes; all of them run on this host
(``--standalone`` picks a free rendezvous port, so points never collide on a port). With
``cluster.network.emulate=true`` and root, each node is a torchrun of its own in its own
network namespace, the nodes apart on a shaped link (:mod:`vitfsdp.launch.netns`).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from vitfsdp.core.layout import HOST_FILE, METRICS_FILE, NETWORK_FILE, RUN_FILE
from vitfsdp.core.layout import LOG_FILE as LOG_FILE  # the sweep reads it from here
from vitfsdp.launch import netns
from vitfsdp.launch.agent import AGENT
from vitfsdp.launch.netns import NetworkConfig
from vitfsdp.provenance import NETWORK_ENV, config_record, redact_args
from vitfsdp.records import HYDRA_HINT, OtherWork, read_json, read_jsonl, write_json_atomic

log = logging.getLogger(__name__)

#: Signals torchrun forwards to its ranks: its default four and SIGUSR2, which Slurm sends
#: before a time limit (``--signal``). Without SIGUSR2 in the list torchrun dies of it and
#: leaves its ranks running without a launcher.
TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR2")


def torchrun_signal_env(shutdown_timeout_s: int = 30) -> dict[str, str]:
    """Environment that makes torchrun forward :data:`TORCHRUN_SIGNALS` to its ranks and give
    them ``shutdown_timeout_s`` seconds to save a checkpoint and exit before it kills them.

    These are the variables behind torchrun's ``--signals-to-handle`` and
    ``--shutdown-timeout`` (``PET_<option>``, torch.distributed.argparse_util), added in torch
    2.9 (pytorch/pytorch#160690). An older torchrun ignores them and dies of SIGUSR2: on
    Slurm, use ``cluster.launch_mode=srun`` (the default) with it.
    """
    return {"PET_SIGNALS_TO_HANDLE": ",".join(TORCHRUN_SIGNALS),
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(shutdown_timeout_s)}


def torchrun_command(overrides: Sequence[str], run_dir: Path, num_procs: int) -> list[str]:
    """The argv that trains one point: torchrun over ``vitfsdp.train`` with the point's Hydra
    overrides, writing into ``run_dir`` (no shell: values need no quoting). torchrun's agent
    is started as :mod:`vitfsdp.launch.agent` (torch's ``torchrun``, imported with the
    collector paused)."""
    return [
        sys.executable, *AGENT, "--standalone",
        f"--nproc_per_node={num_procs}", "-m", "vitfsdp.train", *overrides,
        f"hydra.run.dir={quote_override(str(run_dir))}", "hydra.output_subdir=null",
    ]


def node_torchrun_command(overrides: Sequence[str], run_dir: Path, procs_per_node: int,
                          nodes: int, node: int, master_addr: str) -> list[str]:
    """:func:`torchrun_command` for node ``node`` of ``nodes`` apart: a static rendezvous on
    ``master_addr`` (node 0's address) at :data:`vitfsdp.launch.netns.MASTER_PORT`."""
    cmd = torchrun_command(overrides, run_dir, procs_per_node)
    at = cmd.index("--standalone")
    cmd[at:at + 1] = static_rendezvous_args(nodes, node, master_addr)
    return cmd


def static_rendezvous_args(nodes: int, node: int, master_addr: str) -> list[str]:
    """torchrun's options, in place of ``--standalone``, for node ``node`` (0-based) of
    ``nodes`` torchruns apart: a static rendezvous on ``master_addr`` (node 0's address) at
    :data:`vitfsdp.launch.netns.MASTER_PORT`."""
    return [f"--nnodes={nodes}", f"--node-rank={node}", f"--master-addr={master_addr}",
            f"--master-port={netns.MASTER_PORT}"]


def quote_override(value: str) -> str:
    """Quote a string for Hydra's override grammar, so that Hydra reads back exactly
    ``value``: '=', ',', ':' or spaces stay literal.

    In a double-quoted Hydra value a backslash is an escape only before a quote (Hydra's
    override grammar docs, "Quoted values"; facebookresearch/hydra#1600): quotes become
    ``\\"`` and only the backslashes before a quote or the closing quote are doubled. Other
    backslashes stay single, e.g. the ``\\:`` Hydra puts into a run directory's name for
    ``cluster.time=00:10:00`` (doubling those made the training write into another
    directory).

    ``${`` stays text too: OmegaConf would resolve it a second time, in the training (on the
    node), a value the sweep already resolved (``a\\${oc.env:SLURM_JOB_ID}b`` wrote into
    ``a129b/``; ``${IFS}`` failed every rank). OmegaConf reads ``\\${`` as a literal ``${``
    and ``\\\\`` before one as one backslash (its grammar's escapes), so each ``${`` gets a
    backslash and the backslashes before it are doubled."""
    value = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value)
    return '"' + re.sub(r'(\\*)("|\Z)', _escape_before_quote, value) + '"'


def paste_override(key: str, value: str) -> str:
    """``key=value`` as one shell word a user pastes: :func:`quote_override`'s Hydra quotes
    inside :func:`shlex.quote`'s, so that the shell hands Hydra the quotes and Hydra reads
    back exactly ``value`` (spaces, ``(``, ``'``, ``;`` included)."""
    return shlex.quote(f"{key}={quote_override(value)}")


def _escape_before_quote(m: re.Match) -> str:
    backslashes, quote = m.group(1), m.group(2)
    return backslashes * 2 + ('\\"' if quote else "")


def job_record(point) -> dict:
    """The ``job.json`` of a point run here (a :class:`vitfsdp.sweep.Point`): its identity,
    secret override values redacted (:func:`vitfsdp.provenance.redact_args`), and its
    resolved config as run.json holds it (:func:`vitfsdp.provenance.config_record`), so
    that a point that ends before its training writes run.json (a Ctrl-C, a cancelled
    job) is still recorded as the point it is (:func:`vitfsdp.records.mark_failed`)."""
    return {"launcher": "local", "job_id": None, "config_hash": point.config_hash,
            "nodes": point.cfg.nodes, "world_size": point.cfg.world_size,
            "overrides": redact_args(list(point.overrides)),
            "config": config_record(point.cfg), "sweep": sweep_process(),
            "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds")}


def sweep_process() -> dict:
    """This process (the sweep that runs a point here) as a point's job.json records it:
    ``host``, ``pid`` and ``pid_start`` (its start in clock ticks after boot,
    :func:`process_start`, so that a later process given the same pid is not taken for it);
    :func:`process_runs` reads it back."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": process_start(os.getpid())}


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``'s
    22nd field, proc(5)); None where it is gone or there is no ``/proc``."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])  # after "(comm) state"
    except (OSError, ValueError, IndexError):
        return None


def process_runs(record: object) -> bool | None:
    """Whether the sweep process a job.json's ``sweep`` record names (:func:`sweep_process`)
    still runs: the same pid with the same start. None where the record names another
    host (which this one cannot see) or holds no pid."""
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int):
        return None
    if record.get("host") != socket.gethostname():
        return None
    start = process_start(record["pid"])
    return start is not None and record.get("pid_start") in (None, start)


def point_processes(run_dir: Path) -> list[int]:
    """The pids of this host's processes that train into ``run_dir``: torchrun and its ranks,
    whose argv name it (``hydra.run.dir=...``, :func:`torchrun_command`). A sweep killed
    with SIGKILL leaves them running (nothing can stop them from the sweep then), writing
    into the point's files; [] where there is no ``/proc``."""
    # the sweep writes the resolved path into the argv (sweep.compose); --status may be
    # given a relative one
    word = f"hydra.run.dir={quote_override(str(Path(run_dir).resolve()))}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if word in (proc / "cmdline").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, ValueError):  # ended meanwhile, or not ours to read
            continue
    return sorted(found)


def run_point(
    overrides: Sequence[str],
    run_dir: Path,
    num_procs: int,
    *,
    log_path: Path | None = None,
    on_window: Callable[[dict], None] | None = None,
    poll_s: float = 1.0,
    env: Mapping[str, str] | None = None,
    nodes: int = 1,
    network: NetworkConfig | None = None,
    on_poll: Callable[[], object] | None = None,
) -> int:
    """Run one point to the end and return torchrun's exit code (the first non-zero one of
    its nodes' torchruns where nodes are apart).

    Args:
        log_path: file for the processes' output; ``None`` = this terminal.
        on_window: called with each window this attempt of the point measures, as it
            reaches metrics.jsonl (:class:`AttemptWindows`); where the attempt resumes from
            a checkpoint, first with a resume record ``{"resumed_from_step": N,
            "attempt": k}`` (no ``step_end``; run.json's, ``k`` counted from 0).
        env: variables added to the processes' environment (the point's ``cluster.env`` and
            the values of its ``cluster.secrets``, which never stand in the command line).
        nodes: the point's node count; ``num_procs`` / ``nodes`` ranks per node.
        network: ``cluster.network``; with ``emulate`` and root the nodes run apart
            (:class:`vitfsdp.launch.netns.EmulatedNetwork`), without root one line says the
            network is not emulated and the ranks share this host's loopback.
        on_poll: called after each check of the processes (every ``poll_s`` seconds), with
            nothing: where the sweep says a point that shows no progress
            (:meth:`vitfsdp.progress.SweepProgress.tick`).

    Writes ``run_dir``/``host.json`` as the point ends, however it ends: the CPU time other
    processes of this host took meanwhile (:class:`vitfsdp.records.OtherWork`).

    Raises:
        RuntimeError: the emulated network could not be made (an ``ip``/``tc`` failure).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **(env or {}), **torchrun_signal_env()}
    reason = netns.unavailable_reason() if network and network.emulate else None
    if reason:
        log.warning("cluster.network.emulate=true but %s: the network is not emulated; the "
                    "nodes share this host's loopback", reason)
        env[NETWORK_ENV] = json.dumps(netns.record(network, nodes, False, reason))
    out = open(log_path, "w", encoding="utf-8") if log_path else None  # noqa: SIM115
    other = OtherWork()  # what else this host ran meanwhile: host.json, however it ends
    try:
        if network and network.emulate and not reason:
            with netns.EmulatedNetwork(nodes, network.inter_node_gbit_s,
                                       network.node_cpus) as net:
                cmds = [net.wrap(k, node_torchrun_command(
                    overrides, run_dir, num_procs // nodes, nodes, k, net.addresses[0]))
                    for k in range(nodes)]
                try:
                    return run_until_done(cmds, [{**env, **net.env(k)} for k in range(nodes)],
                                          out, run_dir, on_window, poll_s, on_poll=on_poll)
                finally:
                    write_network_record(run_dir, net)
        cmd = torchrun_command(overrides, run_dir, num_procs)
        return run_until_done([cmd], [env], out, run_dir, on_window, poll_s, on_poll=on_poll)
    finally:
        if out:
            out.close()
        write_json_atomic(run_dir / HOST_FILE, other.record())


def write_network_record(run_dir: Path, net: netns.EmulatedNetwork) -> dict:
    """Write ``run_dir``/``network.json`` (:data:`vitfsdp.core.layout.NETWORK_FILE`,
    atomically) and return it: ``sent_bytes_per_node`` (bytes, one per node, node 0 first:
    each node's link TX counter, :meth:`~vitfsdp.launch.netns.EmulatedNetwork.sent_bytes`,
    None where unreadable), ``sent_bytes_total``, ``inter_node_gbit_s`` (the link rate set)
    and ``network`` (the emulated network's name). Called as the point ends, before the
    network is removed, whether the point succeeded or not (a failed point's bytes are data).
    The counters include the rendezvous and the store's traffic (a few kB)."""
    sent = net.sent_bytes()
    rec = {"sent_bytes_per_node": sent,
           "sent_bytes_total": sum(b for b in sent if b is not None),
           "inter_node_gbit_s": net.gbit_s, "nodes": len(net.namespaces), "network": net.name}
    write_json_atomic(run_dir / NETWORK_FILE, rec)
    return rec


def _wait_for_one(procs: list[subprocess.Popen], poll_s: float) -> None:
    """Return once the first of ``procs`` still running has ended, or after ``poll_s``
    seconds: a point's end is seen when it happens, not up to ``poll_s`` later."""
    running = next((p for p in procs if p.poll() is None), None)
    if running is None:
        return
    try:
        running.wait(timeout=poll_s)
    except subprocess.TimeoutExpired:
        pass


def run_until_done(cmds: list[list[str]], envs: list[dict], out, run_dir: Path | None = None,
                   on_window: Callable[[dict], None] | None = None, poll_s: float = 1.0,
                   timeout_s: float | None = None,
                   on_poll: Callable[[], object] | None = None) -> int | None:
    """Start ``cmds`` (one torchrun per node, each with its env of ``envs``; output to the
    open file ``out``, this terminal where None) and wait for all, checking every ``poll_s``
    seconds and as soon as one ends (:func:`_wait_for_one`); once one fails, or ``timeout_s``
    seconds have passed, the others are stopped (SIGTERM, then SIGKILL after 30 s: their
    peers are gone). ``on_window`` is called with each window this attempt adds to
    ``run_dir``'s metrics.jsonl, after a resume record where it resumes
    (:class:`AttemptWindows`); ``on_poll`` (no arguments) after each check, windows
    reported.

    Returns:
        The exit code of the first process that failed (not the codes of those it made
        stop), else 0; ``None`` when ``timeout_s`` (None = no limit) passed before every
        process ended and none had failed.

    On an exception (a ^C, or the SIGTERM or SIGHUP that :func:`vitfsdp.sweep.main_cli` turns
    into ``SystemExit``) the processes are stopped as above, with :data:`STOP_GRACE_S`, before
    it propagates: none outlives the sweep."""
    procs = [subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if out else None,
                              env=e) for cmd, e in zip(cmds, envs, strict=True)]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    failure, timed_out = 0, False
    windows = AttemptWindows(run_dir, on_window)
    try:
        while None in [p.poll() for p in procs]:  # each polled: a later node's failure seen
            failure = failure or next((p.returncode for p in procs if p.returncode), 0)
            if failure or (deadline is not None and time.monotonic() > deadline):
                timed_out = not failure
                _stop(procs)  # their codes are the stop's, not the failure's
            _wait_for_one(procs, poll_s)
            windows.report()
            if on_poll is not None:
                on_poll()
    except BaseException:
        _stop(procs, STOP_GRACE_S)
        raise
    windows.report()
    if timed_out:
        return None
    return failure or next((p.returncode for p in procs if p.returncode), 0)


#: Seconds the processes of a point get to end after SIGTERM when the sweep itself is
#: stopped (then SIGKILL): torchrun passes the signal to its ranks, which record the point.
STOP_GRACE_S = 15


def _stop(procs: list[subprocess.Popen], grace_s: float = 30) -> None:
    """SIGTERM to each process still running, SIGKILL to those left after ``grace_s`` and
    to their descendants (a torchrun's ranks, which a SIGKILL to the torchrun alone would
    orphan). A second Ctrl-C, SIGTERM or SIGHUP while it waits kills what is left the same
    way before it propagates: an impatient ``^C^C`` leaves no rank running."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    try:
        for p in running:
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _kill_tree(p)
    except BaseException:
        for p in running:
            _kill_tree(p)
        raise


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and every process below it (found through ``/proc`` before the kill,
    while they still have it as an ancestor), then reap ``proc``."""
    if proc.poll() is None:
        below = _descendants(proc.pid)
        proc.kill()
        for pid in below:
            try:
                os.kill(pid, 9)  # SIGKILL
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, theirs, ...), from each process's parent in
    ``/proc/<pid>/stat`` (proc(5)); empty where there is no ``/proc``."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # after "(comm) state"
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


class AttemptWindows:
    """The windows of ``run_dir``'s metrics.jsonl that this attempt of a point measures,
    handed to ``on_window`` as they arrive (:meth:`report`); nothing where either is None.

    A resumed attempt's trainer writes the windows of the earlier attempts it keeps (up to
    its checkpoint's step; those past it are dropped and measured again:
    :meth:`vitfsdp.records.RunRecords.start`) into a fresh metrics.jsonl, then run.json with
    ``resumed_from_step`` and ``attempt``, then its own windows. So nothing is reported
    until run.json is this attempt's (not the one there when the point started, which a
    run directory nobody moved aside still holds), and then only the windows past
    ``resumed_from_step``: the earlier attempts' are not replayed as new progress. A resume
    is reported once, first, as ``{"resumed_from_step": N, "attempt": k}``.
    """

    def __init__(self, run_dir: Path | None, on_window: Callable[[dict], None] | None) -> None:
        self.run_dir, self.on_window = run_dir, on_window
        self.seen = 0  # rows of this attempt's metrics.jsonl already looked at
        self.before = _stamp(run_dir / RUN_FILE) if run_dir is not None else None
        self.started = False  # run.json is this attempt's
        self.after: int | None = None  # resumed_from_step: windows up to it are earlier ones'

    def report(self) -> None:
        """Hand the windows this attempt added since the last call to ``on_window``."""
        if self.on_window is None or self.run_dir is None:
            return
        if not self.started and not self._start():
            return
        rows = read_jsonl(self.run_dir / METRICS_FILE)
        for row in rows[self.seen:]:
            step = row.get("step_end")
            if self.after is None or not isinstance(step, int) or step > self.after:
                self.on_window(row)
        self.seen = max(self.seen, len(rows))

    def _start(self) -> bool:
        """Whether run.json is this attempt's now; the first time, report its resume."""
        path = self.run_dir / RUN_FILE
        stamp = _stamp(path)
        if stamp is None or stamp == self.before:
            return False
        try:
            run = read_json(path) or {}
        except (OSError, ValueError):  # written atomically: not expected; try again later
            return False
        self.started = True
        step = run.get("resumed_from_step")
        if isinstance(step, int):
            self.after = step
            self.on_window({"resumed_from_step": step, "attempt": run.get("attempt")})
        return True


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """Which version of ``path`` is there (inode, modification time in ns, size), None where
    it is missing: a file replaced atomically gets another."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


#: torchrun's own banner and glog-style lines ("W1121 09:27:37.1 ...": every W and I line,
#: and the E lines torch.distributed wrote) and Hydra's closing hint (never the cause), left
#: out of tails; a rank's own E line (a gRPC or XLA error) stays.
_LAUNCHER_NOISE = re.compile(r"^([WI]\d{4} |E\d{4} .*torch/distributed/|\*{5,}|"
                             f"Setting OMP_NUM_THREADS|{re.escape(HYDRA_HINT)})")
#: torchrun's report that a child failed; what the ranks printed comes before it.
_AGENT_FAILURE = re.compile(r"^E\d{4} .*failed \(exitcode")
#: A line of a rank that says something failed: a log level, an exception, a crash, or a
#: glog E/F line; a traceback's indented frames are not.
_ERROR_LINE = re.compile(r"^(?!\s)(?:.*\b(?:ERROR|FATAL|Fatal|Segmentation fault|SIGSEGV|"
                         r"SIGABRT|Aborted)\b|[EF]\d{4} |.*\w*(?:Error|Exception)\b)")
#: A glog line's prefix (level, date, time, thread), left out of the one-line cause.
_GLOG_PREFIX = re.compile(r"^[EF]\d{4} [\d:.]+\s+\d+ ")


def tail(path: Path, num_lines: int = 20) -> str:
    """What the ranks printed last before torchrun reported their failure: the last
    ``num_lines`` lines before torchrun's failure report, its banner lines left out ('' if
    the file is missing); then, where the ranks printed an error (:data:`_ERROR_LINE`) or
    torchrun named the failure's root cause, one line of both, e.g. ``"add_port.cc:83]
    Failed to add port to server: ...; torchrun's root cause: rank 0 exitcode -11
    (SIGSEGV)"``: the line a one-line reason takes (:func:`vitfsdp.records.reason_line`),
    where an INFO line printed after the error would otherwise stand for it. The rank's
    error is the last such line (a traceback's exception, not its header; a harmless error
    line at start-up gives way to the later one)."""
    lines, end = _split_log(path)
    if lines is None:
        return ""
    kept = [line for line in lines[:end] if line.strip() and not _LAUNCHER_NOISE.match(line)]
    errors = [line.strip() for line in kept
              if _ERROR_LINE.match(line) and not line.startswith("Traceback")]
    cause = "; ".join(([_GLOG_PREFIX.sub("", errors[-1])] if errors else [])
                      + ([f"torchrun's root cause: {root}"]
                         if (root := _root_cause(lines[end:])) else []))
    shown = kept[-num_lines:]
    if cause and (not shown or shown[-1].strip() != cause):
        shown.append(cause)
    return "\n".join(shown)


def root_cause(path: Path) -> str:
    """torchrun's root cause of a failed point (:func:`_root_cause` of the failure report in
    the log at ``path``), ``"rank 1 (local_rank: 1) exitcode -9 (SIGKILL)"``; ``""`` where
    the log holds no report or is missing."""
    lines, end = _split_log(path)
    return _root_cause(lines[end:]) if lines is not None else ""


def _split_log(path: Path) -> tuple[list[str] | None, int]:
    """A point's log at ``path`` as lines, and where torchrun's failure report begins in
    them (:data:`_AGENT_FAILURE`; their length where there is none); ``(None, 0)`` where
    the file is missing."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None, 0
    return lines, next((i for i, line in enumerate(lines) if _AGENT_FAILURE.match(line)),
                       len(lines))


def _root_cause(lines: list[str]) -> str:
    """The rank and exit of torchrun's "Root Cause (first observed failure)" block in
    ``lines`` (its failure report), ``"rank 0 (local_rank: 0) exitcode -11 (SIGSEGV)"``;
    ``""`` where there is none."""
    start = next((i for i, line in enumerate(lines) if line.startswith("Root Cause")), None)
    if start is None:
        return ""
    fields = {}
    for line in lines[start + 1:]:
        if line.startswith("="):
            break
        key, _, value = line.strip().partition(":")
        fields.setdefault(key.strip(), value.strip())
    rank = fields.get("rank", "?")
    code = re.sub(r"\s*\(pid: \d+\)", "", fields.get("exitcode", "?"))
    return f"rank {rank} exitcode {' '.join(code.split())}"
