"""The throughput benchmark's command line (``python -m vitfsdp.bench``): its options and
their defaults by device, without the benchmark's own imports (torch, timm), so ``--help``
answers at once. :mod:`vitfsdp.bench.throughput` runs what these describe.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vitfsdp import parallel
from vitfsdp.core.throughput import NOISY_SPREAD

#: The benchmark's models: B/16 (the study's SwiGLU ViT-Base), L/16, H/14 and the study's ViT-1B.
GPU_MODELS = ("vit_base", "vit_large_patch16_224", "vit_huge_patch14_224", "vit_1b")
#: The paths a measurement can take: our FSDP step, the unwrapped model, timm's loop.
PATHS = ("fsdp", "unwrapped", "timm")
#: Defaults by device type: (models, batch, steps, warm-up steps, steps per window, repeats).
DEFAULTS = {"cuda": (GPU_MODELS, 32, 50, 10, 10, 3), "cpu": (("vit_tiny",), 8, 6, 2, 2, 3)}
#: Repeats of one path whose images/s spread more than this fraction of their median
#: ((max - min) / median) are warned of: the machine was too noisy for the ratios.
SPREAD_WARN = NOISY_SPREAD


@dataclass
class BenchOptions:
    """What to benchmark (the command line); ``None`` = the device's :data:`DEFAULTS`."""

    models: list[str] | None = None  # model names (vitfsdp.models.VARIANTS keys)
    batch: int | None = None  # local batch size, images per step
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (auto: bf16 on GPU, fp32 on CPU)
    steps: int | None = None  # steps per measurement, warm-up included
    warmup: int | None = None  # first steps left out of the figures
    log_every: int | None = None  # steps per timing window
    # measurements of each path, the paths taking turns (fsdp, unwrapped, timm, fsdp, ...) so
    # that a drift of the machine reaches all three alike; the table gives min, median, max
    repeats: int | None = None
    out: Path | None = None  # output folder; None = runs/bench/<date_time>
    device: str = "auto"  # auto | cuda | cpu
    # after the measurements, profile this many steps of the FSDP-wrapped model (after
    # --warmup steps) with torch.profiler into OUT/<model>/profile/; 0 = no profile
    profile_steps: int = 0
    overrides: list[str] = field(default_factory=list)  # Hydra overrides for every path
    # the paths measured, of fsdp, unwrapped, timm (None = all three): a recipe study times
    # its FSDP step beside the unwrapped model only, without timm's whole-model compile
    paths: list[str] | None = None

    def resolve(self, device_type: str) -> BenchOptions:
        """A copy with every ``None`` filled from :data:`DEFAULTS` of ``device_type``."""
        names, batch, steps, warmup, every, repeats = DEFAULTS[
            "cuda" if device_type == "cuda" else "cpu"]
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        return dataclasses.replace(
            self, models=list(dict.fromkeys(self.models or names)), batch=self.batch or batch,
            steps=self.steps or steps,
            warmup=self.warmup if self.warmup is not None else warmup,
            log_every=self.log_every or every, repeats=self.repeats or repeats,
            out=self.out or Path("runs/bench") / stamp)


def parse_args(argv: Sequence[str]) -> BenchOptions:
    """The command line as :class:`BenchOptions`; ``key=value`` arguments are Hydra
    overrides applied to every model's config (``kernels.compile=false``,
    ``engine=fsdp2``)."""
    p = argparse.ArgumentParser(
        prog="python -m vitfsdp.bench",
        description="Training throughput on one device: our FSDP step, the unwrapped model "
                    "and timm's loop.",
        epilog="other benchmarks: python -m vitfsdp.bench overhead [--help]: what measuring "
               "costs (the same steps unmeasured and under the window meter); python -m "
               "vitfsdp.bench wrappers [--help]: the host time DDP, FSDP1 and FSDP2 add to a "
               "step, apart from arithmetic. Exit status: "
               "0 all measured and no GPU target failed, 1 otherwise, 2 bad arguments.")
    p.add_argument("--models", type=lambda s: [m for m in s.split(",") if m],
                   help=f"comma-separated; default GPU: {','.join(GPU_MODELS)}, CPU: vit_tiny")
    p.add_argument("--batch", type=int, help="local batch size (default GPU 32, CPU 8)")
    p.add_argument("--precision", default="auto", choices=("auto", *parallel.PRECISIONS))
    p.add_argument("--steps", type=int, help="steps per measurement (default GPU 50, CPU 6)")
    p.add_argument("--warmup", type=int, help="warm-up steps (default GPU 10, CPU 2)")
    p.add_argument("--log-every", type=int, help="steps per window (default GPU 10, CPU 2)")
    p.add_argument("--repeats", type=int,  # "%%": argparse formats help with %
                   help="measurements of each path, taking turns; the table gives their min, "
                        f"median and max and warn above a {SPREAD_WARN:.0%}% spread (default 3)")
    p.add_argument("--out", type=Path, help="output folder (default runs/bench/<date_time>)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--profile-steps", type=int, default=0,
                   help="profile this many FSDP steps per model with torch.profiler (0: no)")
    p.add_argument("--paths", type=lambda s: [x for x in s.split(",") if x],
                   help=f"comma-separated, of {','.join(PATHS)} (default all three)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. kernels.compile=false")
    a = p.parse_args(list(argv))
    if a.repeats is not None and a.repeats < 1:
        p.error(f"--repeats {a.repeats}: give 1 or more measurements of each path")
    for flag, value in (("--batch", a.batch), ("--steps", a.steps),
                        ("--log-every", a.log_every)):
        if value is not None and value < 1:  # 0 read as "unset" ran the default
            p.error(f"{flag} {value}: give 1 or more (or leave it out for the default)")
    if a.warmup is not None and a.warmup < 0:
        p.error(f"--warmup {a.warmup}: give 0 or more warm-up steps")
    if a.profile_steps < 0:
        p.error(f"--profile-steps {a.profile_steps}: give 0 (no profile) or more")
    unknown = [x for x in a.paths or [] if x not in PATHS]
    if unknown or a.paths == []:
        p.error(f"--paths {','.join(a.paths)}: valid paths are {', '.join(PATHS)}")
    return BenchOptions(models=a.models, batch=a.batch, precision=a.precision, steps=a.steps,
                        warmup=a.warmup, log_every=a.log_every, repeats=a.repeats, out=a.out,
                        device=a.device, profile_steps=a.profile_steps,
                        overrides=list(a.overrides), paths=a.paths)
