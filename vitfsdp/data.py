"""Training data: synthetic tensors, scikit-learn's handwritten digits, or an image folder.

Each rank reads its own part: real data sets go through a ``DistributedSampler`` (rank ``r``
of ``W`` takes samples ``r, r+W, r+2W, ...`` of the, optionally shuffled, index list), so one
step's global batch is the same set of images whatever the world size.

``synthetic`` makes one random batch on the device and reuses it every step, as the published
scaling studies did to take I/O out of the measurement.

torch, torchvision and scikit-learn load on first use, inside the functions that need them:
the config reads :class:`DataConfig` without them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where data is loaded: configs import this module
    import torch
    from torch.utils.data import Dataset

DATA_SETS = ("synthetic", "digits", "imagefolder")
#: File endings torchvision's ImageFolder reads (torchvision.datasets.folder.IMG_EXTENSIONS).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: ImageNet channel statistics (timm.data.IMAGENET_DEFAULT_MEAN/STD).
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass
class DataConfig:
    """Where images come from (``data=<name>``)."""

    name: str = "synthetic"  # synthetic | digits | imagefolder
    path: str | None = None  # imagefolder: root with one sub-folder of images per class
    num_classes: int = 1000  # synthetic only: label range; real data sets count their classes
    shuffle: bool = True  # reshuffle real data each epoch (seeded, same on every rank)
    num_workers: int = 0  # DataLoader worker processes per rank; 0 = load in the main process

    def __post_init__(self) -> None:
        if self.name not in DATA_SETS:
            raise ValueError(f"data.name={self.name!r} is unknown; valid: {', '.join(DATA_SETS)}")
        if self.name == "imagefolder":
            check_image_folder(self.path)
        if self.num_classes < 1:
            raise ValueError(f"data.num_classes={self.num_classes} must be >= 1")
        if self.num_workers < 0:
            raise ValueError(f"data.num_workers={self.num_workers} must be >= 0")


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


class DigitsDataset:
    """scikit-learn's 1797 handwritten digits (8×8, 16 grey levels), upscaled to
    (3, img_size, img_size) float32, normalized with ImageNet statistics; labels 0–9.
    A map-style data set (``__len__``, ``__getitem__``) as ``DataLoader`` takes it.

    Source: the UCI "Optical Recognition of Handwritten Digits" test set that
    ``sklearn.datasets.load_digits`` ships.
    """

    num_classes = 10

    def __init__(self, img_size: int) -> None:
        # torch, torchvision, scikit-learn on use (module docstring)
        import torch
        from sklearn.datasets import load_digits

        digits = load_digits()
        self.images = torch.tensor(digits.images, dtype=torch.float32) / 16.0  # (N, 8, 8)
        self.labels = torch.tensor(digits.target, dtype=torch.long)
        self.img_size = img_size
        self.mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        # torch, torchvision, scikit-learn on use (module docstring)
        import torch.nn.functional as F

        x = self.images[i][None, None]  # (1, 1, 8, 8)
        x = F.interpolate(x, size=(self.img_size, self.img_size), mode="bilinear")
        x = x[0].expand(3, -1, -1)
        return (x - self.mean) / self.std, self.labels[i]


def image_folder(path: str, img_size: int) -> Dataset:
    """A class-per-folder image tree (torchvision ImageFolder), resized and center-cropped to
    (3, img_size, img_size), normalized with ImageNet statistics."""
    # torch, torchvision, scikit-learn on use (module docstring)
    from torchvision import datasets, transforms

    tf = transforms.Compose(
        [
            transforms.Resize(img_size),
            transforms.CenterCrop(img_size),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
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
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless iterator of this rank's batches: images (B, 3, img_size, img_size) float32 and
    labels (B,) int64 on ``device``, B = ``local_batch_size``.

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
    sampler = DistributedSampler(
        ds, num_replicas=world_size, rank=rank, shuffle=cfg.shuffle, seed=seed, drop_last=True
    )
    loader = DataLoader(
        ds,
        batch_size=local_batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=cfg.num_workers,
        pin_memory=device.type == "cuda",
    )
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        epoch += 1


def _synthetic(cfg, img_size, local_batch_size, rank, device, seed):
    # torch, torchvision, scikit-learn on use (module docstring)
    import torch

    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + rank)
    x = torch.randn(local_batch_size, 3, img_size, img_size, generator=gen, device=device)
    y = torch.randint(0, cfg.num_classes, (local_batch_size,), generator=gen, device=device)
    while True:
        yield x, y
