"""The GPU preflight: its checks over what a pinned process saw, the probe's failures, ``pcs-ray doctor`` and
the warning lines node registration prints. NVML's discovery and the pinned processes are faked: the real
ones run on a GPU machine (``bench/real_gpu.py``'s ``preflight`` check)."""

from __future__ import annotations

import json
import sys

import pytest

from pcs_ray.executors import preflight as probing
from pcs_ray import cli
from pcs_ray.cluster.discovery import GPUInfo, NodeInventory
from pcs_ray.cluster.preflight import Verdict, gpu_verdicts, normal_uuid, pinning_problems, uuid_problems
from pcs_ray.commands import doctor

UUID = "GPU-6a7b0c1d-2e3f-4a5b-8c9d-0e1f2a3b4c5d"
OTHER = "GPU-00000000-1111-2222-3333-444444444444"


def seen(index: int, uuid: str = UUID, **changes) -> dict:
    """What a process pinned to GPU ``index`` reports on a healthy node (``uuid``: its device 0's)."""
    return {"cuda_visible_devices": str(index), "cuda_device_order": "PCI_BUS_ID", "cuda_available": True,
            "device": "cuda:0", "cuda_device_count": 1, "torch_uuid": uuid[4:].upper(),
            "nvml_uuid_of_pci_bus_id": uuid, "pci_bus_id": "00000000:65:00.0", **changes}


def two_gpus() -> NodeInventory:
    """What NVML discovery gives for a node of two GPUs."""
    return NodeInventory("box", [GPUInfo(0, "GPU-fake-0"), GPUInfo(1, "GPU-fake-1")], source="nvml")


def test_uuids_compare_as_nvml_and_torch_spell_them():
    assert normal_uuid(UUID) == normal_uuid(UUID[4:].upper()) == UUID[4:]
    assert normal_uuid(None) is None and normal_uuid("  ") is None


def test_the_uuid_seen_must_be_nvmls_for_the_pinned_index():
    record = seen(1)
    assert uuid_problems(record, UUID, 1) == []
    assert uuid_problems(record, OTHER, 1) == [
        f"in the pinned process torch says CUDA device 0 is {UUID[4:]}, NVML's GPU 1 is {OTHER[4:]}",
        f"in the pinned process NVML by PCI bus id says CUDA device 0 is {UUID[4:]}, NVML's GPU 1 is {OTHER[4:]}"]
    assert len(uuid_problems({**record, "nvml_uuid_of_pci_bus_id": OTHER}, UUID, 1)) == 1  # either source may disagree
    assert "no UUID readable in the pinned process" in uuid_problems({"nvml_error": "NVMLError"}, UUID, 1)[0]
    assert uuid_problems(None, UUID, 1) == ["nothing recorded from the pinned process (its probe never ran)"]
    assert uuid_problems(record, None, 1) == ["NVML gave no UUID for GPU 1"]


def test_the_process_must_be_pinned_in_pci_bus_order_and_on_one_cuda_device_when_a_gpu_is_there():
    record = seen(1)
    assert pinning_problems(record, 1, want_cuda=True) == []
    assert pinning_problems(record, 0, want_cuda=True) == ["CUDA_VISIBLE_DEVICES in the pinned process is '1', want '0'"]
    assert pinning_problems({**record, "cuda_device_order": None}, 1, want_cuda=True) == [
        "CUDA_DEVICE_ORDER in the pinned process is None, want 'PCI_BUS_ID'"]
    cpu = {**record, "cuda_available": False, "device": "cpu"}
    assert pinning_problems(cpu, 1, want_cuda=False) == []
    assert pinning_problems(cpu, 1, want_cuda=True) == ["the pinned process's device is 'cpu' (CUDA available: False)"]
    assert pinning_problems({**record, "cuda_device_count": 2}, 1, want_cuda=True) == [
        "the pinned process sees 2 CUDA devices, want 1"]


def test_a_gpu_gets_a_verdict_per_check_and_one_failed_probe_when_its_process_said_nothing():
    good = gpu_verdicts(2, UUID, seen(2))
    assert [(v.check, v.passed) for v in good] == [("pinning", True), ("uuid", True)]
    swapped = gpu_verdicts(2, OTHER, seen(2))
    assert [v.check for v in swapped if not v.passed] == ["uuid"]
    assert swapped[1].line().startswith(f"GPU 2 ({OTHER}) failed the uuid check: in the pinned process torch says")
    silent = gpu_verdicts(3, UUID, None, "the pinned process exited 1: ImportError: No module named 'torch'")
    assert silent == [Verdict(3, UUID, "probe", ("the pinned process exited 1: ImportError: No module named 'torch'",))]


