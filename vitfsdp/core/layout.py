"""The run directory's vocabulary: every file and folder name, the ranks' exit codes and the
run statuses, each defined here once. Pure constants (and :func:`field_of`), standard library
only: launchers, records, trainers and readers all import them from here.

A point's run directory (``<sweep dir>/<num>_<overrides>/``)::

    run.json  metrics.jsonl  summary.json         the records (vitfsdp.records)
    job.json                                      the point's identity, by its launcher
    network.json                                  bytes sent per node (emulated network)
    train.log                                     the ranks' output (local launcher)
    job.sbatch  logs/task<N>.log  slurm-<id>.out  the Slurm job's script and output
    submitted_job_ids                             job ids of a script submitted by submit.sh
    checkpoint/meta.json ...                      the latest checkpoint; a rerun resumes
    attempts/<n>/                                 an earlier attempt's files

and the sweep directory, beside the points: ``.sweep.lock``, ``.secrets.env``, ``.submitit/``,
``packs/`` (with ``stop``, once the sweep stopped its packs).
"""

from __future__ import annotations

# ---------------------------------------------------------------- a point's run directory

#: What ran: config, world, devices, versions, status (rank 0 at start, rewritten at the end).
RUN_FILE = "run.json"
#: One JSON object per timing window, appended by rank 0.
METRICS_FILE = "metrics.jsonl"
#: How the run ended and its headline figures (rank 0, or the launcher for a run that died).
SUMMARY_FILE = "summary.json"
#: The point's identity (launcher, overrides, config hash; Slurm job and array ids), written
#: by the launcher before the run.
JOB_FILE = "job.json"
#: Bytes each node sent over its emulated link during the point, and the link's rate: written
#: by the local launcher when the point's emulated network closes (docs/network.md).
NETWORK_FILE = "network.json"
#: What else this host ran while the point ran here: CPU seconds of other processes, measured
#: by the local launcher around the point's processes (:class:`vitfsdp.records.OtherWork`).
HOST_FILE = "host.json"
#: In a sweep directory: the last sweep command's config and overrides, saved by Hydra's
#: sweeper (secret values redacted by the sweep).
MULTIRUN_FILE = "multirun.yaml"
#: In a sweep directory: every sweep command that ran there, one JSON object a start
#: (``started_at``, Hydra's ``task`` and ``hydra`` overrides, secrets redacted); Hydra's
#: multirun.yaml holds the last one only.
COMMANDS_FILE = "commands.jsonl"
#: The local launcher's file for the ranks' stdout and stderr.
LOG_FILE = "train.log"
#: The Slurm job script that ran, byte for byte.
SCRIPT_FILE = "job.sbatch"
#: Per-task output of a Slurm job: ``logs/`` + :data:`TASK_LOG`.
TASK_LOG_DIR = "logs"
#: One Slurm task's log inside :data:`TASK_LOG_DIR`; ``task`` is the task's SLURM_PROCID
#: (``%t`` in an srun ``--output`` pattern).
TASK_LOG = "task{task}.log"
#: The batch step's output of a job script submitted by hand (``%j`` in sbatch's
#: ``--output`` pattern): its job id tells which job ran the point.
SLURM_OUTPUT = "slurm-{job_id}.out"
#: The Slurm job ids ``submit.sh`` (``--scripts-only``) got from sbatch for the point's script
#: (its own ``job.sbatch`` or its pack's), a line each, the newest last: where ``--status``
#: finds a job submitted by hand before it starts (once started: :data:`SLURM_OUTPUT`). A
#: job script that starts leaves it in place; a rerun of the sweep moves it with the attempt.
SUBMITTED_FILE = "submitted_job_ids"
#: The latest complete checkpoint; launchers leave it in place when moving an attempt aside.
CHECKPOINT_DIR = "checkpoint"
#: A checkpoint save in progress, renamed to :data:`CHECKPOINT_DIR` once every rank wrote.
CHECKPOINT_TMP_DIR = ".checkpoint.tmp"
#: The previous checkpoint while the new one is renamed in (removed after).
CHECKPOINT_OLD_DIR = ".checkpoint.old"
#: Inside a checkpoint: the step reached, the attempt, the world size, the config fingerprint.
CHECKPOINT_META_FILE = "meta.json"
#: Earlier attempts of a point run again: ``attempts/<n>/``, n the attempt it holds, counted
#: from 0 as run.json's ``attempt`` (:func:`vitfsdp.launch.resume.attempt_folder`). Folders
#: made by earlier versions count from 1: only n's order matters (the highest the latest);
#: the attempt is read from the folder's run.json.
ATTEMPTS_DIR = "attempts"

# ---------------------------------------------------------------- the sweep directory

