"""Run by torchrun from test_jax_checkpoint.py (beside it): in one ``jax.distributed`` job, train
a JAX reference run to the end, then a run stopped by a real SIGUSR2 (the test hook sends it
to rank 1 only), then a run of another config in its directory (refused), then the first
config again there, which resumes from the checkpoint.

    torchrun --nproc_per_node 2 tests/integration/jax_checkpoint_worker.py OUT_DIR override ...

Writes OUT_DIR/reference and OUT_DIR/interrupted (run directories), OUT_DIR/exits.json (what
each phase raised, the checkpoint's files and meta.json, the first attempt's summary) and
OUT_DIR/params-<rank>.npz (this rank's shards of the final parameters of the reference and
the resumed run).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vitfsdp import startup_gc

with startup_gc.paused():  # a rank's imports without the collector, as vitfsdp.train's
    import jax
    import numpy as np
    from hydra import compose, initialize_config_dir

    from vitfsdp import distributed, failures, provenance
    from vitfsdp.config import CONF_DIR, register_configs, to_run_config
    from vitfsdp.jax import distributed as jdist
    from vitfsdp.jax import train as jtrain


def _config(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return to_run_config(compose("config", overrides=overrides))


def _local_shards(state) -> dict[str, np.ndarray]:
    """This process's shards of every parameter, keyed by the parameter's path and the
    shard's index in the global array (the same keys in every run of one layout)."""
    return {f"{jax.tree_util.keystr(path)}{shard.index}": np.asarray(shard.data)
            for path, leaf in jax.tree_util.tree_flatten_with_path(state["params"])[0]
            for shard in leaf.addressable_shards}


def main(out_dir: str, *overrides: str) -> None:
    register_configs()
    env = distributed.discover()
    provenance.setup_logging(env.rank)
    out = Path(out_dir)
    cfg = _config(list(overrides))
    other = _config([*overrides, "train.lr=1e-2"])
    finals = []
    train = jtrain.train
    jtrain.train = lambda *a, **k: finals.append(train(*a, **k)) or finals[-1]
    exits = {}
    jdist.initialize(env, cfg.device, timeout_s=120)
    try:
        jtrain.run(cfg, env, out / "reference")
        os.environ[failures.FAULT_ENV] = "usr2:1:3"
        try:
            jtrain.run(cfg, env, out / "interrupted")
            exits["first"] = "completed"
        except failures.Preempted as e:
            exits["first"] = {"signal": e.signal_name, "step": e.step, "code": e.exit_code}
        del os.environ[failures.FAULT_ENV]
        ckpt = out / "interrupted" / "checkpoint"
        exits["checkpoint_files"] = sorted(p.name for p in ckpt.iterdir())
        exits["meta"] = json.loads((ckpt / "meta.json").read_text())
        exits["first_summary"] = json.loads((out / "interrupted" / "summary.json").read_text())
        try:
            jtrain.run(other, env, out / "interrupted")
        except ValueError as e:
            exits["other_config"] = str(e)
        jtrain.run(cfg, env, out / "interrupted")
    finally:
        jdist.shutdown(env)
    np.savez(out / f"params-{env.rank}.npz",
             **{f"reference{k}": v for k, v in _local_shards(finals[0][1]).items()},
             **{f"resumed{k}": v for k, v in _local_shards(finals[-1][1]).items()})
    if env.rank == 0:
        (out / "exits.json").write_text(json.dumps(exits))


if __name__ == "__main__":
    main(*sys.argv[1:])
