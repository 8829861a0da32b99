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
    import timm  # noqa: F401  (models.build_model imports it: here, inside the pause)
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
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            for case in cases:
                name, overrides = case.split("|")
                cfg = to_run_config(compose("config", overrides=overrides.split()))
                run(cfg, env, device, Path(out_dir) / name)


if __name__ == "__main__":
    main(*sys.argv[1:])
