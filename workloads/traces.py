"""Readers for the job traces the experiments replay.

Three CSV formats: PCS/Philly, PCS testbed and Sia-Philly as
used by PAL. Each reader returns ``JobSpec``s sorted by (submit_time, job_id)
and rejects bad input with a one-line ``file:line:`` ``WorkloadError``,
because a silently skipped row changes every metric downstream.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.data import data_dir
from pcs_ray.workloads.demand import TabulatedDemand, load_speedup_curves, speedup_table
from pcs_ray.workloads.errors import WorkloadError

PCS_COLUMNS = ("app_id", "submit_time", "service", "num_jobs", "sleep_time", "model_name")
TESTBED_COLUMNS = PCS_COLUMNS[:5]
SIA_COLUMNS = ("job_id", "num_gpus", "submit_time", "duration", "model")

# Sia-Philly: seconds per iteration, keyed by lower-case model name (see pcs_ray/data/PROVENANCE.md).
SIA_ITERATION_TIME = {
    "resnet50": 0.1754,
    "vgg19": 0.3006,
    "pointnet": 0.28125,
    "bert": 0.179,
    "dcgan": 0.0469,
    "gpt2": 3.5714,
}
# Variability class, A most sensitive to slow GPUs ... D least (PAL's mapping).
SIA_CLASS = {"resnet50": "A", "gpt2": "B", "dcgan": "B", "bert": "B", "vgg19": "C", "pointnet": "D"}
# Models whose gradient exchange is large relative to compute; only their
# multi-GPU jobs care about link bandwidth. DCGAN and PointNet are small models.
SIA_BW_HEAVY = frozenset({"resnet50", "vgg19", "bert", "gpt2"})


def default_curves_path() -> Path:
    return data_dir() / "pcs" / "speedup-curves.json"


@dataclass(frozen=True)
class _Row:
    """One data row, with parsers that report errors at its line."""

    path: str
    line: int
    fields: dict[str, str]

    def error(self, message: str) -> WorkloadError:
        return WorkloadError.at(self.path, self.line, message)

    def number(self, column: str, *, positive: bool = False) -> float:
        raw = self.fields[column]
        try:
            value = float(raw)
        except ValueError:
            raise self.error(f"column {column!r} is not a number: {raw!r}") from None
        if not math.isfinite(value):
            raise self.error(f"column {column!r} must be a finite number: {raw!r}")
        if positive and value <= 0:
            raise self.error(f"column {column!r} must be > 0, got {raw!r}")
        if value < 0:
            raise self.error(f"column {column!r} must be >= 0, got {raw!r}")
        return value

    def whole(self, column: str, *, positive: bool = False) -> int:
        value = self.number(column, positive=positive)
        if value != int(value):
            raise self.error(f"column {column!r} must be a whole number, got {self.fields[column]!r}")
        return int(value)

    def text(self, column: str) -> str:
        return self.fields[column].strip()


def _open_checked(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"no such trace file: {path}")
    return p


def _read_header(path: str | Path) -> tuple[list[str], int]:
    """First non-blank CSV row, stripped, and its line number."""
    p = _open_checked(path)
    with p.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        for row in reader:
            if any(cell.strip() for cell in row):
                return [cell.strip() for cell in row], reader.line_num
    raise WorkloadError.at(path, 1, "file is empty (expected a CSV header line)")


def _rows(path: str | Path, required: tuple[str, ...]) -> Iterator[_Row]:
    """Data rows of a CSV trace that must have the ``required`` columns."""
    header, header_line = _read_header(path)
    missing = [c for c in required if c not in header]
    if missing:
        raise WorkloadError.at(
            path,
            header_line,
            f"missing column(s) {', '.join(map(repr, missing))}; header is {','.join(header)!r}, "
            f"expected {','.join(required)!r}",
        )
    seen_data = False
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        for row in reader:
            if reader.line_num <= header_line or not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise WorkloadError.at(
                    path, reader.line_num, f"expected {len(header)} fields, got {len(row)}: {','.join(row)!r}"
                )
            seen_data = True
            yield _Row(str(path), reader.line_num, dict(zip(header, row)))
    if not seen_data:
        raise WorkloadError.at(path, header_line, "no jobs after the header line")


def _sorted(jobs: list[JobSpec]) -> list[JobSpec]:
    return sorted(jobs, key=lambda j: (j.submit_time, j.job_id))


def _check_unique(row: _Row, job_id: int, seen: dict[int, int]) -> None:
    if job_id in seen:
        raise row.error(f"duplicate job id {job_id} (first on line {seen[job_id]})")
    seen[job_id] = row.line


def _load_curves(curves_path: str | Path | None) -> dict[str, TabulatedDemand]:
    path = Path(curves_path) if curves_path is not None else default_curves_path()
    if not path.is_file():
        raise WorkloadError(f"no such speedup-curves file: {path}")
    try:
        return load_speedup_curves(path)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise WorkloadError(f"{path}: not a speedup-curves file ({type(exc).__name__}: {exc})") from None


def _read_pcs_like(
    path: str | Path, columns: tuple[str, ...], curves: dict[str, TabulatedDemand] | None
) -> list[JobSpec]:
    """PCS/Philly and testbed rows: arrivals are the running sum of ``sleep_time``."""
    jobs: list[JobSpec] = []
    seen: dict[int, int] = {}
    arrival = 0.0
    for row in _rows(path, columns):
        job_id = row.whole("app_id")
        _check_unique(row, job_id, seen)
        service = row.number("service", positive=True)
        max_gpus = row.whole("num_jobs", positive=True)
        arrival += row.number("sleep_time")
        model = row.text("model_name") if "model_name" in columns else ""
        curve = curves.get(model) if curves is not None else None
        speedup = speedup_table(curve, max_gpus) if curve is not None else linear_speedup(max_gpus)
        jobs.append(
            JobSpec(job_id=job_id, submit_time=arrival, service=service, max_gpus=max_gpus,
                    speedup=speedup, min_gpus=1, model=model)
        )
    return _sorted(jobs)


def read_pcs_trace(path: str | Path, speedup: str = "model", curves_path: str | Path | None = None) -> list[JobSpec]:
    """PCS/Philly trace (``app_id,submit_time,service,num_jobs,sleep_time,model_name``).

    Elastic jobs (1..num_jobs GPUs); the artifact's columns call a job an
    *app* (``app_id``). ``speedup="model"`` (the default) scales each job by
    the measured curve of its ``model_name``, as the PCS artifact does when it
    replays a trace (linear for models without one, as its ``LinearModel``);
    ``"linear"`` scales every job linearly.
    """
    if speedup not in ("linear", "model"):
        raise WorkloadError(f"speedup must be 'linear' or 'model', got {speedup!r}")
    curves = _load_curves(curves_path) if speedup == "model" else None
    return _read_pcs_like(path, PCS_COLUMNS, curves)


def read_testbed_trace(path: str | Path) -> list[JobSpec]:
    """PCS testbed trace (``app_id,submit_time,service,num_jobs,sleep_time``), linear scaling."""
    return _read_pcs_like(path, TESTBED_COLUMNS, None)


def read_sia_philly(path: str | Path) -> list[JobSpec]:
    """Sia-Philly trace as used by PAL (``job_id,num_gpus,submit_time,duration,model``).

    Rigid jobs. ``duration`` counts iterations, so the runtime on ``num_gpus``
    GPUs is ``duration * iteration_time``; service is stored as that runtime
    times ``num_gpus`` with a linear table, so the job takes exactly that
    runtime on its GPUs.
    """
    jobs: list[JobSpec] = []
    seen: dict[int, int] = {}
    for row in _rows(path, SIA_COLUMNS):
        job_id = row.whole("job_id")
        _check_unique(row, job_id, seen)
        gpus = row.whole("num_gpus", positive=True)
        submit = row.number("submit_time")
        iterations = row.number("duration", positive=True)
        model = row.text("model")
        key = model.lower()
        if key not in SIA_ITERATION_TIME:
            raise row.error(f"unknown model {model!r}; known: {', '.join(sorted(SIA_ITERATION_TIME))}")
        runtime = iterations * SIA_ITERATION_TIME[key]
        jobs.append(
            JobSpec(job_id=job_id, submit_time=submit, service=runtime * gpus, max_gpus=gpus,
                    speedup=linear_speedup(gpus), min_gpus=gpus, model=model,
                    job_class=SIA_CLASS[key], bw_sensitive=gpus > 1 and key in SIA_BW_HEAVY)
        )
    return _sorted(jobs)


def default_speedup(path: str | Path) -> str:
    """The speedup kind ``read_trace`` uses when none is given: ``model`` for a PCS/Philly trace
    (its rows name their model), ``linear`` for the formats without model curves."""
    header, _ = _read_header(path)
    return "model" if set(header) >= set(PCS_COLUMNS) else "linear"


_FORMATS = (
    (PCS_COLUMNS, "PCS/Philly"),
    (TESTBED_COLUMNS, "PCS testbed"),
    (SIA_COLUMNS, "Sia-Philly"),
)


def read_trace(path: str | Path, **kw) -> list[JobSpec]:
    """Read any supported trace, picking the reader from the header.

    Keyword arguments (``speedup``, ``curves_path``) go to the PCS/Philly
    reader (default ``speedup="model"``); the other formats have no model
    curves and accept only ``speedup="linear"``.
    """
    header, line = _read_header(path)
    columns = set(header)
    if columns >= set(PCS_COLUMNS):
        return read_pcs_trace(path, **kw)
    other_kw = {k: v for k, v in kw.items() if not (k == "speedup" and v == "linear") and k != "curves_path"}
    if other_kw:
        raise WorkloadError(
            f"{path}: options {sorted(other_kw)} need a PCS/Philly trace with a model_name column"
        )
    if columns >= set(TESTBED_COLUMNS):
        return read_testbed_trace(path)
    if columns >= set(SIA_COLUMNS):
        return read_sia_philly(path)
    accepted = "; ".join(f"{','.join(cols)} ({label})" for cols, label in _FORMATS)
    raise WorkloadError.at(path, line, f"unrecognised trace header {','.join(header)!r}; accepted headers: {accepted}")
