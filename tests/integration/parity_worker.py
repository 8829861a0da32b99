"""Run by torchrun from test_parity.py (beside it): train every configuration of a list in one
process group, each through vitfsdp.torch_train.run (real wrapping, real records), so a matrix of
dozens of configurations costs one process start-up.

    torchrun --nproc_per_node 4 tests/integration/parity_worker.py OUT_DIR \
        'name|override override ...' ...
"""

from __future__ import annotations

import sys
from pathlib import Path

from vitfsdp import startup_gc

with startup_gc.paused():  # a rank's imports without the collector, as vitfsdp.train's
    import torch
    from hydra import compose, initialize_config_dir

    from vitfsdp import distributed
    from vitfsdp.config import CONF_DIR, register_configs, to_run_config
    from vitfsdp.torch_train import run


def main(out_dir: str, *cases: str) -> None:
    register_configs()
    env = distributed.discover()
    device = torch.device("cpu")
    with distributed.process_group(env, device, timeout_s=300):
        # each rank composes every world-th case and all share them: a Hydra composition
        # costs a rank about 0.3 s of CPU, the configs are the same on every rank
        mine = {}
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            for i in range(env.rank, len(cases), env.world_size):
                overrides = cases[i].split("|")[1]
                mine[i] = to_run_config(compose("config", overrides=overrides.split()))
        shares = [None] * env.world_size
        torch.distributed.all_gather_object(shares, mine)
        cfgs = {i: cfg for share in shares for i, cfg in share.items()}
        for i, case in enumerate(cases):
            run(cfgs[i], env, device, Path(out_dir) / case.split("|")[0])


if __name__ == "__main__":
    main(*sys.argv[1:])