#: The ``flock`` that keeps a second sweep out of the directory.
LOCK_FILE = ".sweep.lock"
#: The values of ``cluster.secrets`` (mode 0600), sourced by the sweep's job scripts.
SECRETS_FILE = ".secrets.env"
#: submitit's pickles and wrapper logs.
SUBMITIT_DIR = ".submitit"
#: Each pack's script and Slurm output (``hydra.launcher.pack=by_nodes``).
PACK_DIR = "packs"
#: A pack's job script inside :data:`PACK_DIR`.
PACK_SCRIPT = "pack{index}.sbatch"
#: A pack's Slurm output inside :data:`PACK_DIR` (``job_id``: ``%j`` in sbatch's pattern).
PACK_OUTPUT = "pack{index}-{job_id}.out"
#: The site measurement (``python -m vitfsdp.probe``) in a sweep directory.
PROBE_FILE = "probe.json"
#: What a pack's probe step measures (``cluster.probe=allocation``), inside :data:`PACK_DIR`.
PACK_PROBE_REQUEST = "probe{index}.json"
#: Inside :data:`PACK_DIR`: the packs the sweep's same-failure stop told to run no further
#: point, a line each, ``<job id> <reason>`` (the stop's reason, on one line), appended by the
#: sweep; a pack's script reads it before each point after its first and ends
#: (:data:`EXIT_PACK_STOPPED`) where it names the pack's job. A later sweep's packs have other
#: job ids: the lines of an earlier stop stop none of them.
PACK_STOP_FILE = "stop"

# ---------------------------------------------------------------- exit codes

#: Every rank of a run that completed.
EXIT_COMPLETED = 0
#: A rank whose run ended ``oom``, ``timeout`` or ``failed`` (the status is in summary.json).
#: torchrun reports 1 for any failed worker too, :data:`EXIT_PREEMPTED` included.
EXIT_FAILED = 1
#: Every rank of a run that saved a checkpoint and stopped on SIGUSR2/SIGTERM (status
#: ``preempted``): a job script requeues on it; run it again in the same directory to resume.
EXIT_PREEMPTED = 3
#: ``python -m vitfsdp.launch.resume`` for a run directory that already holds a completed
#: run: the job script ends there, successfully.
EXIT_ALREADY_COMPLETED = 10
#: A pack's script that ended before a point because the sweep's stop file
#: (:data:`PACK_STOP_FILE`) names its job: the points it did not reach have no records until
#: the sweep's status records them ``cancelled`` (held back, with the stop's reason).
EXIT_PACK_STOPPED = 4

# ---------------------------------------------------------------- statuses

#: In flight (run.json only; never a summary's status).
RUNNING = "running"
#: Every step ran; the figures are valid.
COMPLETED = "completed"
#: Out of memory on some rank (device or host), or Slurm's OUT_OF_MEMORY.
OOM = "oom"
#: A collective waited longer than ``train.timeout_s``, or the job hit its time limit.
TIMEOUT = "timeout"
#: Any other error, or a process that died without a summary.
FAILED = "failed"
#: Stopped on SIGUSR2/SIGTERM after saving a checkpoint (:data:`EXIT_PREEMPTED`).
PREEMPTED = "preempted"
#: Cancelled from outside (``scancel``).
CANCELLED = "cancelled"
#: Not run: the plan predicts the point does not fit.
SKIPPED_INFEASIBLE = "skipped_infeasible"
#: Every status a run may end in (a summary's ``status``); :data:`RUNNING` while in flight.
STATUSES = (COMPLETED, OOM, TIMEOUT, FAILED, PREEMPTED, CANCELLED, SKIPPED_INFEASIBLE)
#: Statuses of a run that ended this way itself: a rerun of the sweep skips them unless asked
#: to rerun failures (a ``timeout`` at the job's time limit is ``interrupted`` and runs again).
FAILED_IN_RUN = (OOM, FAILED, TIMEOUT, SKIPPED_INFEASIBLE)
#: Statuses that count as ended from outside the run: a rerun runs the point again.
INTERRUPTED_STATUSES = (PREEMPTED, CANCELLED, TIMEOUT)


def field_of(pattern: str, name: str) -> str | None:
    """The value of the one ``{field}`` of a name pattern (:data:`TASK_LOG`,
    :data:`SLURM_OUTPUT`) in the file name ``name``
    (``field_of(SLURM_OUTPUT, "slurm-42.out") == "42"``); None when ``name`` does not match.
    """
    prefix, _, rest = pattern.partition("{")
    suffix = rest.partition("}")[2]
    if len(name) < len(prefix) + len(suffix) or not name.startswith(prefix) \
            or not name.endswith(suffix):
        return None
    return name[len(prefix):len(name) - len(suffix)]
