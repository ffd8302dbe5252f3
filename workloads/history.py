"""Job history: what the live coordinator records and the solver searches on.

The coordinator appends one record per finished (or submitted) job; the
solver reads the file back as a workload (``JobSpec``s) to search WFQ
configurations on the jobs this cluster actually runs.

Format, version 1: UTF-8 JSON lines, one object per job, appended in any
order. Keys:

=================  ========  ==================================================
key                required  meaning
=================  ========  ==================================================
``v``              yes       format version, the integer ``1``
``job_id``         yes       integer, unique within the file
``submit_time``    yes       seconds (any epoch, e.g. ``time.time()``); the
                             reader shifts arrivals so the first one is at 0
``gpus``           yes       GPU demand: the most GPUs the job can use (>= 1)
``service``        yes       GPU-seconds at one GPU (> 0): runtime on 1 GPU
``min_gpus``       no        fewest GPUs it runs on (default 1; = ``gpus`` for
                             a rigid job)
``iteration_time`` no        measured seconds per iteration at 1 GPU
``model``          no        model name, e.g. ``resnet18``
``job_class``      no        variability class ``A`` .. ``D`` (default ``A``)
``speedup``        no        list of ``gpus + 1`` throughputs relative to one
                             GPU, index = GPU count (``[0, 1, ...]``); linear
                             when absent
``finish_time``    no        seconds, same epoch as ``submit_time``
``energy_j``       no        the job's energy in joules over all its runs
``energy_source``  no        ``nvml`` (measured: energy-counter growth on its
                             GPUs) or ``model`` (modelled from the cluster
                             spec's predicted power per GPU)
=================  ========  ==================================================

Unknown keys are kept out of the ``JobSpec`` but do not make a file
unreadable, so later versions can add fields. Blank lines are skipped. Any
other problem raises ``HistoryError`` (a ``ValueError``) naming the file and
line, because a silently dropped job changes the workload the solver tunes on.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from pcs_ray.jobs.spec import JobSpec, linear_speedup

HISTORY_VERSION = 1
HISTORY_FILE = "history.jsonl"  # its name in a coordinator's state folder
JOB_CLASSES = ("A", "B", "C", "D")


class HistoryError(ValueError):
    """A job-history file that cannot be read, with a one-line message."""


@dataclass(frozen=True)
class HistoryRecord:
    """One job as the coordinator saw it (see the module docstring for units)."""

    job_id: int
    submit_time: float
    gpus: int
    service: float
    min_gpus: int = 1
    iteration_time: float | None = None
    model: str = ""
    job_class: str = "A"
    speedup: tuple[float, ...] | None = None
    finish_time: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise HistoryError(f"job {self.job_id}: {problems[0]}")

    def to_json(self) -> dict:
        out = {"v": HISTORY_VERSION}
        for key, value in asdict(self).items():
            if value is None or (key == "model" and value == "") or (key == "min_gpus" and value == 1):
                continue
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def to_spec(self, offset: float = 0.0) -> JobSpec:
        """The job as the simulator sees it, arrivals shifted by ``-offset``."""
        speedup = self.speedup if self.speedup is not None else linear_speedup(self.gpus)
        return JobSpec(
            job_id=self.job_id, submit_time=self.submit_time - offset, service=self.service,
            max_gpus=self.gpus, speedup=tuple(float(s) for s in speedup), min_gpus=self.min_gpus,
            model=self.model, job_class=self.job_class, name=f"history-{self.job_id}",
        )


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _problems(r: HistoryRecord) -> list[str]:
    out = []
    if not isinstance(r.job_id, int) or isinstance(r.job_id, bool):
        out.append(f"job_id must be an integer, got {r.job_id!r}")
    if not _finite(r.submit_time):
        out.append(f"submit_time must be a number of seconds, got {r.submit_time!r}")
    if not _finite(r.service) or r.service <= 0:
        out.append(f"service must be GPU-seconds > 0, got {r.service!r}")
    if not isinstance(r.gpus, int) or isinstance(r.gpus, bool) or r.gpus < 1:
        out.append(f"gpus must be an integer >= 1, got {r.gpus!r}")
    elif not isinstance(r.min_gpus, int) or isinstance(r.min_gpus, bool) or not 1 <= r.min_gpus <= r.gpus:
        out.append(f"min_gpus must be an integer in 1..gpus ({r.gpus}), got {r.min_gpus!r}")
    if r.iteration_time is not None and (not _finite(r.iteration_time) or r.iteration_time <= 0):
        out.append(f"iteration_time must be seconds > 0, got {r.iteration_time!r}")
    if not isinstance(r.model, str):
        out.append(f"model must be a string, got {r.model!r}")
    if r.job_class not in JOB_CLASSES:
        out.append(f"job_class must be one of {', '.join(JOB_CLASSES)}, got {r.job_class!r}")
    if r.speedup is not None and isinstance(r.gpus, int):
        if len(r.speedup) != r.gpus + 1 or not all(_finite(s) and s >= 0 for s in r.speedup):
            out.append(f"speedup must list {r.gpus + 1} numbers >= 0 (index = GPU count)")
        elif r.speedup[0] != 0 or r.speedup[1] <= 0:
            out.append("speedup must start [0, >0, ...]")
    if r.finish_time is not None and (not _finite(r.finish_time) or r.finish_time < r.submit_time):
        out.append(f"finish_time must be a number >= submit_time, got {r.finish_time!r}")
    if r.energy_j is not None and (not _finite(r.energy_j) or r.energy_j < 0):
        out.append(f"energy_j must be joules >= 0, got {r.energy_j!r}")
    if r.energy_source not in (None, "nvml", "model"):
        out.append(f"energy_source must be nvml or model, got {r.energy_source!r}")
    return out


def append_history(path: str | Path, record: HistoryRecord, rotate_bytes: int | None = None) -> None:
    """Append one record as a JSON line (a single ``write`` on an ``O_APPEND`` file). ``rotate_bytes``: a file
    this line would take past that size is first renamed ``<name>.1`` (replacing an older one): the file
    then holds the most recent records, and the two together at most twice that."""
    line = json.dumps(record.to_json(), allow_nan=False, separators=(",", ":")) + "\n"
    if rotate_bytes is not None:
        try:
            if os.path.getsize(path) + len(line) > rotate_bytes:
                os.replace(path, f"{path}.1")
        except FileNotFoundError:
            pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # jobs and their sizes: the owner's only
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


_FIELDS = ("job_id", "submit_time", "gpus", "service", "min_gpus", "iteration_time", "model", "job_class",
           "speedup", "finish_time", "energy_j", "energy_source")
_REQUIRED = ("job_id", "submit_time", "gpus", "service")


def _parse_line(raw: dict, where: str) -> HistoryRecord:
    if not isinstance(raw, dict):
        raise HistoryError(f"{where}: expected a JSON object")
    version = raw.get("v")
    if version != HISTORY_VERSION:
        raise HistoryError(f"{where}: unsupported history version {version!r} (this reader knows {HISTORY_VERSION})")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise HistoryError(f"{where}: missing {', '.join(missing)}")
    kw = {k: raw[k] for k in _FIELDS if k in raw}
    if isinstance(kw.get("speedup"), list):
        kw["speedup"] = tuple(kw["speedup"])
    elif "speedup" in kw and kw["speedup"] is not None:
        raise HistoryError(f"{where}: speedup must be a list")
    try:
        return HistoryRecord(**kw)
    except HistoryError as e:
        raise HistoryError(f"{where}: {e}") from None


def history_file(path: str | Path) -> Path:
    """The history file ``path`` names: the file itself, or the one in a coordinator's state folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        found = p / HISTORY_FILE
        if not found.is_file():
            raise HistoryError(f"no job history in {path}: {HISTORY_FILE} is missing (a coordinator started with "
                               f"--state-dir {path} writes it when its first job finishes)")
        return found
    if not p.is_file():
        raise HistoryError(f"no such job-history file or state folder: {path}")
    return p


def read_history_records(path: str | Path) -> list[HistoryRecord]:
    """Every record in the file (or in a state folder's ``history.jsonl``), in file order."""
    p = history_file(path)
    path = p
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HistoryError(f"{path}: not a job-history file (not UTF-8 text)") from None
    records: list[HistoryRecord] = []
    seen: dict[int, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            raise HistoryError(f"{where}: not a JSON line ({e.msg})") from None
        rec = _parse_line(raw, where)
        if rec.job_id in seen:
            raise HistoryError(f"{where}: duplicate job_id {rec.job_id} (first on line {seen[rec.job_id]})")
        seen[rec.job_id] = lineno
        records.append(rec)
    if not records:
        raise HistoryError(f"{path}: the job history is empty")
    return records


def read_history(path: str | Path) -> list[JobSpec]:
    """The history as a workload: ``JobSpec``s sorted by arrival, the first arriving at 0."""
    records = read_history_records(path)
    start = min(r.submit_time for r in records)
    return sorted((r.to_spec(start) for r in records), key=lambda j: (j.submit_time, j.job_id))
