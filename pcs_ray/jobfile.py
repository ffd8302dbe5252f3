"""The job spec a user submits (YAML or a dict), validated before it reaches the coordinator.

::

    name: resnet-a          # optional, shown in status
    workload: resnet18      # a registered workload (workloads.catalog)
    steps: 200              # the whole training budget, in optimizer steps
    gpus: 2                 # most GPUs it can use
    min_gpus: 1             # optional: fewest it runs on (default: gpus, a rigid job)
    class: A                # variability class A (most sensitive) .. D
    step_time: 0.5          # optional estimate, seconds per step on one GPU
    checkpoint_every: 50    # optional, steps between periodic checkpoints (0: only on preemption)
    params: {batch_size: 32, seed: 1}
    executor: runner        # or ``external``: something else (a Ray Tune sweep) runs it on
                            # the GPUs the coordinator assigns and acknowledges each change

Every problem is one line naming the field, the value and what is allowed:
an unknown workload, more GPUs than the cluster has, sizes out of range,
unknown fields. This module is in the pure core: what the workloads are and
which ``params`` they read comes in as ``parse_job(workloads=...)``, a
:class:`WorkloadCatalog` (``workloads.catalog.registered_workloads()``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, get_args, get_origin, runtime_checkable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pcs_ray.cluster import format_validation_error as _format_validation_error
from pcs_ray.contract import JobSpecError  # one of the coordinator's typed errors; re-exported here

MAX_STEPS = 10_000_000
MAX_GPUS = 1024
MAX_STEP_TIME_S = 3600


@runtime_checkable
class WorkloadCatalog(Protocol):
    """The registered workloads (their names) and a check of the ``params`` each one reads."""

    def __contains__(self, name: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def check(self, workload: str, params: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` for params ``workload`` does not accept.

        When the error has a ``param`` attribute naming the parameter, its
        message starts with that name; otherwise it is about the params as a whole.
        """


class JobFile(BaseModel):
    """One training job as submitted."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    workload: str = Field(min_length=1, description="a registered workload")
    steps: int = Field(gt=0, le=MAX_STEPS, description="training budget in optimizer steps")
    gpus: int = Field(default=1, ge=1, le=MAX_GPUS, description="most GPUs the job can use")
    min_gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS,
                                 description="fewest GPUs it runs on (default: gpus, a rigid job)")
    job_class: Literal["A", "B", "C", "D"] = Field(default="A", alias="class",
                                                   description="variability class, A most sensitive")
    name: str = Field(default="", description="shown in status")
    step_time: float | None = Field(default=None, gt=0, le=MAX_STEP_TIME_S, allow_inf_nan=False,
                                    description="estimated seconds per step on one GPU, until measured")
    checkpoint_every: int = Field(default=0, ge=0, le=MAX_STEPS,
                                  description="steps between periodic checkpoints (0: only on preemption)")
    params: dict[str, Any] = Field(default_factory=dict, description="what the workload reads (table below)")
    executor: Literal["runner", "external"] = Field(
        default="runner", description="external: another executor (a Ray Tune sweep) runs it on the GPUs it is given")

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


def _field_range(name: str) -> str | None:
    """A bounded field's accepted values as text (``1 to 1024``), read from its declaration; else None."""
    info = JobFile.model_fields[name]
    integer = int in (info.annotation, *get_args(info.annotation))
    low = high = None
    for bound in info.metadata:
        if hasattr(bound, "ge"):
            low = str(bound.ge)
        elif hasattr(bound, "gt"):
            low = str(bound.gt + 1) if integer else f"{bound.gt} (exclusive)"
        elif hasattr(bound, "le"):
            high = str(bound.le)
    return f"{low} to {high}" if low is not None and high is not None else None


RANGES = {name: text for name in JobFile.model_fields if (text := _field_range(name)) is not None}


def fields_table() -> str:
    """The Markdown table of the job file's fields, their defaults and allowed values."""
    rows = ["| field | default | allowed | what |", "|---|---|---|---|"]
    for name, info in JobFile.model_fields.items():
        default = "required" if info.is_required() else info.get_default(call_default_factory=True)
        options = get_args(info.annotation) if get_origin(info.annotation) is Literal else ()
        allowed = RANGES.get(name) or " or ".join(options) or ("a mapping" if name == "params" else "text")
        shown = "null" if default is None else '""' if default == "" else default
        rows.append(f"| `{info.alias or name}` | {shown} | {allowed} | {info.description} |")
    return "\n".join(rows)


def parse_job(
    raw: Any,
    source: str = "job spec",
    *,
    capacity: int | None = None,
    workloads: WorkloadCatalog | Collection[str] | None = None,
) -> JobFile:
    """Validate a parsed spec against the cluster (``capacity`` GPUs) and the known ``workloads``.

    ``workloads``: a :class:`WorkloadCatalog` checks names and ``params``; a
    plain collection of names checks names only; ``None`` checks neither.
    """
    if not isinstance(raw, dict):
        raise JobSpecError(f"{source}: expected a mapping with 'workload' and 'steps', got {type(raw).__name__}")
    try:
        job = JobFile.model_validate(raw)
    except ValidationError as e:
        raise JobSpecError(_format_validation_error(e, source, RANGES)) from None
    if job.executor == "external":
        workloads = None  # the coordinator never launches it: the label is the caller's
    if workloads is not None and job.workload not in workloads:
        valid = ", ".join(sorted(workloads)) or "none registered"
        raise JobSpecError(f"{source}: workload: unknown workload {job.workload!r}; valid workloads: {valid}")
    if isinstance(workloads, WorkloadCatalog):
        try:
            workloads.check(job.workload, job.params)
        except ValueError as e:
            param = getattr(e, "param", None)
            raise JobSpecError(f"{source}: params.{e}" if param else f"{source}: params: {e}") from None
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
