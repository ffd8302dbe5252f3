"""NVML telemetry with a fake NVML for every field, the absent-library path, and modelled telemetry."""

from __future__ import annotations

import types

import pytest

from pcs_ray.power.records import read_csv, write_rows
from pcs_ray.telemetry import JobEnergy, ModelledTelemetry, NVMLSampler, record_rows


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - NVML's own name
    pass


def fake_nvml(energy: list[float], unsupported: set[str] = frozenset()):
    """Two GPUs; GPU i's counters advance by ``energy`` on every read."""
    state = {"reads": [0, 0]}
    nv = types.SimpleNamespace(NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0)

    def maybe(name, fn):
        def call(*a):
            if name in unsupported:
                raise NVMLError(f"{name}: Not Supported")
            return fn(*a)
        setattr(nv, name, call)

    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i

    def total_energy(h):
        state["reads"][h] += 1
        return 1_000_000.0 * (h + 1) + energy[h] * state["reads"][h]

    maybe("nvmlDeviceGetUUID", lambda h: f"GPU-fake-{h}".encode())
    maybe("nvmlDeviceGetPowerUsage", lambda h: 150_000 + 1000 * h)
    maybe("nvmlDeviceGetUtilizationRates", lambda h: types.SimpleNamespace(gpu=90 + h, memory=40))
    maybe("nvmlDeviceGetCurrentClocksEventReasons", lambda h: 0x4 | 0x40 if h else 0)
    maybe("nvmlDeviceGetCurrentClocksThrottleReasons", lambda h: 0x8)
    maybe("nvmlDeviceGetClockInfo", lambda h, kind: {1: 1530, 2: 877}[kind] - 10 * h)
    maybe("nvmlDeviceGetTemperature", lambda h, kind: 60 + h)
    maybe("nvmlDeviceGetTotalEnergyConsumption", total_energy)
    return nv


def test_every_field_from_nvml():
    sampler = NVMLSampler(fake_nvml([0.0, 0.0]), clock=lambda: 5.0)
    assert sampler.available
    a, b = sampler.sample()
    assert a.as_dict() == {"index": 0, "uuid": "GPU-fake-0", "ts": 5.0, "power_w": 150.0, "energy_mj": 1_000_000.0,
                           "sm_clock_mhz": 1530.0, "mem_clock_mhz": 877.0, "temperature_c": 60.0,
                           "utilization_pct": 90.0, "clock_events": [], "modelled": False}
    assert (b.power_w, b.sm_clock_mhz, b.clock_events) == (151.0, 1520.0, ["sw_power_cap", "hw_thermal"])


def test_unsupported_fields_are_none_and_old_throttle_api_used():
    sampler = NVMLSampler(fake_nvml([0.0, 0.0], {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage",
                                                 "nvmlDeviceGetCurrentClocksEventReasons"}))
    s = sampler.sample([1])[0]
    assert s.energy_mj is None and s.power_w is None and s.clock_events == ["hw_slowdown"]


def test_absent_library_and_driver():
    class Broken:
        def nvmlInit(self):
            raise NVMLError_LibraryNotFound("libnvidia-ml.so not found")

    sampler = NVMLSampler(Broken())
    assert not sampler.available and "NVMLError_LibraryNotFound" in sampler.reason and sampler.sample() == []


def test_job_energy_from_counter_deltas():
    sampler = NVMLSampler(fake_nvml([2_000.0, 5_000.0]))  # +2 J and +5 J per read
    job = JobEnergy(7, gpus=(0, 1))
    assert job.joules is None
    for _ in range(3):
        job.update(sampler.sample())
    assert job.joules == pytest.approx(2 * 2 + 2 * 5)  # two intervals after the first read
    view = job.view()
    assert view["power_w"] == 301.0 and not view["modelled"] and len(view["gpus"]) == 2


def test_modelled_telemetry_without_nvml():
    t = [100.0]
    model = ModelledTelemetry({"A": 200.0}, clock=lambda: t[0])
    job = JobEnergy(1, gpus=(3, 4))
    model.sample_job(job, "A", since=90.0)
    assert job.joules == pytest.approx(2 * 200 * 10) and job.view()["modelled"] and job.view()["power_w"] == 400.0


def test_telemetry_history_is_written_in_the_power_record_schema(tmp_path):
    job = JobEnergy(7, gpus=(0, 1))
    job.update(NVMLSampler(fake_nvml([1.0, 1.0]), clock=lambda: 9.0).sample())
    path = tmp_path / "history.csv"
    write_rows(path, record_rows("resnet50", job, runtime=1.1))
    rec = read_csv(path)
    assert rec.device.tolist() == ["GPU-fake-0", "GPU-fake-1"] and rec.power.tolist() == [150.0, 151.0]
    assert rec.sm_clock.tolist() == [1530.0, 1520.0] and rec.runtime.tolist() == [1.1, 1.1] and rec.ts.tolist() == [9.0, 9.0]
    modelled = JobEnergy(8, gpus=(0,))
    ModelledTelemetry({"A": 100.0}, clock=lambda: 1.0).sample_job(modelled, "A", since=0.0)
    assert record_rows("x", modelled) == []


def test_live_job_view_energy_is_modelled_from_the_cluster_power():
    from pcs_ray.coordinator.views import modelled_energy

    job = types.SimpleNamespace(spec=types.SimpleNamespace(job_class="A"), segments=[
        {"start": 0.0, "end": 10.0, "gpus": [0, 1]}, {"start": 20.0, "end": None, "gpus": [2]}])
    watts = {0: 100.0, 1: 200.0, 2: 150.0}
    assert modelled_energy(job, lambda cls, g: watts[g], now=30.0) == {"joules": 10 * 300 + 10 * 150, "modelled": True}
    assert modelled_energy(job, lambda cls, g: None, now=30.0) is None  # a GPU without power data
    assert modelled_energy(job, None, now=30.0) is None
