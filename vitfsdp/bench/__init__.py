"""Benchmarks of the training step on one device (``python -m vitfsdp.bench``).

- :mod:`vitfsdp.bench.throughput` (the default command): for each model, our training step
  through the sweep's own FSDP wrapping on a world of 1, the unwrapped model's step, and
  timm's training benchmark loop, in one process on one device; a table of images/s,
  TFLOP/s, MFU and the ratios, written as records (docs/benchmarks.md).
- ``python -m vitfsdp.bench overhead ...``: :mod:`vitfsdp.bench.overhead`.
- ``python -m vitfsdp.bench wrappers ...``: :mod:`vitfsdp.bench.wrappers`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vitfsdp import provenance
from vitfsdp.records import write_json_atomic


def run(argv: list[str] | None, parse_args: Callable[[list[str] | None], argparse.Namespace],
        benchmark: Callable[[argparse.Namespace], dict[str, Any]],
        format_record: Callable[[dict[str, Any]], str]) -> int:
    """A benchmark subcommand's ``main``: parse ``argv`` (``args.out``: where the record goes),
    log as rank 0, run ``benchmark(args)`` and :func:`report` its record; 0."""
    args = parse_args(argv)
    provenance.setup_logging(0)
    return report(benchmark(args), format_record, args.out)


def report(record: dict[str, Any], format_record: Callable[[dict[str, Any]], str],
           out: Path | None) -> int:
    """Print ``format_record(record)``, write ``record`` as JSON to ``out`` (its folder made)
    where given and say where; the exit status, 0."""
    print(format_record(record))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, record)
        print(f"record: {out}")
    return 0
