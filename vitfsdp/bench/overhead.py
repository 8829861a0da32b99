"""What measuring costs: the same training steps unmeasured and under the window meter.

    python -m vitfsdp.bench overhead [--model vit_tiny] [--device auto] [--steps 40]
        [--log-every 5] [--batch 8] [--repeats 3] [--precision fp32] [--out FILE.json]

Both loops run :func:`vitfsdp.torch_train.train_step` on one device with the same model, AdamW
and one fixed synthetic batch, for ``--steps`` steps each:

- *unmeasured*: the steps back to back, the device synchronized once before and once after
  (the least any timing can do);
- *measured*: the steps in windows of ``--log-every`` steps, each window opened and closed
  by :class:`vitfsdp.metrics.WindowMeter` (peak-memory resets, CUDA events or the wall
  clock, the loss read back, NVML/AMD SMI and allocator counters, the figures) and appended
  to a ``metrics.jsonl`` with an fsync, as the training does. (In one process there is no
  collective; a multi-rank run adds one small all-gather per window.)

After one warm-up pass of each, the two loops alternate ``--repeats`` times; the medians
are compared: overhead % = (measured - unmeasured) / unmeasured × 100. A negative figure
means the difference is below the noise of the machine.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import torch

from vitfsdp import models, provenance
from vitfsdp.bench import run
from vitfsdp.distributed import pick_device
from vitfsdp.metrics import WindowMeter
from vitfsdp.records import append_jsonl
from vitfsdp.torch_train import train_step

log = logging.getLogger("vitfsdp.bench.overhead")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m vitfsdp.bench overhead",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="vit_tiny", choices=list(models.VARIANTS))
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--steps", type=int, default=40, help="steps per loop")
    p.add_argument("--log-every", type=int, default=5, help="steps per timing window")
    p.add_argument("--batch", type=int, default=8, help="images per step")
    p.add_argument("--repeats", type=int, default=3, help="timed passes of each loop")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: the forward under torch.autocast")
    p.add_argument("--out", type=Path, help="write the record as JSON to this file")
    args = p.parse_args(argv)
    for name in ("steps", "log_every", "batch", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    return args


class _Setup:
    """Model, optimizer, one batch and the autocast context of a benchmark."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        torch.manual_seed(0)
        cfg = models.ModelConfig(name=args.model)
        self.cfg, self.device = cfg, device
        self.model = models.build_model(cfg, num_classes=10).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        side = cfg.resolved_img_size()
        self.batch = (torch.randn(args.batch, 3, side, side, device=device),
                      torch.randint(0, 10, (args.batch,), device=device))
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                                       enabled=args.precision == "bf16")

    def step(self) -> torch.Tensor:
        return train_step(self.model, self.optimizer, self.batch, self.autocast)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def unmeasured_loop(s: _Setup, steps: int) -> tuple[float, int]:
    """``steps`` steps with one synchronization at each end; (seconds, steps run)."""
    s.sync()
    t0 = time.perf_counter()
    loss_sum = torch.zeros((), device=s.device)
    done = 0
    for _ in range(steps):
        loss_sum += s.step()
        done += 1
    loss_sum.item()
    s.sync()
    return time.perf_counter() - t0, done


def measured_loop(s: _Setup, steps: int, log_every: int, meter: WindowMeter,
                  metrics_file: Path) -> tuple[float, int, int]:
    """``steps`` steps in windows of ``log_every`` under ``meter``, each window appended to
    ``metrics_file``; (seconds, steps run, windows)."""
    s.sync()
    t0 = time.perf_counter()
    done = windows = 0
    while done < steps:
        n = min(log_every, steps - done)
        meter.start()
        loss_sum = torch.zeros((), device=s.device)
        for _ in range(n):
            loss_sum += s.step()
        append_jsonl(metrics_file, {"window": windows, **meter.stop(n, loss_sum)})
        done, windows = done + n, windows + 1
    s.sync()
    return time.perf_counter() - t0, done, windows


def benchmark(args: argparse.Namespace) -> dict:
    """Run both loops (a warm-up pass each, then ``args.repeats`` alternating timed passes)
    and return the record (times in seconds, overhead in %)."""
    device = pick_device(args.device, 0)
    s = _Setup(args, device)
    train_flops = models.train_flops_per_image(s.cfg, 10)
    meter = WindowMeter(device, 1, args.batch, train_flops)
    times: dict[str, list[float]] = {"unmeasured": [], "measured": []}
    steps: dict[str, list[int]] = {"unmeasured": [], "measured": []}
    num_windows = 0
    with tempfile.TemporaryDirectory(prefix="vitfsdp-overhead-") as tmp:
        metrics_file = Path(tmp) / "metrics.jsonl"
        for i in range(args.repeats + 1):  # pass 0 warms both loops up and is not kept
            t_u, n_u = unmeasured_loop(s, args.steps)
            t_m, n_m, num_windows = measured_loop(s, args.steps, args.log_every, meter,
                                                  metrics_file)
            if i:
                times["unmeasured"].append(t_u)
                times["measured"].append(t_m)
                steps["unmeasured"].append(n_u)
                steps["measured"].append(n_m)
    unmeasured, measured = (statistics.median(times[k]) for k in ("unmeasured", "measured"))
    return {
        "benchmark": "overhead",
        "model": args.model, "device": str(device), "precision": args.precision,
        "batch": args.batch, "steps": args.steps, "log_every": args.log_every,
        "repeats": args.repeats, "num_windows": num_windows, "timer": meter.clock.kind,
        "num_steps_unmeasured": steps["unmeasured"], "num_steps_measured": steps["measured"],
        "unmeasured_s": times["unmeasured"], "measured_s": times["measured"],
        "unmeasured_median_s": unmeasured, "measured_median_s": measured,
        "overhead_pct": (measured - unmeasured) / unmeasured * 100,
        "overhead_per_window_ms": (measured - unmeasured) / num_windows * 1e3,
        "versions": provenance.versions(),
    }


def format_record(r: dict) -> str:
    """The terminal report of a :func:`benchmark` record."""
    per_step = 1e3 / r["steps"]
    return "\n".join([
        f"metrics overhead: {r['model']} on {r['device']} ({r['precision']}), batch {r['batch']}"
        f", {r['steps']} steps per loop, log_every={r['log_every']} ({r['num_windows']} "
        f"windows), median of {r['repeats']}",
        f"  unmeasured loop  : {r['unmeasured_median_s']:.4f} s "
        f"({r['unmeasured_median_s'] * per_step:.2f} ms/step)",
        f"  with WindowMeter : {r['measured_median_s']:.4f} s "
        f"({r['measured_median_s'] * per_step:.2f} ms/step)",
        f"  overhead         : {r['overhead_pct']:+.2f} % "
        f"({r['overhead_per_window_ms']:+.3f} ms per window)",
    ])


def main(argv: list[str] | None = None) -> int:
    """``python -m vitfsdp.bench overhead``: print the comparison, write ``--out``; 0."""
    return run(argv, parse_args, benchmark, format_record)


if __name__ == "__main__":
    raise SystemExit(main())
