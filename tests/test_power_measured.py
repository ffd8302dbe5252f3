"""Measured energy (``pcs_ray.power.measured``): NVML readings with a fake NVML for every field, the
absent-library path, and modelled telemetry."""

from __future__ import annotations

import types

import pytest

from pcs_ray.power.records import read_csv, write_rows
from pcs_ray.power.measured import JobEnergy, ModelledTelemetry, NVMLSampler, record_rows


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


# -- live: each rank's NVML readings, the job's measured energy, the report and the history ------------------


def test_run_meter_reports_counter_growth_since_the_run_started():
    from pcs_ray.power.measured import RunMeter

    meter = RunMeter(NVMLSampler(fake_nvml([0.0, 2_000.0])), 1)  # GPU 1: +2 J per read
    assert meter.available
    first, second = meter.reading(), meter.reading()
    assert (first["energy_j"], second["energy_j"]) == (2.0, 4.0)
    assert second["power_w"] == 151.0 and second["index"] == 1 and second["clock_events"] == ["sw_power_cap", "hw_thermal"]
    assert "energy_mj" not in second


def test_run_meter_integrates_power_where_the_energy_counter_is_missing():
    from pcs_ray.power.measured import RunMeter

    clock = iter([0.0, 10.0, 30.0])
    sampler = NVMLSampler(fake_nvml([0.0, 0.0], {"nvmlDeviceGetTotalEnergyConsumption"}), clock=lambda: next(clock))
    meter = RunMeter(sampler, 0)
    assert meter.reading()["energy_j"] == pytest.approx(150.0 * 10)
    assert meter.reading()["energy_j"] == pytest.approx(150.0 * 30)


def test_run_meter_without_nvml_is_unavailable():
    from pcs_ray.power.measured import RunMeter

    class Broken:
        def nvmlInit(self):
            raise NVMLError_LibraryNotFound("no libnvidia-ml.so")

    meter = RunMeter(NVMLSampler(Broken()), 0)
    assert not meter.available and meter.reading() is None
    assert not RunMeter(NVMLSampler(fake_nvml([1.0, 1.0])), 5).available  # not a GPU of this node


def live_core(tmp_path, power=None, journal=None):
    from pcs_ray.cluster import ClusterSpec
    from builders import clocked

    cluster = ClusterSpec.homogeneous(2, 2)
    if power is not None:
        cluster = ClusterSpec.model_validate({"nodes": [{"name": "node0", "gpus": [
            {"index": i, "uuid": f"u{i}", "power": {"A": w}} for i, w in enumerate(power)]}]})
    return clocked(cluster=cluster, journal=journal, checkpoint_root=tmp_path / "ckpt",
                   history_path=tmp_path / "history.jsonl")


def test_live_energy_is_measured_from_readings_else_modelled(tmp_path):
    from pcs_ray.coordinator import Journal
    from pcs_ray.workloads.history import read_history_records

    journal = Journal(tmp_path / "journal.sqlite")
    core, clock = live_core(tmp_path, power=[100.0, 200.0], journal=journal)
    measured, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 1.0})
    clock.t += 10
    assert core.job_view(measured)["energy"] == {"joules": 10 * 300.0, "modelled": True, "source": "model"}
    for index, joules in ((0, 40.0), (1, 60.0), (0, 30.0)):  # a late, smaller reading of GPU 0 does not win
        core.telemetry(measured, 1, "node0", index, {"energy_j": joules, "power_w": 5.0, "ts": 1.0})
    core.telemetry(measured, 0, "node0", 0, {"energy_j": 999.0, "ts": 1.0})  # an older run's
    core.telemetry(measured, 1, "node9", 0, {"energy_j": 999.0, "ts": 1.0})  # not one of its GPUs
    energy = core.job_view(measured)["energy"]
    assert (energy["joules"], energy["source"], energy["modelled"], energy["gpus_read"]) == (100.0, "nvml", False, 2)
    core.run_ended(measured, 1, "finished", step=10)
    core.telemetry(measured, 1, "node0", 1, {"energy_j": 70.0, "ts": 2.0, "final": True})  # after the run's end
    assert core.job_view(measured)["energy"]["joules"] == 110.0
    [record] = read_history_records(tmp_path / "history.jsonl")
    assert record.energy_source == "nvml" and record.energy_j == 100.0  # the history is written at the end

    # a new coordinator on the same journal: the journaled readings (the first and the final) come back
    core.journal.close()
    replayed, _ = live_core(tmp_path, power=[100.0, 200.0], journal=Journal(tmp_path / "journal.sqlite"))
    assert replayed.job_view(measured)["energy"]["joules"] == 40.0 + 70.0


