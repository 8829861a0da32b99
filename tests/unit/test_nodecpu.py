"""The emulated node's CPU quota: how long it held a node back, on either cgroup hierarchy."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitfsdp.core.nodecpu import NODE_CGROUP_ENV, throttled_s
from vitfsdp.records import competed

V1_STAT = "nr_periods 120\nnr_throttled 40\nthrottled_time 2500000000\nnr_bursts 0\n"
V2_STAT = "usage_usec 900000\nnr_periods 120\nnr_throttled 40\nthrottled_usec 1750000\n"


def _node(tmp_path: Path, stat: str) -> dict[str, str]:
    node = tmp_path / "vitfsdp-1-n0"
    node.mkdir()
    (node / "cgroup.procs").write_text("")
    (node / "cpu.stat").write_text(stat)
    return {NODE_CGROUP_ENV: str(node / "cgroup.procs")}


@pytest.mark.parametrize(("stat", "seconds"), [(V1_STAT, 2.5), (V2_STAT, 1.75)])
def test_node_cgroup_throttled_time_on_either_hierarchy(tmp_path, stat, seconds):
    # cgroup v1 counts nanoseconds (throttled_time), v2 microseconds (throttled_usec)
    assert throttled_s(_node(tmp_path, stat), tmp_path / "none", tmp_path) == seconds


def test_own_cgroup_v2_without_a_node_cgroup(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "cpu.stat").write_text(V2_STAT)
    proc = tmp_path / "cgroup"
    proc.write_text("1:cpu:/\n0::/job\n")
    assert throttled_s({}, proc, tmp_path) == 1.75
    proc.write_text("4:cpu,cpuacct:/job\n")  # v1 only, and no node cgroup: no quota of ours
    assert throttled_s({}, proc, tmp_path) is None


def test_no_quota_is_none_not_zero(tmp_path):
    assert throttled_s({}, tmp_path / "absent", tmp_path) is None
    env = _node(tmp_path, "nr_periods 0\n")
    assert throttled_s(env, tmp_path / "absent", tmp_path) is None


def test_competed_is_the_difference_and_none_when_either_end_is_unknown(monkeypatch):
    ends = iter([{"load_1m": 3.0, "throttled_s": 7.5}, {"load_1m": 3.0, "throttled_s": None}])
    monkeypatch.setattr("vitfsdp.records.competition", lambda: next(ends))
    assert competed({"load_1m": 1.0, "throttled_s": 5.0})["cpu_throttled_s"] == 2.5
    assert competed({"load_1m": 1.0, "throttled_s": 5.0})["cpu_throttled_s"] is None
