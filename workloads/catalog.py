"""Every training workload's name and the ``params`` it reads, with bounds: no torch, so jobs validate cheaply.

Importing ``pcs_ray.workloads.models`` costs seconds and about 600 MB (torch); the
coordinator and ``pcs-ray submit`` check a job against this declaration
instead, and the runner resolves the same declaration before it trains, so a
job accepted at submission cannot fail at run time on a parameter.

Bounds are inclusive. They are sized so the largest accepted job still fits
one 16 GB GPU (a V100, as in the bundled DGX-1 topology): the largest
``batch_size`` keeps autograd's saved activations under about 5 GB per rank
(measured on CPU in fp32: ResNet-18 0.47 MB per sample, VGG-11 1.0,
MobileNetV2 1.7, the Transformer 1.1 at ``seq_len`` 64 and 9.2 at 256), and
``num_samples`` keeps the per-epoch sample permutation (8 bytes per sample)
under 80 MB. ``batch_size`` is the global batch, split across the job's GPUs.
``python -m pcs_ray.workloads.catalog`` prints the table the README shows.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


class WorkloadError(ValueError):
    """A workload name or parameter value that is not accepted.

    ``param`` names the parameter at fault (the message then starts with it),
    or is ``None`` when the fault is not one parameter's.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


DATASETS_ENV = "PCS_RAY_DATASETS"  # the operator's dataset roots, os.pathsep-separated


@dataclass(frozen=True)
class Param:
    """One parameter a workload reads: its default, its type and (for numbers) its inclusive range."""

    default: Any
    about: str
    kind: type = int  # int, float or str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False  # None stands for "the workload's default"

    def allowed(self) -> str:
        """The accepted values, as the error messages and the README table say them."""
        if self.choices:
            text = " or ".join(repr(c) for c in self.choices)
        elif self.kind is str:
            text = "a path"
        else:
            text = f"{_number(self.low)} to {_number(self.high)}"
        return text + (" (or null)" if self.nullable else "")

    def check(self, name: str, value: Any, workload: str) -> Any:
        """``value`` converted to this parameter's type, or a one-line :class:`WorkloadError` naming ``name``."""
        if value is None and self.nullable:
            return None
        if self.kind is str:
            if self.choices and value not in self.choices:
                raise WorkloadError(f"{name}: {value!r} is not one of {self.allowed()}", name)
            if not isinstance(value, str):
                raise WorkloadError(f"{name}: {value!r} is not text; allowed {self.allowed()}", name)
            if not self.choices:
                dataset_path(name, value)
            return value
        number = _as_number(value)
        if number is None or (self.kind is int and number != int(number)):
            what = "a whole number" if self.kind is int else "a number"
            raise WorkloadError(f"{name}: {value!r} is not {what}; allowed {self.allowed()}", name)
        number = self.kind(number)
        if not self.low <= number <= self.high:
            raise WorkloadError(f"{name}: {value!r} is outside the allowed range {self.allowed()} for {workload}", name)
        return number


def dataset_roots() -> list[Path]:
    """The folders the operator allows jobs to read data from: ``$PCS_RAY_DATASETS`` (``os.pathsep``-separated)."""
    raw = os.environ.get(DATASETS_ENV, "")
    return [Path(os.path.realpath(os.path.expanduser(p))) for p in raw.split(os.pathsep) if p.strip()]


def dataset_path(name: str, value: str) -> Path:
    """``value`` resolved (symlinks too) if it lies inside a configured dataset root; else a one-line error.

    A job file names data; it must not make a runner read (and torchvision unpickle) files the operator did
    not put under a dataset root.
    """
    roots = dataset_roots()
    resolved = Path(os.path.realpath(os.path.expanduser(value))) if value and "\x00" not in value else None
    if resolved is not None and any(resolved == r or r in resolved.parents for r in roots):
        return resolved
    where = ", ".join(map(str, roots)) if roots else f"none configured (set ${DATASETS_ENV} on the coordinator's node)"
    raise WorkloadError(f"{name}: {value!r} is outside the dataset roots ({where})", name)


