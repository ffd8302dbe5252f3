"""Per-run records of TACC Longhorn's V100s (PAL's ``sim/*-longhorn-agg.csv``), one schema for all four files.

The four files were written by different scripts, so they disagree on nearly
everything a join needs:

========  ===========================  ===============  ======================  ==========
file      GPU id (``uuid``)            cabinet / node   device                  power
========  ===========================  ===============  ======================  ==========
resnet    ``c002-4-1`` (cab-node-dev)  ``c002`` / ``4`` ``device``              ``mean_pwr``
bert      ``c009-3-1``                 ``c009`` / ``3`` ``device``              ``mean_pwr``
pagerank  ``GPU-0542528c-...``         ``c005`` / ``004``  ``device``           ``pwr``
sgemm     ``GPU-...``                  ``-1`` in 40 %   ``dev_id`` always 0     ``pwr``
========  ===========================  ===============  ======================  ==========

Every record gets one device key, ``<cabinet>-<node>-<device>`` (``c005-4-3``),
so one physical GPU has one key across applications. SGEMM's ``dev_id`` is the
index inside the job's ``CUDA_VISIBLE_DEVICES`` (always 0), not the GPU's slot:
an SGEMM GPU takes its slot from PageRank's record of the same NVML UUID, and
its cabinet/node from any of its own rows that have them. An SGEMM GPU whose
slot no file knows keeps its NVML UUID as its key (it joins nothing else).

``perf`` is a time in each file's own unit (seconds per run, ms per kernel,
...): ``runtime`` is it divided by the application's median, as PM-scores are.
``power`` is the run's mean power where the file has it (``mean_pwr``), else
its one sample (``pwr``); clocks and temperature likewise. 24 SGEMM rows have
no time stamp (``ts`` = -1): their ``ts`` is ``None``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pcs_ray import data

APPS = ("resnet", "bert", "pagerank", "sgemm")
#: The application whose records stand for each job class (PAL's: ResNet-50 A, BERT B, PageRank C; D as C).
#: SGEMM is a kernel benchmark, not a training job: it stands for no class.
CLASS_APPS = {"A": "resnet", "B": "bert", "C": "pagerank", "D": "pagerank"}


class LonghornError(ValueError):
    """A Longhorn record file that cannot be read (one line)."""


@dataclass(frozen=True)
class Run:
    """One measured run of one application on one GPU."""

    app: str
    device: str  # normalised key: cabinet-node-slot, or the NVML UUID when the slot is unknown
    uuid: str  # the file's own spelling
    cabinet: str | None
    node: int | None
    slot: int | None
    ts: int | None  # Unix seconds at the start of the run
    runtime: float  # perf / the app's median perf (1.0 = median, higher = slower)
    perf: float  # the file's raw value, in its own unit
    power: float  # W, mean over the run where measured, else the file's sample
    power_sample: float  # W, the file's ``pwr`` column
    sm_clock: float  # MHz
    mem_clock: float  # MHz
    temperature: float  # degrees C


def path_of(app: str, data_dir: str | Path | None = None) -> Path:
    base = Path(data_dir) if data_dir is not None else data.data_dir() / "pal" / "variability"
    return base / "sim" / f"{app}-longhorn-agg.csv"


def load_runs(apps: tuple[str, ...] | list[str] = APPS, data_dir: str | Path | None = None) -> list[Run]:
    """Every run of ``apps``, in file order per app, with devices joined across files."""
    unknown = [a for a in apps if a not in APPS]
    if unknown:
        raise LonghornError(f"unknown Longhorn application {unknown[0]!r} (known: {', '.join(APPS)})")
    # The UUID -> slot map needs PageRank and SGEMM even when only other apps are asked for.
    rows = {app: _read(path_of(app, data_dir)) for app in sorted(set(apps) | {"pagerank", "sgemm"})}
    where = _uuid_locations(rows)
    out: list[Run] = []
    for app in apps:
        out.extend(_runs(app, rows[app], where))
    return out


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise LonghornError(f"{path}: cannot read Longhorn records ({e})") from None


def _cabinet_node(row: dict[str, str]) -> tuple[str | None, int | None]:
    cab = (row.get("cabinet") or "").strip()
    node = (row.get("node") or "").strip()
    if not cab or cab == "-1" or not node or node == "-1":
        return None, None
    return cab, int(float(node))


def _uuid_locations(rows: dict[str, list[dict[str, str]]]) -> dict[str, tuple[str | None, int | None, int | None]]:
    """NVML UUID -> (cabinet, node, slot), from every file that spells GPUs by NVML UUID."""
    where: dict[str, tuple[str | None, int | None, int | None]] = {}
    for app in ("pagerank", "sgemm"):
        for r in rows[app]:
            uuid = r["uuid"]
            cab, node = _cabinet_node(r)
            slot = int(float(r["device"])) if app != "sgemm" and r.get("device", "") != "" else None
            old = where.get(uuid, (None, None, None))
            where[uuid] = (old[0] or cab, old[1] if old[1] is not None else node, old[2] if old[2] is not None else slot)
    return where


def _num(row: dict[str, str], *columns: str) -> float:
    for col in columns:
        value = row.get(col)
        if value not in (None, ""):
            return float(value)
    return float("nan")


def _runs(app: str, rows: list[dict[str, str]], where) -> list[Run]:
    perf = np.asarray([_num(r, "perf") for r in rows], dtype=np.float64)
    valid = np.isfinite(perf) & (perf > 0)
    if not valid.any():
        raise LonghornError(f"{app}: no positive 'perf' values")
    median = float(np.median(perf[valid]))
    out = []
    for r, p, ok in zip(rows, perf, valid):
        if not ok:
            continue
        uuid = r["uuid"]
        if uuid.startswith("GPU-"):
            cab, node, slot = where.get(uuid, (None, None, None))
        else:
            cab, node = _cabinet_node(r)
            slot = int(float(r["device"]))
        device = f"{cab}-{node}-{slot}" if cab is not None and node is not None and slot is not None else uuid
        ts = int(float(r["ts"])) if r.get("ts") not in (None, "") else -1
        out.append(Run(
            app=app, device=device, uuid=uuid, cabinet=cab, node=node, slot=slot, ts=ts if ts > 0 else None,
            runtime=float(p) / median, perf=float(p), power=_num(r, "mean_pwr", "pwr"), power_sample=_num(r, "pwr"),
            sm_clock=_num(r, "mean_freq", "freq"), mem_clock=_num(r, "mean_memfreq", "memfreq"),
            temperature=_num(r, "mean_temp", "temp"),
        ))
    return out


__all__ = ["APPS", "CLASS_APPS", "LonghornError", "Run", "load_runs", "path_of"]
