"""The job spec a user submits (YAML or a dict), validated before it reaches the coordinator.

::

    name: resnet-a          # optional, shown in status
    workload: resnet18      # a registered workload (pcs_ray.workloads.catalog), or instead your own code:
    entrypoint: train.py:train_loop   # FILE.py:FUNCTION in working_dir, or package.module:FUNCTION
    working_dir: .          # shipped to every node with Ray's runtime_env (relative to the job file)
    datasets: {...}         # set by TorchTrainer(datasets=...): where its Ray Data datasets were written
    config: {lr: 0.1}       # handed to the function (JSON)
    runtime_env: {pip: [einops]}      # optional: env_vars, pip, uv, excludes, config
    scaling: linear         # optional seed of its scaling: linear, none, or speedups at 1..gpus GPUs
    steps: 200              # the whole training budget, in optimizer steps (your own code: optional)
    gpus: 2                 # most GPUs it can use
    min_gpus: 1             # optional: fewest it runs on (default: gpus, a rigid job)
    class: A                # variability class A (most sensitive) .. D
    step_time: 0.5          # optional estimate, seconds per step on one GPU
    checkpoint_every: 50    # optional, steps between periodic checkpoints (0: only on preemption)
    params: {batch_size: 32, seed: 1}
    tenant: vision          # optional: the tenant whose quota it runs on, and who submits it
    user: alice
    min_runtime_s: 600      # optional: keep a run this long before preempting it (within the operator's bound)
    max_failures: 2         # optional: a loop that raises is restarted from its newest checkpoint this many times
    max_runtime_s: 86400    # optional: GPU-holding time in all; then it checkpoints and ends timed_out
    report_timeout_s: 1800  # optional: a run silent this long is a hang (stacks logged, killed, job failed)
    torch_config: {backend: gloo, timeout_s: 600}   # optional: your code's process group (Ray's TorchConfig)
    checkpoint_config: {num_to_keep: 3, score_attribute: val_loss, score_order: min}  # optional: the 3 best too
    executor: runner        # or ``external``: something else (a Ray Tune sweep) runs it on
                            # the GPUs the coordinator assigns and acknowledges each change

Every problem is one line naming the field, the value and what is allowed:
an unknown workload, more GPUs than the cluster has, sizes out of range,
unknown fields. This module is in the pure core: what the workloads are and
which ``params`` they read comes in as ``parse_job(workloads=...)``, a
:class:`WorkloadCatalog` (``pcs_ray.workloads.catalog.registered_workloads()``). A job's own code is
checked without running it (``pcs_ray.jobs.usercode``); it is labelled ``user:<entrypoint>`` in
``workload`` so that what the cluster learns of its speed is kept per entrypoint.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, get_args, get_origin, runtime_checkable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pcs_ray.cluster import format_validation_error as _format_validation_error
from pcs_ray.contract import JobSpecError  # one of the coordinator's typed errors; re-exported here
from pcs_ray.jobs.train_options import checkpoint_spec, torch_spec
from pcs_ray.jobs.usercode import CodeError, check_code

USER_PREFIX = "user:"

MAX_STEPS = 10_000_000
MAX_GPUS = 1024
MAX_STEP_TIME_S = 3600
MAX_RETRIES = 100


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

    workload: str = Field(default="", description="a registered workload (or omit it and name your own entrypoint)")
    entrypoint: str | None = Field(default=None, min_length=3, max_length=500,
                                   description="your training function: FILE.py:FUNCTION or package.module:FUNCTION")
    working_dir: str | None = Field(default=None, description="folder shipped to the run (relative to the job file)")
    config: dict[str, Any] = Field(default_factory=dict, description="JSON mapping handed to your function")
    runtime_env: dict[str, Any] | None = Field(
        default=None, description="Ray runtime_env for your run: env_vars, pip, uv, excludes, config")
    scaling: Literal["linear", "none"] | list[float] | None = Field(
        default=None, description="how your job speeds up with GPUs (seed; learned from its runs)")
    function: str | None = Field(default=None, repr=False,
                                 description="your function by value (set by pcs_ray.train.Trainer)")
    datasets: dict[str, Any] | None = Field(
        default=None, description="where the driver wrote its Ray Data datasets (set by TorchTrainer(datasets=...))")
    steps: int | None = Field(default=None, gt=0, le=MAX_STEPS, description=(
        "training budget in steps (optimizer steps; your own units for your code, where it may be left out: "
        "the job runs until its function returns)"))
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
    tenant: str | None = Field(default=None, min_length=1, max_length=100,
                               description="the tenant whose quota it runs on (see pcs_ray.tenants.spec)")
    user: str | None = Field(default=None, min_length=1, max_length=100, description="who submitted it")
    min_runtime_s: float | None = Field(default=None, ge=0, le=7 * 86400, allow_inf_nan=False,
                                        description="seconds a run is kept before preemption, within the operator's bound")
    max_failures: int = Field(default=0, ge=0, le=MAX_RETRIES,
                              description="times a loop that raises or hangs is restarted from its newest checkpoint")
    max_runtime_s: float | None = Field(default=None, gt=0, le=365 * 86400, allow_inf_nan=False,
                                        description="seconds it may hold GPUs in all, then it checkpoints and ends timed_out "
                                                    "(within the operator's bound)")
    report_timeout_s: float | None = Field(default=None, gt=0, le=7 * 86400, allow_inf_nan=False,
                                           description="a run that reports no step for this long is hung: its stacks "
                                                       "are logged, it is killed (within the operator's bound)")
    torch_config: dict[str, Any] | None = Field(
        default=None, description="your code's torch.distributed: backend (nccl, gloo) and timeout_s")
    checkpoint_config: dict[str, Any] | None = Field(
        default=None, description="checkpoints kept beside the newest two: num_to_keep, score_attribute, "
                                  "score_order (max, min)")

    @field_validator("torch_config", "checkpoint_config")
    @classmethod
    def _train_options(cls, value: Any, info) -> Any:
        """Checked as ``pcs_ray.train.config`` checks Ray's ``TorchConfig`` and ``CheckpointConfig``."""
        return (torch_spec if info.field_name == "torch_config" else checkpoint_spec)(value)

    @model_validator(mode="before")
    @classmethod
    def _label_user_code(cls, raw: Any) -> Any:
        """Own code is labelled by its entrypoint (or its pickled function's digest) in ``workload``, and
        the folder it comes from: two users' ``train.py:train`` are different code, and what the cluster
        learns of a label's speed must not pass from one to the other."""
        if isinstance(raw, dict) and not raw.get("workload") and (raw.get("entrypoint") or raw.get("function")):
            import hashlib

            entry = raw.get("entrypoint")
            if not isinstance(entry, str):
                blob = str(raw.get("function"))
                entry = "fn-" + hashlib.sha256(blob.encode()).hexdigest()[:12]
            folder = raw.get("working_dir")
            if isinstance(folder, str) and folder:
                entry += "@" + hashlib.sha256(folder.encode()).hexdigest()[:8]
            raw = {**raw, "workload": USER_PREFIX + entry}
        return raw

    @model_validator(mode="after")
    def _min_not_above_max(self) -> "JobFile":
        if not self.workload:
            raise ValueError("workload: missing; name a built-in workload or your own entrypoint")
        if self.min_gpus is not None and self.min_gpus > self.gpus:
            raise ValueError(f"min_gpus ({self.min_gpus}) is larger than gpus ({self.gpus})")
        if self.steps is None and not self.user_code:
            raise ValueError("steps: missing; a built-in workload or an external executor needs its total steps")
        if self.user_code:
            if self.entrypoint and self.function:
                raise ValueError("entrypoint and function: give one, not both")
            if self.params:
                raise ValueError("params: built-in workloads only; hand your function its options in config")
            if self.executor != "runner":
                raise ValueError("executor: your own code runs on pcs-ray's runners (executor: runner)")
        elif self.workload.startswith(USER_PREFIX):
            raise ValueError(f"workload: {self.workload!r} names user code but the job has no entrypoint")
        else:
            for name in ("working_dir", "runtime_env", "scaling", "torch_config", "checkpoint_config", "datasets"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only for your own code (an entrypoint)")
            if self.config:
                raise ValueError("config: only for your own code (an entrypoint); built-in workloads read params")
            if self.max_failures:
                raise ValueError("max_failures: only for your own code (an entrypoint); a built-in workload's "
                                 "failed runs are retried by the coordinator")
        if self.datasets is not None and not (isinstance(self.datasets.get("root"), str) and isinstance(
                self.datasets.get("token"), str) and isinstance(self.datasets.get("datasets"), dict)):
            raise ValueError("datasets: a mapping with root, token and datasets, as TorchTrainer(datasets=...) writes it")
        if isinstance(self.scaling, list):
            if not 1 <= len(self.scaling) <= self.gpus or any(not 0 < x <= 1e6 for x in self.scaling):
                raise ValueError(f"scaling: a curve lists the speedup at 1..{self.gpus} GPUs, each > 0")
        return self

    @property
    def user_code(self) -> bool:
        """The job runs the user's own function (not a built-in workload)."""
        return bool(self.entrypoint or self.function)

    @property
    def total_known(self) -> bool:
        """The job says its total work (``steps``); own code may leave it out."""
        return self.steps is not None

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
        allowed = RANGES.get(name) or " or ".join(options) or (
            "a mapping" if name in ("params", "config", "runtime_env", "torch_config", "checkpoint_config", "datasets") else "text")
        shown = "null" if default is None else '""' if default == "" else default
        rows.append(f"| `{info.alias or name}` | {shown} | {allowed} | {info.description} |")
    return "\n".join(rows)


def parse_job(
    raw: Any,
    source: str = "job spec",
    *,
    capacity: int | None = None,
    workloads: WorkloadCatalog | Collection[str] | None = None,
    check_files: bool = True,
) -> JobFile:
    """Validate a parsed spec against the cluster (``capacity`` GPUs) and the known ``workloads``.

    ``check_files``: read the job's own code (``pcs_ray.jobs.usercode``) where it lies; off where the
    files are not here (a client checking shape before the coordinator checks the rest).

    ``workloads``: a :class:`WorkloadCatalog` checks names and ``params``; a
    plain collection of names checks names only; ``None`` checks neither.
    """
    if not isinstance(raw, dict):
        raise JobSpecError(f"{source}: expected a mapping with 'workload' and 'steps', got {type(raw).__name__}")
    try:
        job = JobFile.model_validate(raw)
    except ValidationError as e:
        raise JobSpecError(_format_validation_error(e, source, RANGES)) from None
    if job.executor == "external" or job.user_code:
        workloads = None  # the coordinator never launches it, or it is not one of ours: the label is the caller's
    if job.user_code:
        try:
            check_code(job.entrypoint, job.function, job.working_dir, job.config, job.runtime_env, files=check_files)
        except CodeError as e:
            raise JobSpecError(f"{source}: {e}") from None
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
    if isinstance(raw, dict) and (raw.get("entrypoint") or raw.get("working_dir")):
        raw = {**raw, "working_dir": resolve_working_dir(raw.get("working_dir"), p.parent)}
    return parse_job(raw, str(path), **kw)


def resolve_working_dir(working_dir: Any, base: Path) -> Any:
    """A job file's ``working_dir`` as an absolute path (relative to ``base``; default: ``base`` itself)."""
    if working_dir is None:
        return str(base.resolve())
    if not isinstance(working_dir, str):
        return working_dir  # the model refuses it with its own message
    return str((base / Path(working_dir).expanduser()).resolve())
