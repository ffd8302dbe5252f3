"""Power records: one measured run of one workload on one GPU, in one CSV schema for every source.

The schema (``power fit --data FILE.csv`` reads it; the live coordinator's
telemetry history is written in it)::

    app,device,power_w[,ts,sm_clock_mhz,mem_clock_mhz,temperature_c,runtime]

``app`` names the workload (a model or application, the VAHRM paper's *application*:
many jobs run one), ``device`` the GPU
(any stable key: a UUID, ``node-index``), ``power_w`` the run's mean power
in watts (> 0). Optional: ``ts`` (Unix seconds), the run's mean SM and memory
clocks (MHz), its mean temperature (C) and ``runtime`` (relative to the
workload's median; 1.0 when absent). A row that breaks the schema fails
with its line number.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REQUIRED = ("app", "device", "power_w")
OPTIONAL = ("ts", "sm_clock_mhz", "mem_clock_mhz", "temperature_c", "runtime")
COLUMNS = REQUIRED + OPTIONAL


class PowerDataError(ValueError):
    """Power records that cannot be read or used (one line, naming the file and line)."""


@dataclass
class Records:
    """Runs as columns (what the models train on)."""

    app: np.ndarray  # str
    device: np.ndarray  # str
    power: np.ndarray  # W
    sm_clock: np.ndarray  # MHz, nan when unknown
    mem_clock: np.ndarray
    temperature: np.ndarray
    runtime: np.ndarray
    ts: np.ndarray  # float seconds, nan when unknown

    def __len__(self) -> int:
        return len(self.power)

    def take(self, idx: np.ndarray) -> "Records":
        return Records(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def from_longhorn(apps=None) -> Records:
    """PAL's Longhorn per-run records (``pcs_ray.variability.longhorn``) as power records."""
    from pcs_ray.variability.longhorn import APPS, load_runs

    runs = load_runs(tuple(apps) if apps else APPS)
    return Records(
        app=np.asarray([r.app for r in runs]), device=np.asarray([r.device for r in runs]),
        power=np.asarray([r.power for r in runs]), sm_clock=np.asarray([r.sm_clock for r in runs]),
        mem_clock=np.asarray([r.mem_clock for r in runs]), temperature=np.asarray([r.temperature for r in runs]),
        runtime=np.asarray([r.runtime for r in runs]),
        ts=np.asarray([np.nan if r.ts is None else float(r.ts) for r in runs]),
    )


def _number(text: str | None, column: str, where: str, positive: bool = False) -> float:
    if text is None or text.strip() == "":
        if positive:
            raise PowerDataError(f"{where}: '{column}' is empty")
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise PowerDataError(f"{where}: '{column}' is not a number: {text!r}") from None
    if not math.isfinite(value) or (positive and value <= 0):
        raise PowerDataError(f"{where}: '{column}' must be a {'positive ' if positive else ''}finite number, got {text!r}")
    return value


def read_csv(path: str | Path) -> Records:
    """Records from a CSV in the schema above; ``PowerDataError`` names the first bad line."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            missing = [c for c in REQUIRED if c not in fields]
            if missing:
                raise PowerDataError(f"{path}: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED)}; "
                                     f"optional {', '.join(OPTIONAL)})")
            cols: dict[str, list] = {c: [] for c in COLUMNS}
            for row in reader:
                where = f"{path} line {reader.line_num}"
                if None in row:
                    raise PowerDataError(f"{where}: more fields than the header has")
                for c in ("app", "device"):
                    if not (row.get(c) or "").strip():
                        raise PowerDataError(f"{where}: '{c}' is empty")
                    cols[c].append(row[c].strip())
                cols["power_w"].append(_number(row.get("power_w"), "power_w", where, positive=True))
                for c in OPTIONAL:
                    cols[c].append(_number(row.get(c), c, where, positive=(c == "runtime" and row.get(c) not in (None, ""))))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise PowerDataError(f"{path}: cannot read power records ({e})") from None
    if not cols["app"]:
        raise PowerDataError(f"{path}: no records")
    runtime = np.asarray(cols["runtime"], dtype=np.float64)
    return Records(
        app=np.asarray(cols["app"]), device=np.asarray(cols["device"]),
        power=np.asarray(cols["power_w"], dtype=np.float64),
        sm_clock=np.asarray(cols["sm_clock_mhz"], dtype=np.float64),
        mem_clock=np.asarray(cols["mem_clock_mhz"], dtype=np.float64),
        temperature=np.asarray(cols["temperature_c"], dtype=np.float64),
        runtime=np.where(np.isnan(runtime), 1.0, runtime), ts=np.asarray(cols["ts"], dtype=np.float64),
    )


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """Append rows (dicts with the schema's keys) to ``path``, writing the header to a new file."""
    path = Path(path)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
        if new:
            w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})


def load(data: str | Path) -> Records:
    """``longhorn`` (the bundled records) or a CSV file in the schema."""
    if str(data).lower() == "longhorn":
        return from_longhorn()
    path = Path(data)
    if not path.is_file():
        raise PowerDataError(f"power data {str(data)!r} is neither 'longhorn' nor a file")
    return read_csv(path)


__all__ = ["COLUMNS", "OPTIONAL", "REQUIRED", "PowerDataError", "Records", "from_longhorn", "load", "read_csv",
           "write_rows"]
