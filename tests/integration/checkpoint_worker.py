"""Run by torchrun from test_checkpoint.py (beside it): in one process group, train a reference
run to the end, then a run stopped by a real SIGUSR2 (the test hook sends it to rank 1 at
step 3), then the same run again in its directory, which resumes from the checkpoint.

    torchrun --nproc_per_node 2 tests/integration/checkpoint_worker.py OUT_DIR override ...

Any number of ranks and strategy: the test runs it on 2 ranks (FULL_SHARD) and on 4
(``strategy=HYBRID_2GPU nodes=2 cluster.gpus_per_node=2``: 2 shard groups of 2 ranks).

Writes OUT_DIR/reference and OUT_DIR/interrupted (run directories) and OUT_DIR/exits.json
(what each phase raised on this rank).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from vitfsdp import startup_gc

with startup_gc.paused():  # a rank's imports without the collector, as vitfsdp.train's
    import torch
    from hydra import compose, initialize_config_dir

    from vitfsdp import distributed, failures
    from vitfsdp.config import CONF_DIR, register_configs, to_run_config
    from vitfsdp.torch_train import run


def main(out_dir: str, *overrides: str) -> None:
    register_configs()
    env = distributed.discover()
    out = Path(out_dir)
    exits = {}
    with distributed.process_group(env, torch.device("cpu"), timeout_s=120):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = to_run_config(compose("config", overrides=list(overrides)))
        run(cfg, env, torch.device("cpu"), out / "reference")
        os.environ[failures.FAULT_ENV] = "usr2:1:3"
        try:
            run(cfg, env, torch.device("cpu"), out / "interrupted")
            exits["first"] = "completed"
        except failures.Preempted as e:
            exits["first"] = {"signal": e.signal_name, "step": e.step, "code": e.exit_code}
        del os.environ[failures.FAULT_ENV]
        exits["checkpoint_files"] = sorted(p.name for p in (out / "interrupted" / "checkpoint")
                                           .iterdir())
        run(cfg, env, torch.device("cpu"), out / "interrupted")
        exits["second"] = "completed"
    if env.rank == 0:
        (out / "exits.json").write_text(json.dumps(exits))


if __name__ == "__main__":
    main(*sys.argv[1:])