def test_live_energy_without_power_data_or_readings_is_null(tmp_path):
    core, clock = live_core(tmp_path)
    jid, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 1, "step_time": 1.0})
    clock.t += 5
    assert core.job_view(jid)["energy"] is None


def test_report_shows_measured_and_modelled_energy(tmp_path):
    from pcs_ray.commands.report import journal_status
    from pcs_ray.coordinator import Journal

    journal = Journal(tmp_path / "journal.sqlite")
    core, clock = live_core(tmp_path, power=[100.0, 200.0], journal=journal)
    a, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 1, "step_time": 1.0})
    b, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 1, "step_time": 1.0})
    clock.t += 10
    core.telemetry(a, 1, "node0", 0, {"energy_j": 900.0, "power_w": 90.0, "ts": 1.0, "final": True})
    core.run_ended(a, 1, "finished", step=10)
    core.run_ended(b, 1, "finished", step=10)
    journal.close()
    (tmp_path / "cluster-spec.yaml").write_text(
        "nodes:\n  - name: node0\n    gpus:\n      - {index: 0, uuid: u0, power: {A: 100.0}}\n"
        "      - {index: 1, uuid: u1, power: {A: 200.0}}\n")
    status, _ = journal_status(tmp_path)
    energy = {j["id"]: j["energy"] for j in status["jobs"]}
    assert energy[a]["source"] == "nvml" and energy[a]["joules"] == 900.0
    assert energy[b] == {"joules": 200.0 * 10, "modelled": True, "source": "model"}
    (tmp_path / "cluster-spec.yaml").unlink()
    status, _ = journal_status(tmp_path)
    assert [j["energy"] and j["energy"]["source"] for j in status["jobs"]] == ["nvml", None]


def test_runner_telemetry_reporter_is_throttled_and_sends_the_final_reading():
    from pcs_ray.contract import GPUSlot, RunRequest
    from pcs_ray.executors.training import telemetry_reporter

    sent = []

    class Target:
        class report_telemetry:  # noqa: N801 - the actor method's name
            @staticmethod
            def remote(*args):
                sent.append(args)

    request = RunRequest(job_id="7", workload="tiny", params={}, total_steps=10, checkpoint_dir="/tmp/x",
                         gpus=(GPUSlot("n0", 0), GPUSlot("n0", 1)), attempt=3, reporter=Target(), report_interval_s=3600)
    rep = telemetry_reporter(request, rank=1, sampler=NVMLSampler(fake_nvml([0.0, 1_000.0])))
    rep.step_done()
    rep.step_done()  # within the interval: not sent
    rep.step_done(final=True)
    assert [(a[:4], a[4]["energy_j"], a[4].get("final", False)) for a in sent] == [
        (("7", 3, "n0", 1), 1.0, False), (("7", 3, "n0", 1), 2.0, True)]  # a throttled step reads nothing
    assert telemetry_reporter(request, 1, sampler=NVMLSampler(types.SimpleNamespace())) is None  # no NVML
    no_telemetry = RunRequest(job_id="7", workload="tiny", params={}, total_steps=10, checkpoint_dir="/tmp/x",
                              gpus=(GPUSlot("n0", 0),), reporter=object())
    assert telemetry_reporter(no_telemetry, 0, sampler=NVMLSampler(fake_nvml([0.0, 0.0]))) is None  # an older reporter


