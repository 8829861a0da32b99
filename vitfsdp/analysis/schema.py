"""The columns of ``runs.csv`` (a :func:`~vitfsdp.analysis.collect.collect_runs` frame),
declared once: name, dtype, unit, where the value comes from and what it means, and how the
report shows it.

:mod:`vitfsdp.analysis.collect` builds and types its frame from :data:`RUN_COLUMNS`,
:mod:`vitfsdp.analysis.figures` tells what a run was from what it measured by each column's
``source`` (a figure is drawn again only where its inputs changed), and
:mod:`vitfsdp.analysis.report` takes the headers and formats of its tables' run columns
from ``display``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: Column dtypes (pandas): nullable integers, floats (``NaN`` where not measured), and text
#: or flags (``object``: JSON's strings, booleans and nulls as they are).
INT, FLOAT, TEXT = "Int64", "float64", "object"
#: Where a column's value comes from, by ``Column.source``.
SOURCES = {
    "run": "which run it is and how it ended (run.json, summary.json)",
    "config": "a setting of the run, as it resolved (run.json config)",
    "world": "the world, devices and model it ran on (run.json world, device, model, network)",
    "derived": "computed here from the run's other columns",
    "outcome": "why it did not complete (summary.json, its log)",
    "measured": "what it measured (summary.json, metrics.jsonl, network.json)",
    "predicted": "the plan's prediction (run.json plan, else vitfsdp.plan)",
    "provenance": "when and with which code and libraries it ran (run.json)",
}
#: The sources of what a run was (its identity, settings, world): the columns every figure
#: reads, whose lines, labels and titles they make. The others hold what it measured or how
#: it ended (:data:`MEASURED_COLUMNS`).
RUN_SOURCES = ("run", "config", "world", "derived")


#: The display format of a rate (images/s): whole numbers from 100 up (``1,234``), three
#: significant digits below (``16.3``, ``0.512``), so a CPU study's 11-16 images/s keep the
#: digits its text quotes (:func:`format_rate`).
RATE = "rate"


def format_rate(value: float) -> str:
    """A rate as :data:`RATE` shows it: ``1,234``, ``123``, ``16.3``, ``0.512``."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


#: The largest TFLOP/s per rank shown in TFLOP/s: below it (CPU ranks, tiny models) the
#: FLOP rates are shown in GFLOP/s, in the figure and the report's tables alike.
GFLOPS_BELOW_TFLOPS = 0.1


def flop_unit(tflops: Iterable[float]) -> tuple[str, float]:
    """The unit FLOP rates are shown in, and the factor from TFLOP/s to it: ``("GFLOP/s",
    1e3)`` where every known value of ``tflops`` (TFLOP/s per rank; NaN and None skipped)
    is below :data:`GFLOPS_BELOW_TFLOPS` (a CPU rank's 0.00617 reads 6.17), else
    ``("TFLOP/s", 1.0)`` (also for no values)."""
    values = [float(v) for v in tflops if v is not None and not math.isnan(float(v))]
    return (("GFLOP/s", 1e3) if values and max(values) < GFLOPS_BELOW_TFLOPS
            else ("TFLOP/s", 1.0))


@dataclass(frozen=True)
class Column:
    """One column of ``runs.csv``.

    Attributes:
        name: the column; a dotted name is a config key as a user types it
            (``kernels.compile``).
        dtype: :data:`INT`, :data:`FLOAT` or :data:`TEXT`.
        unit: what its numbers count (``GiB``, ``images/s``, ``fraction``); ``""`` for none.
        source: a key of :data:`SOURCES`.
        meaning: what it holds, on one line.
        display: ``(header, format)`` of the column in the report's tables (``format`` a
            :meth:`str.format` pattern, or :data:`RATE`); ``None``: the report shows no run
            column of it.
        figures: the figures (:data:`vitfsdp.analysis.figures.FIGURES` names) that draw
            this column, where it is not one of the run columns every figure reads (a
            figure is drawn again where one of its columns changed: :data:`FIGURE_COLUMNS`).
    """

    name: str
    dtype: str
    unit: str
    source: str
    meaning: str
    display: tuple[str, str] | None = None
    figures: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.dtype not in (INT, FLOAT, TEXT) or self.source not in SOURCES:
            raise ValueError(f"column {self.name}: dtype {self.dtype!r} or source "
                             f"{self.source!r} unknown")


