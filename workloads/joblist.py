"""Live job lists: the CSV that ``pcs-ray replay --live`` (and the demo) submits, job by job, on schedule.

Header ``submit_s,name,workload,steps,gpus,min_gpus,class`` (``submit_s``:
seconds after the start; ``min_gpus`` and ``class`` may be empty: then the
job is rigid at ``gpus`` and of class ``A``), optionally followed by a
``params`` column holding the workload's parameters as a JSON object. Rows
are checked against the workload catalog: a malformed row is one
:class:`JobListError` naming its line. Bundled lists live in
``workloads/joblists/`` and are named without ``.csv`` (:func:`bundled_joblists`).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from pcs_ray.workloads.catalog import WorkloadError, registered_workloads

HEADER = ("submit_s", "name", "workload", "steps", "gpus", "min_gpus", "class")
OPTIONAL = ("params",)
BUNDLED_DIR = Path(__file__).with_name("joblists")


class JobListError(ValueError):
    """A job list that cannot be replayed; the message names the file and line."""


@dataclass(frozen=True)
class ListedJob:
    """One row: when it is submitted (seconds after the start) and the job spec it submits."""

    submit_s: float
    name: str
    workload: str
    steps: int
    gpus: int
    min_gpus: int
    job_class: str
    params: dict = field(default_factory=dict)

    def spec(self, **extra) -> dict:
        """The job spec (``pcs_ray.jobs.jobfile`` format) this row submits."""
        return {"name": self.name, "workload": self.workload, "steps": self.steps, "gpus": self.gpus,
                "min_gpus": self.min_gpus, "class": self.job_class, "params": dict(self.params), **extra}


def bundled_joblists() -> list[str]:
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.csv"))


def locate_joblist(name_or_path: str | Path) -> Path:
    """A bundled list by name, or a file; a one-line :class:`JobListError` if neither exists."""
    text = str(name_or_path)
    if text in bundled_joblists():
        return BUNDLED_DIR / f"{text}.csv"
    path = Path(text).expanduser()
    if not path.is_file():
        raise JobListError(f"job list {text!r}: no such file, and not a bundled list ({', '.join(bundled_joblists())})")
    return path


def read_joblist(name_or_path: str | Path, capacity: int | None = None) -> list[ListedJob]:
    """The rows of a job list, in submission order."""
    path = locate_joblist(name_or_path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise JobListError(f"{path}: cannot read: {e}") from None
    return parse_joblist(text, str(path), capacity)


def parse_joblist(text: str, where: str = "job list", capacity: int | None = None) -> list[ListedJob]:
    rows = list(csv.reader(text.splitlines()))
    lines = [(i + 1, r) for i, r in enumerate(rows) if r and not (len(r) == 1 and not r[0].strip())]
    if not lines:
        raise JobListError(f"{where}: empty; expected the header {','.join(HEADER)}")
    _, header = lines[0]
    header = [h.strip() for h in header]
    if tuple(header[: len(HEADER)]) != HEADER or any(h not in OPTIONAL for h in header[len(HEADER):]):
        raise JobListError(f"{where}: line {lines[0][0]}: header must be {','.join(HEADER)}[,params], got {','.join(header)}")
    jobs, names = [], set()
    for number, row in lines[1:]:
        job = _row(row, header, capacity, f"{where}: line {number}")
        if job.name in names:
            raise JobListError(f"{where}: line {number}: name {job.name!r} is used twice")
        names.add(job.name)
        jobs.append(job)
    if not jobs:
        raise JobListError(f"{where}: no jobs after the header")
    return sorted(jobs, key=lambda j: j.submit_s)


def _row(row: list[str], header: list[str], capacity: int | None, at: str) -> ListedJob:
    if len(row) != len(header):
        raise JobListError(f"{at}: {len(row)} fields, the header has {len(header)}")
    raw = {h: v.strip() for h, v in zip(header, row)}
    submit = _number(raw["submit_s"], "submit_s", at, float)
    if not math.isfinite(submit) or submit < 0:
        raise JobListError(f"{at}: submit_s must be a number >= 0, got {raw['submit_s']!r}")
    name = raw["name"]
    if not name or len(name) > 100:
        raise JobListError(f"{at}: name must be 1 to 100 characters")
    catalog = registered_workloads()
    if raw["workload"] not in catalog:
        raise JobListError(f"{at}: unknown workload {raw['workload']!r}; known: {', '.join(sorted(catalog))}")
    steps = _number(raw["steps"], "steps", at, int)
    gpus = _number(raw["gpus"], "gpus", at, int)
    min_gpus = gpus if raw["min_gpus"] == "" else _number(raw["min_gpus"], "min_gpus", at, int)
    if steps < 1 or steps > 10_000_000:
        raise JobListError(f"{at}: steps must be 1 to 10000000, got {steps}")
    if not 1 <= min_gpus <= gpus:
        raise JobListError(f"{at}: need 1 <= min_gpus <= gpus, got {min_gpus} and {gpus}")
    if capacity is not None and min_gpus > capacity:
        raise JobListError(f"{at}: the job needs {min_gpus} GPUs; the cluster has {capacity}")
    job_class = raw["class"] or "A"
    if job_class not in ("A", "B", "C", "D"):
        raise JobListError(f"{at}: class must be A, B, C or D (or empty), got {job_class!r}")
    params = {}
    if raw.get("params"):
        try:
            params = json.loads(raw["params"])
        except ValueError:
            raise JobListError(f"{at}: params is not a JSON object: {raw['params'][:60]!r}") from None
        if not isinstance(params, dict):
            raise JobListError(f"{at}: params must be a JSON object")
    try:
        catalog.check(raw["workload"], params)
    except WorkloadError as e:
        raise JobListError(f"{at}: params: {e}") from None
    return ListedJob(submit, name, raw["workload"], steps, gpus, min_gpus, job_class, params)


def _number(text: str, what: str, at: str, kind: type):
    try:
        value = float(text)
    except ValueError:
        raise JobListError(f"{at}: {what} must be a number, got {text!r}") from None
    if kind is int:
        if not math.isfinite(value) or value != int(value):
            raise JobListError(f"{at}: {what} must be a whole number, got {text!r}")
        return int(value)
    return value
