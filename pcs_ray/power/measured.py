"""GPU telemetry per node through NVML (``nvidia-ml-py``), and each job's energy from the counters.

``NVMLSampler.sample()`` reads, per GPU: power (W), the total-energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded), SM
and memory clocks (MHz), temperature (C), utilisation (%) and the clock-event
(throttle) reasons by name. A field the device does not support is None; a
machine without NVML (``NVMLError_LibraryNotFound``, no driver, no library)
gives a sampler with ``available`` False, whose samples are empty.

A job's energy is the sum over its GPUs of the counter's growth since the
job started on them (:class:`JobEnergy`); GPUs shared in time with other
jobs are not separated (GPUs are whole-job exclusive here). Without NVML
(logical GPUs) :class:`ModelledTelemetry` gives the same record from a
power model (W per GPU per class, e.g. a power profile's predictions) and
the time the job ran, marked ``modelled``.

Live, each rank of a run samples its own GPU (:class:`RunMeter`) with its
progress reports; the coordinator sums the runs' counter growth into the
job's measured energy and falls back to the modelled one where no GPU of the
job could be read (``energy_view``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

from pcs_ray.cluster.nvml import NVMLDevices, NVMLUnavailable

#: clock-event reason bits (NVML ``nvmlClocksEventReason*``), by name
REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks",
}


def reason_names(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for bit, name in REASONS.items() if mask & bit]


@dataclass
class GPUSample:
    """One GPU at one time; None: not supported by the device (or modelled without it)."""

    index: int
    uuid: str | None
    ts: float
    power_w: float | None = None
    energy_mj: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_c: float | None = None
    utilization_pct: float | None = None
    clock_events: list[str] | None = None
    modelled: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


class NVMLSampler:
    """Samples this node's GPUs through NVML (:class:`~pcs_ray.cluster.nvml.NVMLDevices`); ``nvml``: a stand-in for
    ``pynvml`` (tests)."""

    def __init__(self, nvml=None, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.available = False
        self.reason: str | None = None
        self.devices: NVMLDevices | None = None
        try:
            self.devices = NVMLDevices.start(nvml)
            self.available = True
        except NVMLUnavailable as e:  # no library, no driver: no telemetry, not a crash
            self.reason = str(e)

    @property
    def gpu_count(self) -> int:
        return self.devices.count if self.devices is not None else 0

    def close(self) -> None:
        if self.devices is not None:
            self.devices.close()
        self.available = False

    def sample(self, indices: Iterable[int] | None = None) -> list[GPUSample]:
        """One sample per GPU (all, or ``indices``); empty without NVML."""
        if not self.available:
            return []
        out = []
        for i in range(self.devices.count) if indices is None else indices:
            read = self.devices.reading(i)
            mask = read.pop("clock_event_mask")
            out.append(GPUSample(index=i, ts=self.clock(), clock_events=reason_names(mask), **read))
        return out


@dataclass
class JobEnergy:
    """A job's energy from energy-counter deltas over its GPUs (J), and its latest samples."""

    job_id: int
    gpus: tuple[int, ...]
    start_mj: dict[int, float] = field(default_factory=dict)
    last_mj: dict[int, float] = field(default_factory=dict)
    samples: list[GPUSample] = field(default_factory=list)
    modelled: bool = False
    joules_modelled: float = 0.0

    def update(self, samples: Iterable[GPUSample]) -> None:
        mine = [s for s in samples if s.index in self.gpus]
        for s in mine:
            if s.energy_mj is None:
                continue
            self.start_mj.setdefault(s.index, s.energy_mj)
            self.last_mj[s.index] = s.energy_mj
        if mine:
            self.samples = mine

    @property
    def joules(self) -> float | None:
        """Energy since the job started on its GPUs; None until a counter has been read twice."""
        if self.modelled:
            return self.joules_modelled
        if not self.last_mj:
            return None
        return sum(self.last_mj[g] - self.start_mj[g] for g in self.last_mj) / 1000.0

    def view(self) -> dict:
        """What status, the report and the job history show."""
        power = [s.power_w for s in self.samples if s.power_w is not None]
        return {"energy_j": self.joules, "power_w": sum(power) if power else None, "modelled": self.modelled,
                "gpus": [s.as_dict() for s in self.samples]}