def _as_number(value: Any) -> float | None:
    """A finite number from an int, a float or numeric text (YAML reads ``1e-3`` as text); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int):
        return value
    return value if isinstance(value, float) and math.isfinite(value) else None


def _number(value: float | None) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


# What every workload reads (executors/training.py): the optimizer, the data order and the batch.
COMMON: dict[str, Param] = {
    "seed": Param(0, "seeds the weights, the data order and dropout", low=0, high=2**32 - 1),
    "batch_size": Param(32, "global batch, split across the job's GPUs", low=1, high=8192),
    "optimizer": Param("sgd", "optimizer", kind=str, choices=("sgd", "adam")),
    "lr": Param(0.01, "learning rate", kind=float, low=1e-6, high=10.0),
    "momentum": Param(0.9, "SGD momentum (adam ignores it)", kind=float, low=0.0, high=0.999),
    "weight_decay": Param(5e-4, "L2 penalty", kind=float, low=0.0, high=1.0),
    "num_samples": Param(None, "size of the generated data set (null: the workload's own)",
                         low=1, high=10_000_000, nullable=True),
    "threads": Param(1, "torch CPU threads per rank (fixed, so CPU runs are reproducible)", low=1, high=256),
}
# Image workloads read CIFAR-10 when data_root (or $PCS_RAY_DATASETS) holds it.
IMAGE: dict[str, Param] = {
    **COMMON,
    "data_root": Param(None, "folder holding cifar-10-batches-py, inside $PCS_RAY_DATASETS (null: $PCS_RAY_DATASETS, else generated data)",
                       kind=str, nullable=True),
}


def _with(params: dict[str, Param], **changes: dict) -> dict[str, Param]:
    """``params`` with some declarations changed (a default, a bound)."""
    return {**params, **{name: replace(params[name], **change) for name, change in changes.items()}}


# The text workload reads its sequence shape; its batch bound is lower (attention grows with seq_len squared).
TEXT = _with(
    {**COMMON,
     "seq_len": Param(64, "tokens per sequence", low=1, high=256),
     "vocab_size": Param(1000, "vocabulary size (at least one token per class)", low=10, high=250_000)},
    optimizer={"default": "adam"}, lr={"default": 0.001}, batch_size={"high": 512},
)


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload as jobs see it: its name, what it trains, and the parameters it reads."""

    name: str
    description: str
    params: Mapping[str, Param] = field(repr=False)

    def resolve(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults overlaid with ``params``, each checked and converted; unknown keys are an error, not ignored."""
        unknown = sorted(set(params or {}) - set(self.params))
        if unknown:
            raise WorkloadError(f"workload {self.name!r}: unknown parameter(s) {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(self.params))}")
        merged = {name: p.default for name, p in self.params.items()}
        for name, value in (params or {}).items():
            merged[name] = self.params[name].check(name, value, self.name)
        return merged


class Catalog(Mapping[str, WorkloadSpec]):
    """The registered workloads by name; what ``pcs_ray.jobs.jobfile.parse_job(workloads=...)`` validates against."""

    def __init__(self, specs: list[WorkloadSpec]) -> None:
        self._specs = {s.name: s for s in specs}

    def __getitem__(self, name: str) -> WorkloadSpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def check(self, workload: str, params: Mapping[str, Any]) -> None:
        """Raise :class:`WorkloadError` if ``params`` are not valid for the registered ``workload``."""
        self[workload].resolve(params)


CATALOG = Catalog([
    WorkloadSpec("resnet18", "torchvision ResNet-18 on CIFAR-10", IMAGE),
    WorkloadSpec("vgg11", "torchvision VGG-11 (CIFAR head) on CIFAR-10",
                 _with(IMAGE, lr={"default": 0.005}, batch_size={"high": 4096})),
    WorkloadSpec("mobilenet_v2", "torchvision MobileNetV2 on CIFAR-10", _with(IMAGE, batch_size={"high": 2048})),
    WorkloadSpec("transformer", "small Transformer encoder classifying generated text", TEXT),
    WorkloadSpec("tiny_cnn", "tiny CNN on CIFAR-10-format data (tests)",
                 _with(IMAGE, batch_size={"default": 8}, lr={"default": 0.05})),
])


def registered_workloads() -> Catalog:
    """The workload catalog to pass as ``parse_job(..., workloads=registered_workloads())``."""
    return CATALOG


def params_table() -> str:
    """The Markdown table of every parameter: which workloads read it, default, allowed values."""
    rows = ["| `params` key | workloads | default | allowed | what |", "|---|---|---|---|---|"]
    names = sorted({p for spec in CATALOG.values() for p in spec.params})
    for name in names:
        readers = [s for s in CATALOG.values() if name in s.params]
        variants: dict[tuple, list[str]] = {}
        for spec in readers:
            p = spec.params[name]
            variants.setdefault((p.default, p.allowed()), []).append(spec.name)
        for (default, allowed), who in variants.items():
            shown = "all" if len(readers) == len(CATALOG) and len(variants) == 1 else ", ".join(who)
            about = readers[0].params[name].about
            rows.append(f"| `{name}` | {shown} | {'null' if default is None else default} | {allowed} | {about} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(params_table())
