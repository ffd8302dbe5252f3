"""Registry of the training workloads a runner can execute.

A workload is a model builder plus a dataset builder; its name and the
parameters it reads (defaults, bounds) are declared without torch in
``pcs_ray.workloads.catalog``, which jobs are validated against. Image workloads (torchvision ResNet-18, VGG-11,
MobileNetV2 and a tiny CNN for tests) train on CIFAR-10 read by
torchvision's own loader (``download=False``) when the data set is present
under ``data_root``; otherwise on generated images of the same format
(32x32 RGB ``uint8`` -> the same transform, 10 classes), deterministic by
seed so that every rank and every resume sees the same samples. The text
workload is a small Transformer encoder classifying generated token
sequences.

Every dataset is indexable, so the training loop owns the sample order
(seeded permutations) and can resume it exactly; no DataLoader state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from pcs_ray.workloads.catalog import CATALOG, WorkloadError, dataset_roots

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
NUM_CLASSES = 10


# --------------------------------------------------------------------------- data


class CifarTransform:
    """torchvision's ``ToTensor()`` + ``Normalize(mean, std)``, the same ops, without importing torchvision.

    Importing torchvision costs seconds (it pulls in torch._dynamo), which every
    runner start would pay even for workloads that use no torchvision model.
    Takes a PIL image (torchvision's CIFAR10) or an HWC ``uint8`` array.
    """

    def __init__(self, mean=CIFAR10_MEAN, std=CIFAR10_STD):
        self.mean = torch.as_tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.as_tensor(std, dtype=torch.float32)[:, None, None]

    def __call__(self, image) -> torch.Tensor:
        array = np.array(image, dtype=np.uint8, copy=True)
        tensor = torch.from_numpy(array).permute(2, 0, 1).contiguous().to(torch.float32).div(255)
        return tensor.sub_(self.mean).div_(self.std)


class GeneratedCIFAR10(Dataset):
    """CIFAR-10-shaped images made from the seed: a per-class template plus noise.

    Item ``i`` depends only on ``(seed, i)``, so any process rebuilds the same
    data set without storing it, and the classes are learnable.
    """

    source = "generated"

    def __init__(self, num_samples: int = 50_000, seed: int = 0, transform=None):
        self.num_samples = int(num_samples)
        self.seed = int(seed)
        self.transform = transform if transform is not None else CifarTransform()
        rng = np.random.default_rng([self.seed, 0xC1FA])
        self._templates = rng.integers(0, 256, size=(NUM_CLASSES, 32, 32, 3), dtype=np.uint8)

    def __len__(self) -> int:
        return self.num_samples

    def raw(self, index: int) -> tuple[np.ndarray, int]:
        """The ``uint8`` HWC image and label of item ``index`` (CIFAR-10's on-disk layout)."""
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        rng = np.random.default_rng([self.seed, 1, index])
        label = int(rng.integers(NUM_CLASSES))
        noise = rng.integers(-64, 65, size=(32, 32, 3))
        image = np.clip(self._templates[label].astype(np.int64) + noise, 0, 255).astype(np.uint8)
        return image, label

    def __getitem__(self, index: int):
        image, label = self.raw(index)
        return self.transform(image), label


def load_cifar10(data_root: str | Path | None, *, seed: int = 0, num_samples: int = 50_000, train: bool = True) -> Dataset:
    """CIFAR-10 through torchvision when ``data_root`` holds it, else generated data.

    "Holds it" means ``data_root/cifar-10-batches-py`` exists; torchvision then
    checks every file's MD5 and raises if the copy is damaged (we do not
    silently swap a damaged data set for noise).
    """
    if data_root is not None and (Path(data_root) / CIFAR10_FOLDER).is_dir():
        from torchvision.datasets import CIFAR10

        dataset = CIFAR10(str(data_root), train=train, download=False, transform=CifarTransform())
        dataset.source = "cifar10"
        return dataset
    return GeneratedCIFAR10(num_samples=num_samples, seed=seed)


class GeneratedText(Dataset):
    """Token sequences whose class decides which part of the vocabulary they favour."""

    source = "generated"

    def __init__(self, num_samples: int = 20_000, seq_len: int = 64, vocab_size: int = 1000, seed: int = 0):
        self.num_samples, self.seq_len, self.vocab_size, self.seed = int(num_samples), int(seq_len), int(vocab_size), int(seed)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int):
        if not 0 <= index < self.num_samples:
            raise IndexError(index)
        rng = np.random.default_rng([self.seed, 2, index])
        label = int(rng.integers(NUM_CLASSES))
        band = self.vocab_size // NUM_CLASSES
        favoured = rng.integers(label * band, (label + 1) * band, size=self.seq_len)
        anywhere = rng.integers(0, self.vocab_size, size=self.seq_len)
        tokens = np.where(rng.random(self.seq_len) < 0.5, favoured, anywhere)
        return torch.from_numpy(tokens.astype(np.int64)), label


# --------------------------------------------------------------------------- models


class TinyCNN(nn.Module):
    """A few-thousand-parameter CNN for tests; has BatchNorm (buffers) and Dropout (RNG)."""

    def __init__(self, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(16, num_classes))

    def forward(self, x):
        return self.head(self.features(x))


class TextTransformer(nn.Module):
    """A small Transformer encoder that classifies token sequences (mean-pooled)."""

    def __init__(self, vocab_size: int = 1000, seq_len: int = 64, d_model: int = 64, heads: int = 4, layers: int = 2, num_classes: int = NUM_CLASSES):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Parameter(torch.zeros(1, seq_len, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens) + self.position[:, : tokens.shape[1]])
        return self.head(h.mean(dim=1))


def _torchvision(name: str) -> Callable[[dict], nn.Module]:
    def build(params: dict) -> nn.Module:
        from torchvision import models

        return getattr(models, name)(weights=None, num_classes=NUM_CLASSES)

    return build


def _vgg11_cifar(params: dict) -> nn.Module:
    """torchvision VGG-11 with the usual CIFAR head (512 -> 10) instead of 7x7x512 -> 4096 -> 4096.

    The ImageNet head alone is 120M parameters (a 1 GB checkpoint with momentum) for 1x1 CIFAR feature maps.
    """
    from torchvision import models

    model = models.vgg11(weights=None, num_classes=NUM_CLASSES)
    model.avgpool = nn.AdaptiveAvgPool2d(1)
    model.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(512, NUM_CLASSES))
    return model


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Workload:
    """A registered training workload: how to build it; its parameters are declared in ``pcs_ray.workloads.catalog``."""

    name: str
    build_model: Callable[[dict], nn.Module]
    build_dataset: Callable[[dict], Dataset]
    imports: tuple[str, ...] = ()  # heavy modules a runner can import while it waits to start

    def resolve(self, params: dict | None) -> dict:
        """Defaults overlaid with ``params``, checked against the catalog's bounds; unknown keys are an error."""
        return CATALOG[self.name].resolve(params)


