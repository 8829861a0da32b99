"""A GPU cluster's run under device=auto must find a GPU: a torch or JAX without the site's
GPU build would otherwise train every point on CPU ranks, and the sweep would record them as
completed (both day-one reviews of 2026-11-29 met it: Frontier and a DGX)."""

import pytest
import torch
from hydra import compose, initialize_config_dir

from tests.conftest import REPO
from vitfsdp.config import register_configs, to_run_config
from vitfsdp.distributed import CPU_BUILD, pick_device, torch_build

register_configs()

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        return to_run_config(compose("config", overrides=list(overrides)))


def test_a_gpu_profile_expects_a_gpu_unless_the_device_is_named():
    assert _cfg("cluster=cuda8").gpu_expected() == (
        "cluster=cuda8 describes GPUs (cluster.device_memory_gib=79.18)")
    assert _cfg("cluster=frontier", "cluster.account=abc123").gpu_expected().startswith(
        "cluster=frontier describes GPUs (cluster.device_memory_gib=64)")
    assert _cfg("cluster=cuda8", "device=cpu").gpu_expected() is None  # asked for: allowed
    assert _cfg().gpu_expected() is None  # cluster=local: CPU ranks are the point
    assert _cfg("cluster=virtual").gpu_expected() is None  # asks Slurm for GPUs, runs on CPU


@needs_no_gpu
def test_auto_without_a_gpu_stops_where_the_profile_expects_one():
    with pytest.raises(ValueError) as err:
        pick_device("auto", 0, "cluster=cuda8 describes GPUs (cluster.device_memory_gib=80)")
    message = str(err.value)
    assert message.startswith(f"device=auto: torch {torch.__version__} ({torch_build()}) "
                              "sees no GPU on ")
    assert "but cluster=cuda8 describes GPUs" in message
    assert message.endswith("; or set device=cpu to train on CPU ranks")
    fix = ("install the torch build for this site's GPUs" if torch_build() == CPU_BUILD
           else "check that the node's driver shows its GPUs")
    assert fix in message
    assert pick_device("auto", 0).type == "cpu"  # no profile expecting a GPU: the CPU


def test_a_rocm_device_name_is_refused_saying_cuda_means_rocm_too():
    with pytest.raises(ValueError, match=r"device='rocm' is not supported; valid: auto, cpu, "
                                         r"cuda \(cuda also means ROCm"):
        _cfg("device=rocm")


@needs_no_gpu
def test_jax_under_auto_without_a_gpu_stops_where_the_profile_expects_one():
    pytest.importorskip("jax")
    from vitfsdp.jax.distributed import _check_gpu

    with pytest.raises(ValueError, match="device=auto: JAX .* sees no GPU on .*, but cluster=x"):
        _check_gpu("auto", "cluster=x describes GPUs (cluster.device_memory_gib=80)")
    _check_gpu("auto", None)
    _check_gpu("cpu", "cluster=x describes GPUs")
    with pytest.raises(ValueError, match="device=cuda: JAX .* sees no GPU on .*, but "
                                         "device=cuda asks for one"):
        _check_gpu("cuda", None)  # JAX's GPU backend may be cuda or rocm: not named ahead


def test_jax_ranks_count_the_gpus_slurm_lists_not_torchs():
    """A rank's GPU is LOCAL_RANK mod the GPUs the visibility variable lists: a torch that
    cannot use them (CPU build, CUDA newer than the driver) must not leave every rank of a
    node taking all of them."""
    pytest.importorskip("jax")
    from vitfsdp.jax.distributed import _local_gpu

    assert _local_gpu(5, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}) == [5]
    assert _local_gpu(5, {"CUDA_VISIBLE_DEVICES": "3"}) == [0]  # bound: its one GPU
    assert _local_gpu(3, {"ROCR_VISIBLE_DEVICES": "0,1"}) == [1]
    assert _local_gpu(3, {"CUDA_VISIBLE_DEVICES": ""}) is None  # none visible: the CPU


def test_without_visibility_variables_the_drivers_list_the_gpus(tmp_path):
    """No *_VISIBLE_DEVICES (the local launcher sets none): NVIDIA's device files, else AMD's
    KFD topology nodes whose gpu_id is not 0 (node 0 is the CPU)."""
    pytest.importorskip("jax")
    from vitfsdp.jax.distributed import _node_gpus

    assert _node_gpus(str(tmp_path)) == 0
    nodes = tmp_path / "sys/class/kfd/kfd/topology/nodes"
    for n, gpu_id in enumerate(["0", "51234", "62001"]):
        (nodes / str(n)).mkdir(parents=True)
        (nodes / str(n) / "gpu_id").write_text(gpu_id + "\n")
    assert _node_gpus(str(tmp_path)) == 2
    (tmp_path / "dev").mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm"):
        (tmp_path / "dev" / name).touch()
    assert _node_gpus(str(tmp_path)) == 3


def test_a_jax_run_records_xlas_gpu_stack_not_torchs():
    """run.json's cuda/cudnn/nccl of a JAX run were torch's build's; a JAX run records its
    backend's platform version instead, and nothing of a GPU on the CPU."""
    pytest.importorskip("jax")
    from types import SimpleNamespace

    from vitfsdp.jax.train import _jax_gpu_versions

    gpu = SimpleNamespace(platform="gpu", client=SimpleNamespace(platform_version="cuda 12090"))
    got = _jax_gpu_versions(gpu)
    assert got["xla_platform"] == "cuda 12090" and got["collectives"] == "nccl"
    assert got["cuda"] is got["cudnn"] is got["nccl"] is got["rocm"] is None
    rocm = SimpleNamespace(platform="gpu", client=SimpleNamespace(platform_version="rocm 70100"))
    assert _jax_gpu_versions(rocm)["collectives"] == "rccl"
    assert _jax_gpu_versions(SimpleNamespace(platform="cpu"))["xla_platform"] is None


@needs_no_gpu
def test_a_driver_older_than_torchs_cuda_is_named(monkeypatch):
    """PyPI's torch for CUDA 13.0 on a node whose driver runs CUDA 12.8 sees no GPU: the
    refusal names the driver and the wheel to take. NVML is the vendor library, absent here:
    its two answers are stood in for."""
    import types

    nvml = types.SimpleNamespace(nvmlInit=lambda: None, nvmlShutdown=lambda: None,
                                 nvmlSystemGetDriverVersion=lambda: b"570.124.06",
                                 nvmlSystemGetCudaDriverVersion=lambda: 12080)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", nvml)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ValueError) as err:
        pick_device("auto", 0, "cluster=cuda8 describes GPUs (cluster.device_memory_gib=79.18)")
    assert ("this node's NVIDIA driver 570.124.06 runs CUDA up to 12.8, older than the CUDA "
            "13.0 torch is built for: install torch's wheel for CUDA 12.8 or older") in str(
        err.value)
    nvml.nvmlSystemGetCudaDriverVersion = lambda: 13000  # new enough: the other causes
    with pytest.raises(ValueError, match="check that the node's driver shows its GPUs"):
        pick_device("auto", 0, "cluster=cuda8 describes GPUs (cluster.device_memory_gib=79.18)")
