"""Data: real digits and image folders, each rank reading its own part of the global batch."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch
from PIL import Image

from vitfsdp.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DataConfig,
    DigitsDataset,
    batches,
    digits_arrays,
    normalize,
    num_classes,
    ranks_sharing_cpus,
    resolved_workers,
)


def _take(cfg, n, **kw):
    it = batches(cfg, device=torch.device("cpu"), **kw)
    return list(itertools.islice(it, n))


def test_digits_are_real_images_upscaled():
    ds = DigitsDataset(img_size=32)
    x, y = ds[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.uint8  # normalized on the device
    assert len(ds) == 1797 and int(y) == 0
    assert x.float().std() > 50  # a drawn digit, not a constant image
    assert num_classes(DataConfig(name="digits")) == 10


def test_digits_read_from_the_file_are_scikit_learns(monkeypatch):
    """The file read without importing scikit-learn gives load_digits' arrays exactly; where
    the file is missing, load_digits itself is used."""
    from sklearn.datasets import load_digits

    images, labels = digits_arrays()
    ref = load_digits()
    assert np.array_equal(images, ref.images) and np.array_equal(labels, ref.target)
    monkeypatch.setattr("pathlib.Path.is_file", lambda self: False)
    images, labels = digits_arrays()
    assert np.array_equal(images, ref.images) and labels.dtype == np.int64


def test_ranks_split_the_global_batch_exactly():
    cfg = DataConfig(name="digits", shuffle=False)
    single = _take(cfg, 2, img_size=16, local_batch_size=8, rank=0, world_size=1)
    parts = [_take(cfg, 2, img_size=16, local_batch_size=2, rank=r, world_size=4) for r in range(4)]
    for step in range(2):
        labels = torch.cat([p[step][1] for p in parts])
        images = torch.cat([p[step][0] for p in parts])
        order = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # rank r holds samples r and r+4
        assert torch.equal(single[step][1], labels[order.argsort()])
        assert torch.allclose(single[step][0], images[order.argsort()])


def test_shuffled_ranks_are_disjoint():
    cfg = DataConfig(name="digits", shuffle=True)
    seen = [_take(cfg, 1, img_size=8, local_batch_size=4, rank=r, world_size=2)[0][0]
            for r in range(2)]
    assert not torch.equal(seen[0], seen[1])


def test_synthetic_is_made_once_on_the_device():
    cfg = DataConfig(name="synthetic", num_classes=7)
    (x0, y0), (x1, _) = _take(cfg, 2, img_size=16, local_batch_size=3, rank=1, world_size=2)
    assert x0.shape == (3, 3, 16, 16) and x0.data_ptr() == x1.data_ptr()
    assert int(y0.max()) < 7


def test_imagefolder_reads_real_images(tmp_path):
    digits = DigitsDataset(img_size=8)
    for i in range(12):
        label = int(digits.labels[i])
        folder = tmp_path / f"class_{label}"
        folder.mkdir(exist_ok=True)
        pixels = (digits.images[i].numpy() * 255).astype(np.uint8)
        Image.fromarray(pixels).convert("RGB").save(folder / f"{i}.png")
    cfg = DataConfig(name="imagefolder", path=str(tmp_path))
    assert num_classes(cfg) == 10
    (x, y), = _take(cfg, 1, img_size=24, local_batch_size=3, rank=0, world_size=2)
    assert x.shape == (3, 3, 24, 24) and y.max() < 10


def test_too_few_images_for_one_global_batch():
    with pytest.raises(ValueError, match="train.local_batch_size"):
        _take(DataConfig(name="digits"), 1, img_size=8, local_batch_size=1000, rank=0,
              world_size=2)


def test_normalize_on_the_device_is_torchvisions_to_tensor_and_normalize():
    from torchvision import transforms

    images = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
    expected = torch.stack([transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)(
        transforms.ToTensor()(img.permute(1, 2, 0).numpy())) for img in images])
    assert torch.allclose(normalize(images), expected, atol=1e-6)


def test_batches_are_float_normalized_or_uint8_as_asked():
    cfg = DataConfig(name="digits", shuffle=False)
    (x, _), = _take(cfg, 1, img_size=8, local_batch_size=4, rank=0, world_size=1)
    (raw, _), = _take(cfg, 1, img_size=8, local_batch_size=4, rank=0, world_size=1,
                      normalized=False)
    assert x.dtype == torch.float32 and raw.dtype == torch.uint8
    assert torch.equal(x, normalize(raw))


def test_loader_workers_give_the_same_batches(monkeypatch):
    cfg = DataConfig(name="digits", shuffle=True, num_workers=0)
    main = _take(cfg, 3, img_size=8, local_batch_size=4, rank=1, world_size=2)
    workers = _take(DataConfig(name="digits", shuffle=True, num_workers=2), 3, img_size=8,
                    local_batch_size=4, rank=1, world_size=2)
    for (a, la), (b, lb) in zip(main, workers, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


#: Variables that say how the ranks were launched; each case sets the ones it names.
LAUNCH_VARS = ("LOCAL_WORLD_SIZE", "SLURM_CPUS_PER_TASK", "TORCHELASTIC_RUN_ID")


@pytest.mark.parametrize(("given", "device", "cpus", "env", "expected"), [
    (-1, "cpu", 16, {"LOCAL_WORLD_SIZE": "1"}, 0),   # CPU ranks keep the cores for compute
    (-1, "cuda", 16, {"LOCAL_WORLD_SIZE": "1"}, 8),  # capped
    (-1, "cuda", 16, {"LOCAL_WORLD_SIZE": "4"}, 3),  # 4 CPUs a rank, one for the rank itself
    (-1, "cuda", 2, {"LOCAL_WORLD_SIZE": "8"}, 1),   # at least one
    (3, "cuda", 16, {"LOCAL_WORLD_SIZE": "1"}, 3),   # as given
    (-1, "cuda", 16, {}, 8),                         # no launcher: the process is the rank
    # srun -c7 (Frontier): each task bound to its own 7 CPUs, not the node's 56
    (-1, "cuda", 7, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}, 6),
    # srun -c7 bound to whole cores, both hardware threads in the set: 7 each, not 14 // 8
    (-1, "cuda", 14, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}, 6),
    # srun --cpu-bind=ldom: two tasks on a 16-CPU NUMA domain, 8 each
    (-1, "cuda", 16, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}, 7),
    # srun --cpu-bind=none: every task has the step's 56 CPUs of the node, 7 a rank
    (-1, "cuda", 56, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}, 6),
    # torchrun in a Slurm task of the node (-c56): its 8 ranks share the task's 56 CPUs
    (-1, "cuda", 56, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "56",
                      "TORCHELASTIC_RUN_ID": "42"}, 6),
    # torchrun without Slurm (the local launcher): the node's 16 CPUs over its 4 ranks
    (-1, "cuda", 16, {"LOCAL_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "none"}, 3),
])
def test_auto_workers(monkeypatch, given, device, cpus, env, expected):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)))
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert resolved_workers(DataConfig(num_workers=given), device) == expected


def test_srun_and_torchrun_ranks_get_the_same_workers(monkeypatch):
    """The reviewer's case: a node of 8 GPUs with 7 CPUs a rank, launched either way."""
    srun = {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}
    torchrun = {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "56",
                "TORCHELASTIC_RUN_ID": "42"}
    got = []
    for env, cpus in ((srun, 7), (torchrun, 56)):
        monkeypatch.setattr("os.sched_getaffinity", lambda pid, n=cpus: set(range(n)))
        for name in LAUNCH_VARS:
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        got.append(resolved_workers(DataConfig(), "cuda"))
    assert got == [6, 6]


@pytest.mark.parametrize(("cpus", "env", "expected"), [
    (7, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}, 1),
    (64, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}, 8),  # at most the node's
    (3, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "7"}, 1),   # at least the rank
    (56, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "56", "TORCHELASTIC_RUN_ID": "1"},
     8),
    (56, {"LOCAL_WORLD_SIZE": "8", "SLURM_CPUS_PER_TASK": "0"}, 8),  # no share to count by
    (56, {"LOCAL_WORLD_SIZE": "0"}, 1),
])
def test_ranks_sharing_cpus(cpus, env, expected):
    assert ranks_sharing_cpus(cpus, env) == expected


@pytest.mark.parametrize("env", [{"LOCAL_WORLD_SIZE": "eight"},
                                 {"SLURM_CPUS_PER_TASK": "7(x8)"}])
def test_ranks_sharing_cpus_refuses_a_malformed_count(env):
    (name, value), = env.items()
    with pytest.raises(ValueError, match=re.escape(f"{name}='{value}' is not an integer")):
        ranks_sharing_cpus(8, env)
