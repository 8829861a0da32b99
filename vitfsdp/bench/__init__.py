"""Benchmarks of the training step on one device (``python -m vitfsdp.bench``).

- :mod:`vitfsdp.bench.throughput` (the default command): for each model, our training step
  through the sweep's own FSDP wrapping on a world of 1, the unwrapped model's step, and
  timm's training benchmark loop, in one process on one device; a table of images/s,
  TFLOP/s, MFU and the ratios, written as records (docs/benchmarks.md).
- ``python -m vitfsdp.bench overhead ...``: :mod:`vitfsdp.bench.overhead`.
"""
