"""A rank of tests/integration/test_netns.py: times gloo all_gathers across two emulated nodes.

Rank 0 writes ``{"bytes": per-rank message bytes, "times_s": [...]}`` to argv[1]: each
all_gather moves the message once each way over the link between the two nodes.
``argv``: out file, message bytes, repeats, and optionally the pause (s) before each.
"""

import json
import sys
import time

import torch
import torch.distributed as dist


def main(out: str, message_bytes: int, repeats: int, pause_s: float = 0.0) -> None:
    dist.init_process_group("gloo")
    x = torch.ones(message_bytes // 4)
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x)  # connections made, buffers touched
    times_s = []
    for _ in range(repeats):
        time.sleep(pause_s)  # spread over time: a busy moment of the host spoils few of them
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_gather(parts, x)
        times_s.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"bytes": message_bytes, "times_s": times_s}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
         float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