#: Every column of ``runs.csv``, in order. ``peak_*`` are maxima over ranks, ``*_min_*``
#: minima; a run that did not complete keeps its row with ``NaN`` figures.
RUN_COLUMNS = (
    Column("run_dir", TEXT, "", "run",
           "the run's directory"),
    Column("status", TEXT, "", "run",
           "how the run ended: completed, oom, failed, timeout, ... (summary.json; running or "
           "failed without one)"),
    Column("attempt_of", TEXT, "", "run",
           "an earlier attempt (attempts/<n>/): the run directory of the point, which ran "
           "again there; empty for a point's latest run (the only one tables and figures use)"),
    Column("reason", TEXT, "", "outcome",
           "why it did not complete, on one line (the full text: summary.json and the log)"),
    Column("log", TEXT, "", "outcome",
           "the log with its output and traceback, for a run that did not complete"),
    Column("model", TEXT, "", "config",
           "model preset (model.name)"),
    Column("strategy", TEXT, "", "config",
           "strategy preset (strategy.name)"),
    Column("sharding_strategy", TEXT, "", "config",
           "FSDP sharding strategy of the preset"),
    Column("shard_group_size", INT, "ranks", "config",
           "ranks a hybrid strategy shards over"),
    Column("backward_prefetch", TEXT, "", "config",
           "FSDP backward prefetch: BACKWARD_PRE, BACKWARD_POST or NONE"),
    Column("limit_all_gathers", TEXT, "", "config",
           "FSDP limit_all_gathers (bool)"),
    Column("engine", TEXT, "", "config",
           "FSDP1 or FSDP2 (PyTorch runs only)"),
    Column("framework", TEXT, "", "config",
           "torch or jax"),
    Column("precision", TEXT, "", "config",
           "the precision it computed in, as it resolved (precision=auto: what it chose)"),
    Column("data", TEXT, "", "config",
           "data set preset (data.name)"),
    Column("img_size", INT, "px", "config",
           "input side: the model record, else the config, else the variant's default"),
    Column("train.activation_checkpointing", TEXT, "", "config",
           "activation checkpointing (bool)"),
    Column("train.steps", INT, "steps", "config",
           "optimizer steps in total, warm-up included (null in records read before the "
           "column)"),
    Column("train.seed", INT, "", "config",
           "seed of model init and data order (null in records read before the column): "
           "runs of another seed are another line, not repeats"),
    Column("train.warmup_steps", INT, "steps", "config",
           "first steps left out of the headline figures (null in records read before the "
           "column)"),
    Column("train.log_every", INT, "steps", "config",
           "steps per timing window (null in records read before the column)"),
    Column("kernels.fused_attn", TEXT, "", "config",
           "fused attention kernel setting"),
    Column("kernels.compile", TEXT, "", "config",
           "torch.compile of the blocks, as it resolved (bool)"),
    Column("attention", TEXT, "", "config",
           "the attention that ran: sdpa (torch; its backend unrecorded), xla or cudnn "
           "(JAX), written out"),
    Column("kernels.adamw", TEXT, "", "config",
           "AdamW implementation setting"),
    Column("kernels.float32_matmul_precision", TEXT, "", "config",
           "torch's float32 matmul precision setting"),
    Column("kernels.cudnn_allow_tf32", TEXT, "", "config",
           "cuDNN TF32 setting (bool)"),
    Column("mixed_precision.param_dtype", TEXT, "", "config",
           "FSDP mixed precision: parameter dtype"),
    Column("mixed_precision.reduce_dtype", TEXT, "", "config",
           "FSDP mixed precision: gradient reduction dtype"),
    Column("mixed_precision.buffer_dtype", TEXT, "", "config",
           "FSDP mixed precision: buffer dtype"),
    Column("strategy.use_orig_params", TEXT, "", "config",
           "FSDP1 use_orig_params, as it resolved (bool)"),
    Column("strategy.blocks_per_unit", INT, "blocks", "config",
           "transformer blocks per FSDP unit (1 in records older than the key)"),
    Column("experiment", TEXT, "", "config",
           "the experiment preset the run belongs to"),
    Column("point_id", TEXT, "", "config",
           "the point's identity: 16 hex digits of SHA-256 over its recorded config without "
           "repeat, shared by the runs of one point whether they started or not"),
    Column("repeat", INT, "", "config",
           "the repeat's index within its point",
           display=("repeat", "{:d}")),
    Column("nodes", INT, "nodes", "config",
           "node count",
           display=("nodes", "{:d}")),
    Column("world_size", INT, "ranks", "world",
           "ranks (GPUs, or CPU ranks) of the run",
           display=("GPUs", "{:d}")),
    Column("ranks_per_node", INT, "ranks", "world",
           "ranks on each node"),
    Column("local_batch_size", INT, "images", "config",
           "images per rank and step"),
    Column("global_batch_size", INT, "images", "derived",
           "images per step: local_batch_size x world_size"),
    Column("cluster", TEXT, "", "config",
           "the cluster profile (cluster.name)"),
    Column("host_cpus", INT, "CPUs", "world",
           "CPUs of the host rank 0 ran on"),
    Column("ranks_per_host", INT, "ranks", "derived",
           "ranks that shared a host's CPUs: the whole world on the local and virtual profiles, "
           "else a node's"),
    Column("shared_cores", TEXT, "", "derived",
           "'8 ranks on 2 cores' where CPU ranks outnumbered the host's cores: not a hardware "
           "measurement"),
    Column("network", TEXT, "", "world",
           "the emulated link between nodes, where the local launcher made one"),
    Column("device_type", TEXT, "", "world",
           "cuda, rocm or cpu"),
    Column("device_name", TEXT, "", "world",
           "the device's name"),
    Column("device_memory_gib", FLOAT, "GiB", "world",
           "memory of one device (run.json, else cluster.device_memory_gib)",
           display=("device memory (GiB)", "{:.0f}")),
    Column("memory_limit_gib", FLOAT, "GiB", "world",
           "the memory one rank could use: on a GPU the device's (a JAX run's: XLA's pool of "
           "it, cluster.env's XLA_PYTHON_CLIENT_MEM_FRACTION, 75% by default); on CPU ranks "
           "train.memory_limit_gib where set (growth of a rank's data segment after its "
           "start, RLIMIT_DATA: not a cap on its resident memory); null where none is known",
           display=("memory limit (GiB)", "{:.2f}")),
    Column("device_peak_flops", FLOAT, "FLOP/s", "world",
           "the device's peak the utilization is a fraction of"),
    Column("peak_source", TEXT, "", "world",
           "where the peak comes from: a table entry or measured"),
    Column("price_per_node_hour", FLOAT, "per node-hour", "config",
           "price of one node for an hour (cluster profile)",
           display=("price/node-hour", "{:.2f}")),
    Column("num_params", INT, "parameters", "world",
           "the model's parameters"),
    Column("ips", FLOAT, "images/s", "measured",
           "global images/s: median over measured windows",
           display=("images/s", RATE),
           figures=("weak_scaling", "efficiency", "prefetch", "recipe", "tflops")),
    Column("ips_per_gpu", FLOAT, "images/s", "measured",
           "images/s per rank",
           display=("images/s/GPU", RATE)),
    Column("step_time_s", FLOAT, "s", "measured",
           "median step time",
           display=("step time (s)", "{:.3f}")),
    Column("tflops_per_gpu", FLOAT, "TFLOP/s", "measured",
           "model TFLOP/s per rank (3 x forward FLOPs)",
           display=("TFLOP/s/GPU (model)", "{:.3g}"),
           figures=("tflops",)),
    Column("mfu", FLOAT, "fraction", "measured",
           "model FLOPs utilization: tflops_per_gpu over the device's peak",
           display=("MFU", "{:.1%}")),
    Column("hw_tflops_per_gpu", FLOAT, "TFLOP/s", "measured",
           "hardware TFLOP/s per rank (recomputed forwards included)",
           display=("TFLOP/s/GPU (hardware)", "{:.3g}")),
    Column("hfu", FLOAT, "fraction", "measured",
           "hardware FLOPs utilization",
           display=("HFU", "{:.1%}")),
    Column("peak_mem_gib", FLOAT, "GiB", "measured",
           "peak memory, maximum over ranks: allocated GPU memory, else resident memory "
           "(peak_mem_kind)",
           display=("peak mem max (GiB)", "{:.2f}"),
           figures=("weak_scaling", "memory")),
    Column("peak_mem_min_gib", FLOAT, "GiB", "measured",
           "the same peak, minimum over ranks",
           display=("peak mem min over ranks (GiB)", "{:.2f}"),
           figures=("memory",)),
    Column("peak_mem_kind", TEXT, "", "measured",
           "what peak_mem_gib is: allocated or rss",
           figures=("weak_scaling", "memory")),
    Column("peak_mem_reserved_gib", FLOAT, "GiB", "measured",
           "peak memory the allocator reserved, maximum over ranks",
           display=("peak reserved (GiB)", "{:.2f}"),
           figures=("weak_scaling", "memory")),
    Column("peak_mem_reserved_min_gib", FLOAT, "GiB", "measured",
           "the same, minimum over ranks"),
    Column("peak_rss_gib", FLOAT, "GiB", "measured",
           "peak resident memory of a rank's process, maximum over ranks"),
    Column("device_mem_used_gib", FLOAT, "GiB", "measured",
           "memory in use on the whole device as the driver sees it, maximum over ranks",
           display=("device used (GiB)", "{:.2f}"),
           figures=("memory",)),
    Column("device_mem_used_min_gib", FLOAT, "GiB", "measured",
           "the same, minimum over ranks"),
    Column("alloc_retries", INT, "", "measured",
           "allocator retries (cudaMalloc after freeing its cache), summed over ranks",
           display=("allocator retries", "{:d}")),
    Column("num_ooms", INT, "", "measured",
           "out-of-memory errors the allocator caught, summed over ranks",
           display=("OOMs", "{:d}")),
    Column("device_busy_frac", FLOAT, "fraction", "measured",
           "share of the time the device was busy, mean over ranks",
           display=("device busy", "{:.0%}"),
           figures=("weak_scaling", "efficiency", "tflops", "prefetch")),
    Column("device_busy_min_frac", FLOAT, "fraction", "measured",
           "the same on the least busy rank (median over windows of the minimum over ranks; "
           "the host-bound flag reads it, analysis.lines.judged_busy)",
           display=("least busy rank", "{:.0%}")),
    Column("host_load_1m", FLOAT, "processes", "measured",
           "1-minute load average of rank 0's host at the start or end, the larger"),
    Column("cpu_throttled_s", FLOAT, "s", "measured",
           "time the CPU quota held rank 0's emulated node (or its own cgroup) back"),
    Column("host_other_cpus", FLOAT, "CPUs", "measured",
           "cores other processes of the ranks' host kept busy during the run's measured "
           "windows (other CPU seconds / window seconds, metrics.jsonl); for records without "
           "it (older runs of either trainer) on average while the point ran (host.json)",
           display=("other work (CPUs)", "{:.2f}"),
           # every figure's footer names the runs other work competed with (contention_note)
           figures=("weak_scaling", "efficiency", "memory", "prefetch", "tflops", "recipe")),
    Column("host_other_windows", TEXT, "", "measured",
           "host_other_cpus was measured over the run's timed windows (true: judged against "
           "10% of the host's cores) or over its whole point (false: host.json, 25%)",
           figures=("weak_scaling", "efficiency", "memory", "prefetch", "tflops", "recipe")),
    Column("state_params_gib", FLOAT, "GiB", "measured",
           "parameters a rank holds (its local shards), maximum over ranks",
           display=("params/rank (GiB)", "{:.3g}"),
           figures=("memory",)),
    Column("state_grads_gib", FLOAT, "GiB", "measured",
           "gradients a rank holds (its local shards), maximum over ranks",
           display=("grads/rank (GiB)", "{:.3g}"),
           figures=("memory",)),
    Column("state_optimizer_gib", FLOAT, "GiB", "measured",
           "optimizer state a rank holds (its local shards), maximum over ranks",
           display=("optimizer state/rank (GiB)", "{:.3g}"),
           figures=("memory",)),
    Column("num_classes", INT, "classes", "world",
           "the classifier's classes (chance-level loss: ln of it)"),
    Column("sent_gb_per_node_max", FLOAT, "GB", "measured",
           "bytes the busiest node sent over the emulated link",
           display=("sent/node max (GB)", "{:,.2f}")),
    Column("sent_gb_total", FLOAT, "GB", "measured",
           "bytes all nodes sent over the emulated link",
           display=("sent, all nodes (GB)", "{:,.2f}")),
    Column("ips_spread", FLOAT, "fraction", "measured",
           "(max - min) / median of the windows' images/s"),
    Column("ips_min", FLOAT, "images/s", "measured",
           "slowest measured window",
           figures=("weak_scaling", "efficiency", "tflops", "prefetch", "recipe")),
    Column("ips_max", FLOAT, "images/s", "measured",
           "fastest measured window",
           figures=("weak_scaling", "efficiency", "tflops", "prefetch", "recipe")),
    Column("step_time_s_min", FLOAT, "s", "measured",
           "shortest window step time"),
    Column("step_time_s_max", FLOAT, "s", "measured",
           "longest window step time"),
    Column("num_windows", INT, "windows", "measured",
           "measured (not warm-up) timing windows"),
    Column("num_attempts", INT, "attempts", "measured",
           "attempts the run took (summary.json, else run.json attempt + 1): more than 1 "
           "where it resumed from a checkpoint, its figures pooling every attempt's measured "
           "windows up to the checkpoint with the last attempt's (null in older records)"),
    Column("attempts_differ", TEXT, "", "measured",
           "where its measured windows come from more than one attempt: whether one attempt's "
           "slowest window was faster than another's fastest (their images/s ranges do not "
           "overlap; the pooled figures mix two speeds: rerun the point) (bool); null where "
           "they are one attempt's"),
    Column("last_step", INT, "steps", "measured",
           "the last step reached",
           display=("last step", "{:d}")),
    Column("loss", FLOAT, "", "measured",
           "training loss of the last window"),
    Column("elapsed_s", FLOAT, "s", "measured",
           "wall time of the training"),
    Column("compile_s", FLOAT, "s", "measured",
           "time compiling JAX's step ahead of time (XLA), outside every window; "
           "empty for PyTorch, whose torch.compile compiles at the first step, in the "
           "warm-up window"),
    Column("startup_s", FLOAT, "s", "measured",
           "rank 0's process start to its first step (its latest attempt): imports, "
           "rendezvous, build and sharding, restore; JAX's compilation too"),
    Column("ips_reached", FLOAT, "images/s", "measured",
           "a run that did not complete: median of its measured (not warm-up) windows",
           display=("images/s reached", RATE),
           figures=("weak_scaling",)),
    Column("peak_mem_reached_gib", FLOAT, "GiB", "measured",
           "a run that did not complete: the largest peak it recorded",
           display=("peak mem reached (GiB)", "{:.2f}"),
           figures=("memory",)),
    Column("pred_peak_mem_gib", FLOAT, "GiB", "predicted",
           "the plan's predicted peak memory",
           display=("predicted peak (GiB)", "{:.2f}"),
           figures=("memory",)),
    Column("pred_step_time_s", FLOAT, "s", "predicted",
           "the plan's predicted step time",
           display=("predicted step (s)", "{:.3f}")),
    Column("pred_ips", FLOAT, "images/s", "predicted",
           "the plan's predicted global images/s",
           display=("predicted images/s", RATE),
           figures=("weak_scaling",)),
    Column("pred_fits", TEXT, "", "predicted",
           "whether the plan predicts the point fits in memory (bool)"),
    Column("pred_mem_metric", TEXT, "", "predicted",
           "the measured column the predicted memory is compared with",
           figures=("memory",)),
    Column("pred_source", TEXT, "", "predicted",
           "what the prediction is made from (the probe file and when it measured)"),
    Column("started_at", TEXT, "", "provenance",
           "when the run started"),
    Column("git_commit", TEXT, "", "provenance",
           "the commit it ran (+dirty with local changes)"),
    Column("versions", TEXT, "", "provenance",
           "its library versions (CUDA, ROCm and NCCL only on a GPU)"),
)

