"""A JAX GPU's memory fields in run.json (vitfsdp.jax.metrics.gpu_memory), from the figures
``memory_stats()`` gave on the H100 JAX run of 2026-11-27 (the ``stall/jax`` run: XLA's pool,
``bytes_limit``, 71.26 GiB at ``XLA_PYTHON_CLIENT_MEM_FRACTION=0.9``; peak in use 29.51 GiB;
the pool preallocated whole). A dict stands in for the device: the vendor library's
boundary, and no GPU here."""

from __future__ import annotations

import pytest

from tests.conftest import requires_jax

#: The recorded figures of that run (its run.json device.memory_gib and metrics.jsonl
#: peak_mem_allocated_gib / peak_mem_reserved_gib, in bytes); pool_bytes = the preallocated
#: pool. The keys are PJRT's (PJRT_Device_MemoryStats).
H100_STATS = {"bytes_limit": 76516687872, "pool_bytes": 76516687872,
              "peak_pool_bytes": 76516687872, "peak_bytes_in_use": 31681693696}


@requires_jax
def test_the_pool_is_recorded_and_the_total_is_null_not_derived_from_it():
    from vitfsdp.jax.metrics import gpu_memory

    record = gpu_memory(H100_STATS)
    assert record["memory_gib"] == pytest.approx(71.26171875)  # the pool, as before
    # JAX exposes no total: not the pool, nor the pool over the fraction (79.18 GiB here)
    assert record["total_memory_gib"] is None


@requires_jax
@pytest.mark.parametrize("stats", [None, {}, {"bytes_in_use": 1024}])
def test_a_device_without_statistics_records_no_memory(stats):
    from vitfsdp.jax.metrics import gpu_memory

    assert gpu_memory(stats) == {"memory_gib": None, "total_memory_gib": None}
