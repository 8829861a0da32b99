"""The device-dependent choices of one rank's run, resolved once at run start.

``precision=auto``, ``kernels.compile=null``, ``kernels.adamw=auto`` and the peak FLOP/s MFU
is computed against all depend on the device a rank got. Each trainer resolves them once,
into one :class:`Resolved` (the torch trainer's ``vitfsdp.torch_train.resolve``, the JAX
trainer's ``vitfsdp.jax.train.resolve``, both through the config's own rule,
``RunConfig.resolved_precision``), and everything after reads that object: the build, the
optimizer, run.json's ``applied`` and ``device.peak_*``, the window meter, the benchmark.

Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Resolved:
    """What one rank's run resolved to on its device.

    Attributes:
        framework: ``torch`` | ``jax``.
        device_type: the device type run.json records (``cpu`` | ``cuda``; CUDA and ROCm
            GPUs alike, and any JAX accelerator).
        precision: the ``precision`` name, ``auto`` resolved (bf16 on a GPU, fp32 on CPU).
        compute_dtype: the dtype the matmuls run in (fp32 | bf16 | fp16): the peak follows it.
        precision_record: run.json's ``applied.precision`` (the dtypes the run uses).
        settings: the framework's precision object (torch:
            :class:`vitfsdp.parallel.PrecisionSettings`; JAX: ``None``).
        compile: blocks compiled with ``torch.compile`` (``kernels.compile``, null resolved
            for the device); the JAX step is always compiled by XLA: ``True``.
        adamw: the AdamW implementation asked of the optimizer (torch: ``auto`` left to
            torch's pick, for_loop, foreach or fused; JAX: ``optax.adamw``).
        fused_attn: the fused attention kernel (``kernels.fused_attn``).
        allow_tf32: fp32 matmuls may run in TF32 (which peak an fp32 run is judged against).
        peak_flops: one device's peak FLOP/s for MFU and HFU; ``None`` where unknown.
        peak_source: ``table:<key> <kind>`` | ``measured`` | ``None``.
        peak_kind: ``bf16`` | ``tf32`` | ``fp32``; ``None`` before the peak is resolved.
    """

    framework: str
    device_type: str
    precision: str
    compute_dtype: str
    precision_record: Mapping[str, Any] = field(default_factory=dict)
    settings: Any = None
    compile: bool = False
    adamw: str = "auto"
    fused_attn: bool = True
    allow_tf32: bool = False
    peak_flops: float | None = None
    peak_source: str | None = None
    peak_kind: str | None = None

    def with_peak(self, peak: Mapping[str, Any]) -> Resolved:
        """A copy with the peak of ``peak`` (``peak_flops``, ``peak_source``,
        ``peak_kind``, as ``vitfsdp.metrics.resolve_peak`` returns them).

        Raises:
            KeyError: a key is missing from ``peak``.
        """
        return dataclasses.replace(self, peak_flops=peak["peak_flops"],
                                   peak_source=peak["peak_source"], peak_kind=peak["peak_kind"])

    def peak_record(self) -> dict[str, Any]:
        """run.json's ``device.peak_flops``, ``peak_source`` and ``peak_kind``."""
        return {"peak_flops": self.peak_flops, "peak_source": self.peak_source,
                "peak_kind": self.peak_kind}

    def applied_precision(self) -> dict[str, Any]:
        """run.json's ``applied.precision`` (a copy of :attr:`precision_record`)."""
        return dict(self.precision_record)
