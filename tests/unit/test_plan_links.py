"""Which link the plan rings a collective over: an MI250X's two GCDs share a 200 GB/s
Infinity Fabric, four times the 50 GB/s between packages (OLCF's Frontier user guide)."""

from types import SimpleNamespace

import pytest

from vitfsdp.plan.timing import Collective, collective_transfer_s

FRONTIER = SimpleNamespace(intra_node_gbps=50.0, inter_node_gbps=12.5, package_gpus=2,
                           intra_package_gbps=200.0, intra_node_latency_us=2.7,
                           inter_node_latency_us=4.5, collective_latency_us=27.9)
GIB = 2**30


@pytest.mark.parametrize("collective, gbps", [
    (Collective("all_gather", "forward", 1, GIB, 2, 1), 200.0),   # HYBRID_2GPU's shard group
    (Collective("all_gather", "forward", 1, GIB, 4, 1), 50.0),    # HYBRID_4GPU: two packages
    (Collective("all_reduce", "backward", 1, GIB, 2, 1, consecutive=False), 50.0),  # replicas
    (Collective("all_gather", "forward", 1, GIB, 2, 2), 12.5),    # across nodes
])  # fmt: skip
def test_a_group_inside_one_package_rings_over_its_faster_link(collective, gbps):
    f = (2 if collective.op == "all_reduce" else 1) * (collective.ranks - 1) / collective.ranks
    assert collective_transfer_s(collective, FRONTIER) == pytest.approx(GIB * f / (gbps * 1e9))


def test_a_profile_without_packages_rings_every_group_inside_a_node_alike():
    cuda8 = SimpleNamespace(**{**vars(FRONTIER), "package_gpus": None,
                               "intra_package_gbps": None, "intra_node_gbps": 450.0})
    pair = Collective("all_gather", "forward", 1, GIB, 2, 1)
    assert collective_transfer_s(pair, cuda8) == pytest.approx(GIB * 0.5 / 450e9)


def test_cuda8_rings_over_the_network_at_current_nccl_step_latency():
    """cluster=cuda8's inter-node step latency is NCCL's NET Ring/Simple ``hwLat`` of the
    version docs/plan.md names (NVIDIA/nccl src/graph/tuning.cc: 14.0 us since 2.18.1-1; the
    9.6 the profile quoted is 2.17's and older), and the docs' figure of what it changed is
    what the plan predicts."""
    from tests.conftest import REPO
    from vitfsdp.plan import predict
    from vitfsdp.plan.__main__ import compose_points

    (_, cfg), = compose_points(["cluster=cuda8", "model=vit_3b", "strategy=FULL_SHARD",
                                "nodes=16"])
    assert (cfg.cluster.collective_latency_us, cfg.cluster.intra_node_latency_us,
            cfg.cluster.inter_node_latency_us) == (8.4, 3.4, 14.0)
    doc = " ".join((REPO / "docs" / "plan.md").read_text().split())
    assert "cuda8: NCCL 2.30.7-1 (NVIDIA/nccl, 2026-06-04): base 8.4, NVLink 3.4, network 14.0" \
        in doc
    assert f"{predict(cfg).step_time_s:.3f} s now" in doc
    assert "NCCL 2.30.7-1" in (REPO / "conf" / "cluster" / "cuda8.yaml").read_text()
