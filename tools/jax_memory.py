"""What the JAX train step keeps in memory, with and without activation checkpointing, on the
device JAX sees, compiled only (nothing trained; no parameters allocated).

    python tools/jax_memory.py [--model vit_base] [--batch 16] [--precision fp32|bf16]
                               [--fused-attn 0|1]

For each of ``nn.remat`` off and on, one line: the tensors JAX's autodiff keeps for the
backward (its saved residuals, summed; MiB), XLA's memory analysis of the compiled step
(``temp``: what the step allocates, and ``argument``: the train state and batch passed in;
MiB), and the plan's count of the activations (``vitfsdp.plan.memory.activation_bytes``,
what the PyTorch block keeps). docs/jax.md, "Memory: what JAX keeps", gives the figures of
2026-11-28 on CPU and the H100 record they explain. On a GPU the ``temp`` column is what
the GPU compiler plans, which the next GPU check should record beside a run's peak. Exit
status 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python tools/jax_memory.py", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--model", default="vit_base")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--fused-attn", type=int, choices=(0, 1), default=1)
    a = p.parse_args(argv)
    if a.batch < 1:
        p.error(f"--batch {a.batch}: give 1 or more")

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import Mesh

    from vitfsdp.jax import sharding
    from vitfsdp.jax.model import build_model
    from vitfsdp.jax.train import compiled_memory, make_train_step, state_layout
    from vitfsdp.models import VARIANTS, ModelConfig
    from vitfsdp.plan.memory import activation_bytes

    if a.model not in VARIANTS:
        p.error(f"--model {a.model} is unknown; valid: {', '.join(sorted(VARIANTS))}")
    try:  # the sizes of what autodiff keeps: jax's own function (print_saved_residuals' data)
        from jax._src.ad_checkpoint import saved_residuals
    except ImportError:
        saved_residuals = None
    mib = 2**20
    cfg = ModelConfig(name=a.model)
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), sharding.MESH_AXES)
    batch = sharding.batch_sharding(mesh)
    size = cfg.resolved_img_size()
    images = jax.ShapeDtypeStruct((a.batch, 3, size, size), jnp.float32, sharding=batch)
    labels = jax.ShapeDtypeStruct((a.batch,), jnp.int32, sharding=batch)
    print(f"{a.model}, batch {a.batch}, {a.precision}, {jax.devices()[0].device_kind} "
          f"(jax {jax.__version__})")
    print(f"{'remat':>5} {'saved MiB':>10} {'XLA temp':>9} {'argument':>9} {'plan acts':>10}")
    for remat in (False, True):
        model = build_model(cfg, 1000, precision=a.precision, fused_attn=bool(a.fused_attn),
                            remat=remat)
        tx = optax.adamw(1e-3)
        target, shardings = state_layout(model, tx, mesh, 0)
        saved = float("nan")
        if saved_residuals is not None:
            params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype),
                                  target["params"])
            kept = saved_residuals(lambda q, x, m=model: m.apply({"params": q}, x).sum(),
                                   params, jax.ShapeDtypeStruct(images.shape, images.dtype))
            saved = sum(v.size * v.dtype.itemsize for v, why in kept
                        if "argument" not in why) / mib
        step = make_train_step(model, tx, mesh, shardings, "xla")
        mem = compiled_memory(step.lower(target, images, labels).compile()) or {}
        acts = activation_bytes(cfg, 1000, a.batch, dtype=a.precision,
                                fused_attn=False, checkpointing=remat) / mib
        print(f"{'on' if remat else 'off':>5} {saved:10.1f} "
              f"{mem.get('temp', float('nan')) / mib:9.1f} "
              f"{mem.get('argument', float('nan')) / mib:9.1f} {acts:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
