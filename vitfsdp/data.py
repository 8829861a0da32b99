"""Training data: synthetic tensors, scikit-learn's handwritten digits, or an image folder.

Each rank reads its own part: real data sets go through a ``DistributedSampler`` (rank ``r``
of ``W`` takes samples ``r, r+W, r+2W, ...`` of the, optionally shuffled, index list), so one
step's global batch is the same set of images whatever the world size.

``synthetic`` makes one random batch on the device and reuses it every step, as the published
scaling studies did to take I/O out of the measurement.

Real images travel as they are stored, uint8 (a quarter of float32's bytes), from pinned host
memory with non-blocking copies on a GPU, and are scaled to [0, 1] and normalized with the
ImageNet statistics on the device (:func:`normalize`), as NVIDIA DALI and timm's
``PrefetchLoader`` do; ``DataLoader`` worker processes decode the next batches meanwhile
(:func:`resolved_workers`).

torch, torchvision and scikit-learn load on first use, inside the functions that need them:
the config reads :class:`DataConfig` without them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where data is loaded: configs import this module
    import numpy as np
    import torch
    from torch.utils.data import Dataset

DATA_SETS = ("synthetic", "digits", "imagefolder")
#: File endings torchvision's ImageFolder reads (torchvision.datasets.folder.IMG_EXTENSIONS).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: ImageNet channel statistics (timm.data.IMAGENET_DEFAULT_MEAN/STD), of images in [0, 1].
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: ``data.num_workers=-1`` (auto) on a GPU: at most this many loader processes per rank.
MAX_AUTO_WORKERS = 8


@dataclass
class DataConfig:
    """Where images come from (``data=<name>``)."""

    name: str = "synthetic"  # synthetic | digits | imagefolder
    path: str | None = None  # imagefolder: root with one sub-folder of images per class
    num_classes: int = 1000  # synthetic only: label range; real data sets count their classes
    shuffle: bool = True  # reshuffle real data each epoch (seeded, same on every rank)
    # DataLoader worker processes per rank; 0 = load in the main process; -1 = auto: on a
    # GPU this rank's share of the CPUs of its process (all under srun's per-task binding,
    # the node's over its ranks under torchrun), less one, at most 8 (at least 1); on a
    # CPU 0, as the ranks' compute needs the cores (resolved_workers)
    num_workers: int = -1

    def __post_init__(self) -> None:
        if self.name not in DATA_SETS:
            raise ValueError(f"data.name={self.name!r} is unknown; valid: {', '.join(DATA_SETS)}")
        if self.name == "imagefolder":
            check_image_folder(self.path)
        if self.num_classes < 1:
            raise ValueError(f"data.num_classes={self.num_classes} must be >= 1")
        if self.num_workers < -1:
            raise ValueError(f"data.num_workers={self.num_workers} must be >= 0, or -1 (auto)")


def check_image_folder(path: str | None) -> None:
    """Refuse an ``imagefolder`` root that torchvision's ImageFolder could not read: missing,
    not a directory, no class sub-folder, or a class sub-folder without an image (ImageFolder
    raises for each, but only once the run has started on the cluster).

    Raises:
        ValueError: naming ``data.path`` and what the folder lacks.
    """
    if not path:
        raise ValueError("data=imagefolder needs data.path=<folder of class folders>")
    if not os.path.isdir(path):
        raise ValueError(f"data.path={path!r} is not a directory")
    classes = sorted(e.name for e in os.scandir(path) if e.is_dir())
    if not classes:
        raise ValueError(f"data.path={path!r} holds no class folders; data=imagefolder wants "
                         "one sub-folder of images per class (data.path/<class>/<image>.png)")
    for name in classes:
        if not _holds_image(os.path.join(path, name)):
            raise ValueError(f"data.path={path!r}: class folder {name!r} holds no image "
                             f"({', '.join(IMG_EXTENSIONS)}); add images or remove the folder")


def _holds_image(folder: str) -> bool:
    """Whether ``folder`` or a folder below it holds a file ImageFolder reads (stops at
    the first)."""
    return any(f.lower().endswith(IMG_EXTENSIONS)
               for _, _, files in os.walk(folder, followlinks=True) for f in files)


def resolved_workers(cfg: DataConfig, device_type: str) -> int:
    """``data.num_workers`` with ``-1`` (auto) resolved for a rank on ``device_type``: 0 on
    a CPU; on a GPU this rank's share of the CPUs this process may run on
    (``os.sched_getaffinity``), less one for the rank itself, between 1 and
    :data:`MAX_AUTO_WORKERS`. Other values as given.

    The share is the CPU set over the ranks that run on it (:func:`ranks_sharing_cpus`):
    under torchrun every rank of the node; under srun, one task a rank bound to its own
    CPUs, the rank alone (Frontier's ``srun -c7``: 6 workers, not 7 // 8 = 0 raised to 1).

    Raises:
        ValueError: ``LOCAL_WORLD_SIZE`` or ``SLURM_CPUS_PER_TASK`` is not an integer."""
    if cfg.num_workers >= 0:
        return cfg.num_workers
    if device_type == "cpu":
        return 0
    cpus = len(os.sched_getaffinity(0))
    return max(1, min(MAX_AUTO_WORKERS, cpus // ranks_sharing_cpus(cpus) - 1))


def ranks_sharing_cpus(cpus: int, environ: Mapping[str, str] | None = None) -> int:
    """How many ranks of this node run on the ``cpus`` CPUs of this process's affinity set
    (``os.sched_getaffinity``), from the launcher's variables in ``environ`` (default
    ``os.environ``); ``L`` is ``LOCAL_WORLD_SIZE``, the node's ranks (1 where unset):

    - torchrun's ranks (``TORCHELASTIC_RUN_ID``, set by its agent in every rank it starts,
      ``torch.distributed.elastic``'s ``LocalElasticAgent``): all ``L``, children of one
      process with its CPU set (``cluster.launch_mode=torchrun``: the node's Slurm task).
    - a task of an srun step with ``--cpus-per-task`` (``SLURM_CPUS_PER_TASK``; srun(1),
      https://slurm.schedmd.com/srun.html): ``cpus // SLURM_CPUS_PER_TASK``, the tasks'
      CPUs the set holds, between 1 and ``L``. srun(1) ``--cpu-bind``: with task/affinity,
      tasks are bound to their own CPUs (auto binding, where the step's CPUs are the tasks
      × cpus-per-task, or the site's CpuBind), one task's worth (``launch_mode=srun``: one
      rank, Frontier's ``-c7``); ``--cpu-bind=none`` (the default elsewhere) leaves each
      task the step's CPUs on the node, or the node's, the worth of all ``L``. A set of
      more than one task's CPUs but fewer than ``L`` tasks' (``--cpu-bind=ldom``, or both
      threads of cores Slurm counts one CPU) counts as that many ranks: conservative.
    - neither: all ``L``.

    Raises:
        ValueError: ``LOCAL_WORLD_SIZE`` or ``SLURM_CPUS_PER_TASK`` is not an integer.
    """
    env = os.environ if environ is None else environ
    counts = {}
    for name, unset in (("LOCAL_WORLD_SIZE", "1"), ("SLURM_CPUS_PER_TASK", "0")):
        value = env.get(name, unset)
        try:
            counts[name] = int(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not an integer; the launcher sets it to "
                             "a count of this node's ranks or of a task's CPUs") from None
    local = max(1, counts["LOCAL_WORLD_SIZE"])
    per_task = counts["SLURM_CPUS_PER_TASK"]
    if "TORCHELASTIC_RUN_ID" in env or per_task < 1:
        return local
    return max(1, min(local, cpus // per_task))


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 images (B, 3, H, W) in [0, 255] as float32, scaled to [0, 1] and normalized per
    channel with :data:`IMAGENET_MEAN` and :data:`IMAGENET_STD`, on their own device
    (torchvision's ``ToTensor`` + ``Normalize``, after the copy instead of before it)."""
    # torch, torchvision, scikit-learn on use (module docstring)
    import torch

    mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
    return images.float().div_(255.0).sub_(mean).div_(std)


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's handwritten digits as ``load_digits`` returns them: images (1797, 8, 8)
    float64 in 0-16 and labels (1797,) int64.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, 64 pixels
    and the label a row) without importing scikit-learn: its import took 4-7 s of every
    rank's start-up here, for a 0.1 s read. Where the file is not found (another layout),
    ``sklearn.datasets.load_digits``.

    Raises:
        ModuleNotFoundError: scikit-learn is not installed.
    """
    # numpy on use, as torch (module docstring: configs import this module)
    import importlib.util
    from pathlib import Path

    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise ModuleNotFoundError("data=digits needs scikit-learn (pip install scikit-learn)")
    for root in spec.submodule_search_locations or []:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            rows = np.loadtxt(path, delimiter=",")
            return rows[:, :-1].reshape(-1, 8, 8), rows[:, -1].astype(np.int64)
    # scikit-learn itself only where its file is not where this expects it
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images, digits.target.astype(np.int64)


class DigitsDataset:
    """scikit-learn's 1797 handwritten digits (8×8, 16 grey levels), upscaled to
    (3, img_size, img_size) uint8 in [0, 255] (normalized after the copy to the device,
    :func:`normalize`); labels 0–9. A map-style data set (``__len__``, ``__getitem__``) as
    ``DataLoader`` takes it.

    Source: the UCI "Optical Recognition of Handwritten Digits" test set that
    ``sklearn.datasets.load_digits`` ships.
    """

    num_classes = 10

    def __init__(self, img_size: int) -> None:
        # torch, torchvision, scikit-learn on use (module docstring)
        import torch

        images, labels = digits_arrays()
        self.images = torch.tensor(images, dtype=torch.float32) / 16.0  # (N, 8, 8)
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.img_size = img_size

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        # torch, torchvision, scikit-learn on use (module docstring)
        import torch
        import torch.nn.functional as F

        x = self.images[i][None, None]  # (1, 1, 8, 8)
        x = F.interpolate(x, size=(self.img_size, self.img_size), mode="bilinear")
        x = x[0].expand(3, -1, -1).mul(255.0).round_().to(torch.uint8)
        return x, self.labels[i]


def image_folder(path: str, img_size: int) -> Dataset:
    """A class-per-folder image tree (torchvision ImageFolder), resized and center-cropped to
    (3, img_size, img_size) uint8 (normalized after the copy to the device, :func:`normalize`)."""
    # torch, torchvision, scikit-learn on use (module docstring)
    from torchvision import datasets, transforms

    tf = transforms.Compose(
        [
            transforms.Resize(img_size),
            transforms.CenterCrop(img_size),
            transforms.PILToTensor(),
        ]
    )
    return datasets.ImageFolder(path, transform=tf)


def num_classes(cfg: DataConfig) -> int:
    """Class count of the data set, without loading its images."""
    if cfg.name == "synthetic":
        return cfg.num_classes
    if cfg.name == "digits":
        return DigitsDataset.num_classes
    return len([e for e in os.scandir(cfg.path) if e.is_dir()])


def batches(
    cfg: DataConfig,
    *,
    img_size: int,
    local_batch_size: int,
    rank: int,
    world_size: int,
    device: torch.device,
    seed: int = 0,
    normalized: bool = True,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless iterator of this rank's batches: images (B, 3, img_size, img_size) float32 and
    labels (B,) int64 on ``device``, B = ``local_batch_size``.

    Real images are read by :func:`resolved_workers` loader processes into pinned memory
    (on a GPU), copied as uint8 without blocking the host, and normalized on ``device``;
    with ``normalized=False`` they stay uint8 in [0, 255] (the JAX trainer normalizes them
    on its own devices). ``synthetic`` images are float32 either way.

    Raises:
        ValueError: the data set has fewer samples than one global batch.
    """
    # torch, torchvision, scikit-learn on use (module docstring)
    from torch.utils.data import DataLoader, DistributedSampler

    if cfg.name == "synthetic":
        yield from _synthetic(cfg, img_size, local_batch_size, rank, device, seed)
        return
    ds = DigitsDataset(img_size) if cfg.name == "digits" else image_folder(cfg.path, img_size)
    if len(ds) < local_batch_size * world_size:
        raise ValueError(
            f"data={cfg.name} has {len(ds)} images, fewer than one global batch "
            f"({local_batch_size} × {world_size}); lower train.local_batch_size"
        )
    workers = resolved_workers(cfg, device.type)
    sampler = DistributedSampler(
        ds, num_replicas=world_size, rank=rank, shuffle=cfg.shuffle, seed=seed, drop_last=True
    )
    loader = DataLoader(
        ds,
        batch_size=local_batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
    )
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            yield (normalize(x) if normalized else x), y
        epoch += 1


def _synthetic(cfg, img_size, local_batch_size, rank, device, seed):
    # torch, torchvision, scikit-learn on use (module docstring)
    import torch

    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + rank)
    x = torch.randn(local_batch_size, 3, img_size, img_size, generator=gen, device=device)
    y = torch.randint(0, cfg.num_classes, (local_batch_size,), generator=gen, device=device)
    while True:
        yield x, y