class _Coordinator:
    """Stands in for a coordinator actor: records what runners send it; a dead one raises, as Ray does."""

    def __init__(self, dead: bool = False):
        self.telemetry, self.progress = [], []
        self.report_telemetry = types.SimpleNamespace(remote=self._call(self.telemetry, dead))
        self.report_progress = types.SimpleNamespace(remote=self._call(self.progress, dead))

    @staticmethod
    def _call(into: list, dead: bool):
        def remote(*args, **kwargs):
            if dead:
                raise RuntimeError("the actor died")
            into.append(args)
        return remote


def test_telemetry_follows_the_coordinator_that_adopted_the_run():
    """After a coordinator restart the warm runner's resolver names the new coordinator: readings go there."""
    from pcs_ray.contract import GPUSlot, RunRequest
    from pcs_ray.executors.training import telemetry_reporter

    old, new = _Coordinator(dead=True), _Coordinator()
    current = [old]
    request = RunRequest(job_id="7", workload="tiny", params={}, total_steps=10, checkpoint_dir="/tmp/x",
                         gpus=(GPUSlot("n0", 0),), attempt=2, reporter=old, report_interval_s=0.0)
    rep = telemetry_reporter(request, 0, sampler=NVMLSampler(fake_nvml([500.0, 0.0])), resolve=lambda: current[0])
    rep.step_done()  # the dead coordinator: the failure is logged, training goes on
    current[0] = new  # adopted
    rep.step_done()
    current[0] = None  # the run changed hands and no one holds it yet: nothing to send to
    rep.step_done()
    current[0] = new
    rep.step_done(final=True)
    assert [(a[:4], a[4].get("final", False)) for a in new.telemetry] == [(("7", 2, "n0", 0), False),
                                                                         (("7", 2, "n0", 0), True)]
    assert old.telemetry == []


def test_run_training_gives_telemetry_the_progress_resolver(tmp_path, monkeypatch):
    """The runner's loop (as a warm runner calls it) sends NVML readings where the resolver says, not to
    ``request.reporter``. Off a GPU the loop emulates and reads no NVML, so the session is told it has one."""
    import torch

    from pcs_ray.executors import training
    from pcs_ray.power import measured as telemetry
    from pcs_ray.contract import GPUSlot, RunRequest

    monkeypatch.setattr(telemetry, "NVMLSampler", lambda: NVMLSampler(fake_nvml([250.0, 0.0])))
    real_init = training.TrainingSession.__init__

    def on_a_gpu(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.real_gpu = True  # the tensors stay on the CPU; only the loop's "emulated" branch is skipped

    monkeypatch.setattr(training.TrainingSession, "__init__", on_a_gpu)
    from pcs_ray.executors import user_run

    monkeypatch.setattr(user_run, "_device", lambda: "cuda:0")  # the rank takes its GPU as real: no emulation
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    old, new = _Coordinator(dead=True), _Coordinator()
    request = RunRequest("job", "tiny_cnn", 3, (GPUSlot("node0", 0),), str(tmp_path), params={"seed": 1, "num_samples": 40},
                         reporter=old, report_interval_s=0.0)
    outcome = training.run_training(request, reporter=lambda: new)
    assert outcome.status == "finished" and not outcome.emulated
    # The first report says the ranks began running the loop (no step time: the hang guard's clock starts).
    assert new.progress[0] == ("job", 0, None) and [a[:2] for a in new.progress[1:]] == [("job", 1), ("job", 2), ("job", 3)]
    assert [(a[0], a[3], a[4]["energy_j"], a[4].get("final", False)) for a in new.telemetry] == [
        ("job", 0, 0.25, False), ("job", 0, 0.5, False), ("job", 0, 0.75, False), ("job", 0, 1.0, True)]
    assert old.telemetry == [] and old.progress == []