def test_check_node_probes_every_gpu_and_keeps_index_order():
    asked = []

    def probe(index, timeout):
        asked.append(index)
        return (seen(index, f"GPU-fake-{index}"), None) if index != 1 else (None, "the pinned process did not report")

    verdicts = probing.check_node([(0, "GPU-fake-0"), (1, "GPU-fake-1"), (2, "GPU-fake-2")], 5.0, prober=probe)
    assert sorted(asked) == [0, 1, 2]
    assert [(v.index, v.check, v.passed) for v in verdicts] == [
        (0, "pinning", True), (0, "uuid", True), (1, "probe", False), (2, "pinning", True), (2, "uuid", True)]
    assert probing.check_node([]) == []


def test_the_probe_says_why_a_pinned_process_reported_nothing(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert probing.probe(0, 5.0) == (None, "the pinned process could not start: [Errno 2] No such file or directory: "
                                           "'/nonexistent/python'")


@pytest.mark.slow  # a Python process that imports torch
def test_the_probe_reads_what_a_pinned_process_saw_here():
    """A real pinned process on this machine (no CUDA here): the variables reach it; the device is the CPU."""
    record, error = probing.probe(3, 120.0)
    assert error is None and record["cuda_visible_devices"] == "3" and record["cuda_device_order"] == "PCI_BUS_ID"
    if not record["cuda_available"]:
        assert record["device"] == "cpu" and pinning_problems(record, 3, want_cuda=True) == [
            "the pinned process's device is 'cpu' (CUDA available: False)"]


def test_doctor_without_gpus_says_so_in_one_line_and_passes(capsys, monkeypatch):
    monkeypatch.setattr("pcs_ray.cluster.discovery.nvml_inventory", lambda *a, **k: None)
    assert cli.run(["doctor"]) == 0
    out, err = capsys.readouterr()
    assert out == doctor.NO_GPU + "\n" and err == ""
    assert cli.run(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"node": None, "checked": False, "passed": None, "gpus": 0, "checks": [], "note": doctor.NO_GPU}


@pytest.fixture
def two_gpu_node(monkeypatch):
    """A node of two NVML GPUs whose GPU 1 is, to CUDA, GPU 0 (the pinned processes are faked)."""
    monkeypatch.setattr("pcs_ray.cluster.discovery.nvml_inventory", lambda *a, **k: two_gpus())
    monkeypatch.setattr(probing, "probe", lambda index, timeout: (seen(index, "GPU-fake-0"), None))


def test_doctor_prints_a_table_naming_the_failed_gpu_and_check_and_exits_1(capsys, two_gpu_node):
    assert cli.run(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "GPU preflight on box: 3 passed, 1 failed" in out
    failed = [line for line in out.splitlines() if "FAIL" in line]
    assert failed and "GPU-fake-1" in failed[0] and "uuid" in failed[0]
    assert cli.run(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["node"], report["checked"], report["passed"], report["gpus"]) == ("box", True, False, 2)
    assert [(c["index"], c["check"], c["passed"]) for c in report["checks"]] == [
        (0, "pinning", True), (0, "uuid", True), (1, "pinning", True), (1, "uuid", False)]
    assert report["checks"][3]["problems"] == [
        "in the pinned process torch says CUDA device 0 is fake-0, NVML's GPU 1 is fake-1",
        "in the pinned process NVML by PCI bus id says CUDA device 0 is fake-0, NVML's GPU 1 is fake-1"]


def test_doctor_passes_when_every_gpu_is_the_device_its_process_gets(capsys, monkeypatch, two_gpu_node):
    monkeypatch.setattr(probing, "probe", lambda index, timeout: (seen(index, f"GPU-fake-{index}"), None))
    assert cli.run(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True


def test_registration_warns_once_per_failed_check_and_never_for_logical_gpus(capsys, monkeypatch):
    monkeypatch.setattr(probing, "probe", lambda index, timeout: (seen(index, "GPU-fake-0"), None))
    doctor.warn_failed_checks(two_gpus())
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["warning: GPU 1 (GPU-fake-1) failed the uuid check: in the pinned process torch says CUDA device 0 "
                     "is fake-0, NVML's GPU 1 is fake-1; in the pinned process NVML by PCI bus id says CUDA device 0 is "
                     "fake-0, NVML's GPU 1 is fake-1 (`pcs-ray doctor` lists every check)"]
    monkeypatch.setattr(probing, "probe", lambda index, timeout: pytest.fail("logical GPUs are not probed"))
    doctor.warn_failed_checks(NodeInventory("node0", [GPUInfo(0, "GPU-sim-0")], source="cluster-spec"))
    assert capsys.readouterr().err == ""


def test_node_resources_registers_a_node_that_fails_a_check_and_warns(capsys, monkeypatch, two_gpu_node):
    monkeypatch.setattr("pcs_ray.cluster.discovery.local_node", lambda *a, **k: two_gpus())
    assert cli.run(["node-resources", "--head"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("--head --num-gpus=2 ") and '"box_gpu1":1' in out
    assert err.startswith("warning: GPU 1 (GPU-fake-1) failed the uuid check:") and len(err.splitlines()) == 1