def _image_dataset(default_samples: int) -> Callable[[dict], Dataset]:
    def build(params: dict) -> Dataset:
        roots = dataset_roots()
        root = params["data_root"] if params["data_root"] is not None else (roots[0] if roots else None)
        return load_cifar10(root, seed=params["seed"], num_samples=params["num_samples"] or default_samples)

    return build


def _text_dataset(params: dict) -> Dataset:
    return GeneratedText(num_samples=params["num_samples"] or 20_000, seq_len=params["seq_len"], vocab_size=params["vocab_size"], seed=params["seed"])


def _text_model(params: dict) -> nn.Module:
    return TextTransformer(vocab_size=params["vocab_size"], seq_len=params["seq_len"])


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("resnet18", _torchvision("resnet18"), _image_dataset(50_000), ("torchvision",)),
        Workload("vgg11", _vgg11_cifar, _image_dataset(50_000), ("torchvision",)),
        Workload("mobilenet_v2", _torchvision("mobilenet_v2"), _image_dataset(50_000), ("torchvision",)),
        Workload("transformer", _text_model, _text_dataset),
        Workload("tiny_cnn", lambda params: TinyCNN(), _image_dataset(2_048)),
    )
}


def workload_names() -> list[str]:
    return sorted(WORKLOADS)


def get_workload(name: str) -> Workload:
    """The registered workload ``name``; a ValueError listing the valid names otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise WorkloadError(f"unknown workload {name!r}; choose one of: {', '.join(workload_names())}") from None
