"""The job spec a user submits (YAML or a dict), validated before it reaches the coordinator.

::

    name: resnet-a          # optional, shown in status
    workload: resnet18      # a model registered in workloads.models
    steps: 200              # the whole training budget, in optimizer steps
    gpus: 2                 # most GPUs it can use
    min_gpus: 1             # optional: fewest it runs on (default: gpus, a rigid job)
    class: A                # variability class A (most sensitive) .. D
    step_time: 0.5          # optional estimate, seconds per step on one GPU
    checkpoint_every: 50    # optional, steps between periodic checkpoints (0: only on preemption)
    params: {batch_size: 32, seed: 1}
    executor: runner        # or ``external``: something else (a Ray Tune sweep) runs it on
                            # the GPUs the coordinator assigns and acknowledges each change

Every problem is one line naming the field: an unknown workload, more GPUs
than the cluster has, negative sizes, unknown fields.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pcs_ray.cluster import _format_validation_error
from pcs_ray.contract import JobSpecError  # one of the coordinator's typed errors; re-exported here


class JobFile(BaseModel):
    """One training job as submitted."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    workload: str = Field(min_length=1)
    steps: int = Field(gt=0)
    gpus: int = Field(default=1, ge=1)
    min_gpus: int | None = Field(default=None, ge=1)
    job_class: Literal["A", "B", "C", "D"] = Field(default="A", alias="class")
    name: str = ""
    step_time: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    checkpoint_every: int = Field(default=0, ge=0)
    params: dict[str, Any] = Field(default_factory=dict)
    executor: Literal["runner", "external"] = "runner"

    @model_validator(mode="after")
    def _min_not_above_max(self) -> "JobFile":
        if self.min_gpus is not None and self.min_gpus > self.gpus:
            raise ValueError(f"min_gpus ({self.min_gpus}) is larger than gpus ({self.gpus})")
        return self

    @property
    def fewest_gpus(self) -> int:
        return self.gpus if self.min_gpus is None else self.min_gpus

    def to_dict(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True)


def parse_job(
    raw: Any,
    source: str = "job spec",
    *,
    capacity: int | None = None,
    workloads: Collection[str] | None = None,
) -> JobFile:
    """Validate a parsed spec against the cluster (``capacity`` GPUs) and the known ``workloads``."""
    if not isinstance(raw, dict):
        raise JobSpecError(f"{source}: expected a mapping with 'workload' and 'steps', got {type(raw).__name__}")
    try:
        job = JobFile.model_validate(raw)
    except ValidationError as e:
        raise JobSpecError(_format_validation_error(e, source)) from None
    if job.executor == "external":
        workloads = None  # the coordinator never launches it: the label is the caller's
    if workloads is not None and job.workload not in workloads:
        valid = ", ".join(sorted(workloads)) or "none registered"
        raise JobSpecError(f"{source}: workload: unknown workload {job.workload!r}; valid workloads: {valid}")
    if workloads is not None and job.params:
        _check_params(job, source)
    if capacity is not None and job.fewest_gpus > capacity:
        raise JobSpecError(
            f"{source}: gpus: the job needs at least {job.fewest_gpus} GPUs; the cluster has {capacity}"
        )
    return job


def load_job(path: str | Path, **kw) -> JobFile:
    """Read and validate a YAML job spec (see :func:`parse_job` for ``capacity`` and ``workloads``)."""
    p = Path(path)
    if not p.is_file():
        raise JobSpecError(f"no such job spec file: {path}")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise JobSpecError(f"{path}: cannot read job spec ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise JobSpecError(f"{path}: not valid YAML{where} ({getattr(e, 'problem', None) or type(e).__name__})") from None
    if raw is None:
        raise JobSpecError(f"{path}: empty job spec (expected 'workload' and 'steps')")
    return parse_job(raw, str(path), **kw)


def _check_params(job: JobFile, source: str) -> None:
    try:
        from workloads.models import get_workload
    except ImportError:
        return
    try:
        get_workload(job.workload).resolve(job.params)
    except ValueError as e:
        raise JobSpecError(f"{source}: params: {e}") from None


def registered_workloads() -> Collection[str] | None:
    """Names in the workload registry, or None where it is not installed (no check then)."""
    try:
        from workloads import models
    except ImportError:
        return None
    for attr in ("workload_names", "names", "list_workloads"):
        fn = getattr(models, attr, None)
        if callable(fn):
            return tuple(fn())
    registry = getattr(models, "WORKLOADS", None) or getattr(models, "REGISTRY", None)
    return tuple(registry) if registry is not None else None