#: The column names, in order.
COLUMNS = tuple(c.name for c in RUN_COLUMNS)
#: Integer columns, held as pandas' nullable ``Int64`` (a run that never started has none).
INT_COLUMNS = tuple(c.name for c in RUN_COLUMNS if c.dtype == INT)
#: Float columns (``NaN`` where the run measured nothing, or where old records lack them).
FLOAT_COLUMNS = tuple(c.name for c in RUN_COLUMNS if c.dtype == FLOAT)
#: Columns of what runs measured or why they ended (every source but :data:`RUN_SOURCES`),
#: in order.
MEASURED_COLUMNS = tuple(c.name for c in RUN_COLUMNS if c.source not in RUN_SOURCES)
#: The figures' names, as :data:`vitfsdp.analysis.figures.FIGURES` orders them.
FIGURE_NAMES = ("weak_scaling", "efficiency", "memory", "loss", "prefetch", "tflops", "recipe")
#: Figure name -> the measured columns it draws (``Column.figures``), in ``runs.csv`` order:
#: a figure's inputs are every run column (which runs, their settings: what its lines,
#: labels and titles are made of) and these (the weak-scaling figure's published stars
#: compare the points' memory too: :func:`vitfsdp.analysis.reference.reference_table`).
#: ``loss`` draws the loss curves, no column of these.
FIGURE_COLUMNS = {name: tuple(c.name for c in RUN_COLUMNS if name in c.figures)
                  for name in FIGURE_NAMES}
#: Prediction columns (:func:`vitfsdp.plan.predict_run`'s keys), in order.
PRED_COLUMNS = tuple(c.name for c in RUN_COLUMNS if c.source == "predicted")
#: ``(header, format)`` of each run column the report shows, by name.
DISPLAY = {c.name: c.display for c in RUN_COLUMNS if c.display is not None}
