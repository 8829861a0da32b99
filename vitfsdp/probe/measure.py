"""The probe's measurements on one rank, with every rank of the world doing the same at the
same moment (a barrier before each item), as a training step does: a rank's GEMMs compete
with its neighbours' for the node's power, cores and memory bandwidth, and its collectives
share the links with every other group's.

Each figure is the mean over ranks of a rank's time per call over repetitions run back to
back; the number of repetitions is agreed by all ranks from the slowest first run, so every
rank calls the same collectives. Sources: nccl-tests (NVIDIA/nccl-tests,
doc/PERFORMANCE.md: algorithm and bus bandwidth, ``busbw = S/t · (n-1)/n`` for all-gather
and reduce-scatter, ``2(n-1)/n`` for all-reduce), STREAM (McCalpin 1995: copy and triad
kernels, bytes counted as read + written).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

#: torch dtype of each precision name.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: Seconds one measured item aims to take (all repetitions), and the bounds on repetitions.
TARGET_S = 0.2
MIN_REPS, MAX_REPS = 2, 20000
#: Each item is timed this many times (its repetitions split between them: the probe takes
#: no longer), and its figure is the median of the three; their spread, (max - min) /
#: median, is kept in :data:`SPREADS` for the world's record (:func:`spread_summary`).
REPEATS = 3
#: The relative spread of each item timed by this process since :func:`spread_summary` was
#: last called.
SPREADS: list[float] = []


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mean_over_ranks(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
        t /= dist.get_world_size()
    return float(t.item())


def _max_over_ranks(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _once(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds of one call of ``fn``, started by every rank together (a barrier)."""
    if dist.is_initialized():
        dist.barrier()
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def timed(fn: Callable[[], object], device: torch.device, comm_device: torch.device | None = None,
          target_s: float = TARGET_S) -> float:
    """Seconds of one call of ``fn`` on this rank, every rank calling it together: one warm-up
    call, then :data:`REPEATS` times as many calls back to back as the slowest rank's warm-up
    says fill a :data:`REPEATS`-th of ``target_s``, timed together (as nccl-tests times its
    iterations: a rate over many calls, which on ranks that share cores spans the
    scheduler's time slices), divided by their number and averaged over ranks; the median
    of the :data:`REPEATS`, their relative spread appended to :data:`SPREADS`.

    Args:
        device: where ``fn`` runs (synchronized before and after the loop on a GPU).
        comm_device: where the agreement's small tensors live (the backend's device).
    """
    comm_device = comm_device or device
    first = _max_over_ranks(_once(fn, device), comm_device)
    reps = int(min(MAX_REPS, max(MIN_REPS, target_s / REPEATS / max(first, 1e-9))))

    def loop() -> None:
        for _ in range(reps):
            fn()

    times = sorted(_mean_over_ranks(_once(loop, device) / reps, comm_device)
                   for _ in range(REPEATS))
    median = times[len(times) // 2]
    SPREADS.append((times[-1] - times[0]) / median if median > 0 else 0.0)
    return median


def spread_summary(bound: float) -> dict:
    """The spread of the items timed since the last call (:data:`SPREADS`, emptied):
    ``{"repeats", "items", "median", "max", "bound", "noisy"}``, ``noisy`` where the median
    item's spread exceeds ``bound`` (the machine moved under the probe: its figures, and the
    plan's predictions from them, hold to about that much)."""
    spreads = sorted(SPREADS)
    SPREADS.clear()
    median = spreads[len(spreads) // 2] if spreads else None
    return {"repeats": REPEATS, "items": len(spreads), "median": median,
            "max": spreads[-1] if spreads else None, "bound": bound,
            "noisy": median is not None and median > bound}


def gemm_time(m: int, n: int, k: int, dtype: str, device: torch.device,
              comm_device: torch.device) -> float:
    """Seconds of ``F.linear`` of an (M×K) input and an (N×K) weight: the (M×K)·(K×N)
    matmul a linear layer runs."""
    x = torch.randn(m, k, dtype=DTYPES[dtype], device=device)
    w = torch.randn(n, k, dtype=DTYPES[dtype], device=device)
    return timed(lambda: F.linear(x, w), device, comm_device)


def _swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def op_times(op: str, shape: tuple[int, ...], dtype: str, device: torch.device,
             comm_device: torch.device) -> tuple[float, float]:
    """(forward, backward) seconds of one non-matmul op of a ViT block at ``shape``, with
    autograd as training runs it: ``layer_norm``, ``add``, ``gelu``, ``swiglu`` on (rows,
    dim); ``sdpa`` (``F.scaled_dot_product_attention``) and ``attention`` (softmax(q·kᵀ)·v
    written out) on (batch, heads, tokens, head dim).

    Raises:
        ValueError: an unknown op.
    """
    dt = DTYPES[dtype]

    def leaf(*s: int) -> torch.Tensor:
        return torch.randn(*s, dtype=dt, device=device, requires_grad=True)

    if op == "layer_norm":
        x, w, b = leaf(*shape), leaf(shape[-1]), leaf(shape[-1])
        inputs, fn = (x, w, b), lambda: F.layer_norm(x, (shape[-1],), w, b)
    elif op == "add":
        x, y = leaf(*shape), leaf(*shape)
        inputs, fn = (x, y), lambda: x + y
    elif op == "gelu":
        x = leaf(*shape)
        inputs, fn = (x,), lambda: F.gelu(x)
    elif op == "swiglu":
        a, b = leaf(*shape), leaf(*shape)
        inputs, fn = (a, b), lambda: _swiglu(a, b)
    elif op in ("sdpa", "attention"):
        q, k, v = leaf(*shape), leaf(*shape), leaf(*shape)
        inputs = (q, k, v)
        if op == "sdpa":
            fn = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
        else:
            scale = shape[-1] ** -0.5
            fn = lambda: (q @ k.transpose(-2, -1) * scale).softmax(-1) @ v  # noqa: E731
    else:
        raise ValueError(f"probe op {op!r} is unknown")
    forward = timed(fn, device, comm_device)
    out = fn()
    grad = torch.randn_like(out)

    def backward() -> None:
        torch.autograd.grad(out, inputs, grad, retain_graph=True)

    return forward, timed(backward, device, comm_device)


def optimizer_time(num_params: int, impl: str, device: torch.device,
                   comm_device: torch.device) -> float:
    """Seconds of one ``torch.optim.AdamW`` step over ``num_params`` fp32 parameters (in
    tensors of at most 4M elements, as a block's weights are), with ``impl``: for_loop,
    foreach or fused (``auto``: torch's default for the device)."""
    sizes, left = [], num_params
    while left > 0:
        sizes.append(min(left, 4 * 1024 * 1024))
        left -= sizes[-1]
    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in sizes]
    for p in params:
        p.grad = torch.randn_like(p)
    kwargs = {} if impl == "auto" else {"foreach": impl == "foreach", "fused": impl == "fused"}
    if impl == "for_loop":
        kwargs = {"foreach": False}
    opt = torch.optim.AdamW(params, lr=1e-4, **kwargs)
    opt.step()  # the moments exist from here on, as after a training step
    return timed(opt.step, device, comm_device)


def stream_gbps(num_elements: int, device: torch.device,
                comm_device: torch.device) -> dict[str, float]:
    """STREAM copy (``b = a``: 8 bytes an element) and triad (``a = b + s·c``: 12 bytes) on
    fp32 arrays, GB/s per rank."""
    a = torch.randn(num_elements, device=device)
    b, c = torch.empty_like(a), torch.randn_like(a)
    copy = timed(lambda: b.copy_(a), device, comm_device)
    triad = timed(lambda: torch.add(b, c, alpha=3.0, out=a), device, comm_device)
    return {"copy_gbps": 8 * num_elements / copy / 1e9,
            "triad_gbps": 12 * num_elements / triad / 1e9}


def layout_groups(world: int, ranks_per_node: int, ranks: int,
                  nodes: int) -> list[list[int]] | None:
    """The world split into groups of ``ranks`` ranks that span ``nodes`` nodes each, with
    ``ranks / nodes`` ranks from each node (as a shard group or a replica group sits), all
    groups at once; None where that shape does not divide the world."""
    num_nodes = world // ranks_per_node
    if ranks < 2 or ranks % nodes or num_nodes % nodes or world % ranks:
        return None
    per_node = ranks // nodes
    if per_node > ranks_per_node or ranks_per_node % per_node:
        return None
    groups = []
    for first_node in range(0, num_nodes, nodes):
        for slot in range(ranks_per_node // per_node):
            groups.append([(first_node + j) * ranks_per_node + slot * per_node + i
                           for j in range(nodes) for i in range(per_node)])
    return groups


def _gather_buffers(size_bytes: int, dtype: str, group_size: int,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(the whole buffer of about ``size_bytes``, a multiple of ``group_size`` elements; one
    rank's part of it): an all-gather's output and input, a reduce-scatter's input and
    output."""
    el = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    numel = max(group_size, size_bytes // el // group_size * group_size)
    full = torch.zeros(numel, dtype=DTYPES[dtype], device=device)
    return full, torch.zeros(numel // group_size, dtype=DTYPES[dtype], device=device)


def collective_time(op: str, size_bytes: int, dtype: str, group, group_size: int,
                    device: torch.device) -> float:
    """Seconds of one ``op`` (all_gather, reduce_scatter, all_reduce) of a ``size_bytes``
    buffer (nccl-tests' S: the gathered output, the reduced input) over ``group``, the calls
    FSDP makes (``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce``).

    Raises:
        ValueError: an unknown op.
    """
    full, part = _gather_buffers(size_bytes, dtype, group_size, device)
    if op == "all_gather":
        fn = lambda: dist.all_gather_into_tensor(full, part, group=group)  # noqa: E731
    elif op == "reduce_scatter":
        fn = lambda: dist.reduce_scatter_tensor(part, full, group=group)  # noqa: E731
    elif op == "all_reduce":
        fn = lambda: dist.all_reduce(full, group=group)  # noqa: E731
    else:
        raise ValueError(f"probe collective {op!r} is unknown")
    return timed(fn, device)


def bus_gbps(op: str, size_bytes: float, time_s: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth, GB/s: ``S/t`` times ``(n-1)/n`` (all-gather,
    reduce-scatter) or ``2(n-1)/n`` (all-reduce)."""
    factor = (2 if op == "all_reduce" else 1) * (ranks - 1) / ranks
    return size_bytes / time_s * factor / 1e9


def overlap_fraction(m: int, n: int, k: int, dtype: str, size_bytes: int, group,
                     group_size: int, device: torch.device) -> dict[str, float]:
    """How much a collective hides behind compute on this rank: GEMMs alone (``compute_s``),
    asynchronous all-gathers of ``size_bytes`` over ``group`` alone (``comm_s``), then both
    (the collectives issued first, the GEMMs run while they progress); ``fraction`` =
    ``(compute + comm - together) / min(compute, comm)``, 1 = full overlap, 0 = none."""
    x = torch.randn(m, k, dtype=DTYPES[dtype], device=device)
    w = torch.randn(n, k, dtype=DTYPES[dtype], device=device)
    full, part = _gather_buffers(size_bytes, dtype, group_size, device)
    one_gemm = timed(lambda: F.linear(x, w), device)
    one_comm = timed(lambda: dist.all_gather_into_tensor(full, part, group=group), device)
    gemms = max(1, int(_max_over_ranks(TARGET_S / max(one_gemm, 1e-9), device)))
    comms = max(1, int(_max_over_ranks(TARGET_S / max(one_comm, 1e-9), device)))

    def compute() -> None:
        for _ in range(gemms):
            F.linear(x, w)

    def comm() -> None:
        for _ in range(comms):
            dist.all_gather_into_tensor(full, part, group=group)

    def both() -> None:
        works = [dist.all_gather_into_tensor(full, part, group=group, async_op=True)
                 for _ in range(comms)]
        compute()
        for work in works:
            work.wait()

    c, t, b = (timed(f, device, target_s=0.0) for f in (compute, comm, both))
    fraction = (c + t - b) / min(c, t) if min(c, t) > 0 else 1.0
    return {"compute_s": c, "comm_s": t, "together_s": b,
            "fraction": max(0.0, min(1.0, fraction))}