def record_rows(app: str, energy: JobEnergy, runtime: float | None = None) -> list[dict]:
    """The job's latest samples as power records (``pcs_ray.power.records`` schema), one per GPU, for
    the telemetry history that ``pcs-ray power fit --data FILE.csv`` trains on; modelled samples are
    not measurements and give none. ``app`` is the job's workload (the records' ``app`` column)."""
    if energy.modelled:
        return []
    return [{"app": app, "device": s.uuid or str(s.index), "power_w": s.power_w, "ts": s.ts,
             "sm_clock_mhz": s.sm_clock_mhz, "mem_clock_mhz": s.mem_clock_mhz, "temperature_c": s.temperature_c,
             "runtime": runtime} for s in energy.samples if s.power_w]


class RunMeter:
    """One rank's GPU over one run: the energy counter's growth since the run started on it, plus the
    latest sample's fields, for the progress reports. Where the device lacks the counter (before Volta),
    the energy is integrated from power readings instead (trapezoids between reports)."""

    def __init__(self, sampler: NVMLSampler, index: int) -> None:
        self.sampler, self.index = sampler, index
        first = sampler.sample([index]) if sampler.available and 0 <= index < sampler.gpu_count else []
        self.available = bool(first) and (first[0].energy_mj is not None or first[0].power_w is not None)
        self._start_mj = first[0].energy_mj if first else None
        self._last = first[0] if first else None
        self._integrated_j = 0.0

    def reading(self) -> dict | None:
        """``{"energy_j", "power_w", "ts", "uuid", clocks, temperature, utilisation, clock events}``; None
        without NVML for this GPU."""
        if not self.available:
            return None
        got = self.sampler.sample([self.index])
        if not got:
            return None
        s = got[0]
        prev, self._last = self._last, s
        if s.energy_mj is not None and self._start_mj is not None:
            energy = (s.energy_mj - self._start_mj) / 1000.0
        else:
            if prev is not None and prev.power_w is not None and s.power_w is not None:
                self._integrated_j += 0.5 * (prev.power_w + s.power_w) * max(0.0, s.ts - prev.ts)
            energy = self._integrated_j
        out = s.as_dict()
        out.pop("energy_mj")
        out.pop("modelled")
        return {**out, "energy_j": energy}


def energy_view(measured: Mapping[str, dict], modelled_j: float | None) -> dict | None:
    """A job's energy as status, the report and the history show it: measured (``source: nvml``, the sum
    of each run's counter growth on each GPU, ``measured``: run:GPU -> latest reading) where any reading
    came in, else modelled from the power model (``source: model``), else None."""
    if measured:
        readings = list(measured.values())
        latest = max(r.get("ts") or 0.0 for r in readings)
        power = [r["power_w"] for r in readings if r.get("power_w") is not None and (r.get("ts") or 0.0) >= latest - 60]
        return {"joules": float(sum(r.get("energy_j") or 0.0 for r in readings)), "modelled": False, "source": "nvml",
                "power_w": float(sum(power)) if power else None, "gpus_read": len(readings)}
    if modelled_j is None:
        return None
    return {"joules": modelled_j, "modelled": True, "source": "model"}


class ModelledTelemetry:
    """Telemetry of logical GPUs from a power model: W per GPU for a job class (``watts(class, gpu)``)."""

    def __init__(self, watts: Callable[[str, int], float] | Mapping[str, float], clock: Callable[[], float] = time.time,
                 idle_w: float = 60.0) -> None:
        self.watts = watts if callable(watts) else (lambda cls, gpu, table=dict(watts): table.get(cls, 300.0))
        self.clock = clock
        self.idle_w = idle_w
        self.available = True

    def sample_job(self, energy: JobEnergy, job_class: str, since: float) -> JobEnergy:
        """Advance ``energy`` (modelled) from ``since`` to now at the model's power on its GPUs."""
        now = self.clock()
        samples = [GPUSample(index=g, uuid=None, ts=now, power_w=float(self.watts(job_class, g)), modelled=True)
                   for g in energy.gpus]
        energy.modelled = True
        energy.joules_modelled += sum(s.power_w for s in samples) * max(0.0, now - since)
        energy.samples = samples
        return energy


__all__ = ["GPUSample", "JobEnergy", "ModelledTelemetry", "NVMLSampler", "REASONS", "RunMeter", "energy_view", "reason_names",
           "record_rows"]
