"""Cluster discovery: NVML through a fake pynvml, the declared-spec fallback, ray start arguments, Ray's view."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pcs_ray.cluster import ClusterSpec, ClusterSpecError
from pcs_ray.cluster.discovery import cluster_from_ray_nodes, local_node, nvml_inventory, ray_start_args
from pcs_ray.cluster.topology import parse_topo
from pcs_ray.data import data_dir
from fake_pynvml import FakeNVML


def test_nvml_inventory_reads_uuids_power_clocks_and_links():
    nvml = FakeNVML()
    node = nvml_inventory("gpu-box", nvml)
    assert [g.uuid for g in node.gpus] == [f"GPU-fake-{i}" for i in range(4)]
    assert node.gpus[3].power_limit_w == 250.0 and node.gpus[0].max_sm_clock_mhz == 1530
    assert node.gpus[2].sm_clock_mhz == 1382 and node.gpus[0].name == "Fake V100"
    assert node.topology.links == [
        ["X", "NV2", "SYS", "SYS"],
        ["NV2", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "NV1"],
        ["SYS", "SYS", "NV1", "X"],
    ]
    assert nvml.shut and node.source == "nvml"
    assert node.node_spec().gpus[1].uuid == "GPU-fake-1"


class TopoNVML(FakeNVML):
    """A fake pynvml whose links are those of a parsed ``nvidia-smi topo -m`` matrix: ``NV#`` as # active
    links to that GPU, PCIe codes as NVML's common-ancestor levels."""

    NVML_NVLINK_MAX_LINKS = 18
    LEVEL = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}

    def __init__(self, matrix):
        super().__init__(count=len(matrix.gpus))
        self.matrix = matrix
        self.LINKS = {i: [j for j, code in enumerate(row) if code.startswith("NV") for _ in range(int(code[2:]))]
                      for i, row in enumerate(matrix.links)}

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= len(self.LINKS[h]):
            raise self.NVMLError("not supported")
        return self.NVML_FEATURE_ENABLED

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.LEVEL[self.matrix.links[a][b]]


class SwitchNVML(TopoNVML):
    """A fake pynvml of an NVSwitch machine: each GPU has as many NVLinks as the ``NV#`` of its row, and every
    one ends at a switch (NVML gives the switch's PCI bus, on no GPU, and says its remote end is a switch).
    ``peers(a, b)``: whether two GPUs reach each other over NVLink (``nvmlDeviceGetP2PStatus``)."""

    SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH

    def __init__(self, matrix, peers=lambda a, b: True):
        super().__init__(matrix)
        self.own = {i: max(int(code[2:]) for code in row if code.startswith("NV")) for i, row in enumerate(matrix.links)}
        self.peers = peers

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= self.own[h]:
            raise self.NVMLError("not supported")
        return self.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=f"00000000:8{link % 6}:00.0".encode())  # one of six switches

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self.SWITCH

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        return 0 if index == 2 and self.peers(a, b) else 4  # NVML_P2P_STATUS_OK, else not supported

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 40  # NODE


@pytest.mark.parametrize("name", ["dgx1-v100", "dgx1-p100", "summit-node", "pcie-8gpu", "a100-pcie-4gpu-bridged",
                                  "dgx2", "dgx-a100", "hgx-h100"])
def test_nvml_matrix_matches_the_topo_file_format(name):
    """NVML read as ``nvidia-smi topo -m`` would show it gives the file's matrix, code for code: point-to-point
    NVLink and PCIe machines, and NVSwitch machines, whose links all end at switches."""
    parsed = parse_topo((data_dir() / "topology" / f"{name}.topo").read_text())
    fake = SwitchNVML(parsed) if name in ("dgx2", "dgx-a100", "hgx-h100") else TopoNVML(parsed)
    built = nvml_inventory("x", fake).topology
    assert built.gpus == parsed.gpus and built.links == parsed.links


def test_gpus_on_switches_that_do_not_reach_each_other_are_linked_by_pcie():
    """Two NVSwitch fabrics in one node: a pair across them is no NVLink pair, whatever their switch links."""
    parsed = parse_topo((data_dir() / "topology" / "dgx-a100.topo").read_text())
    links = nvml_inventory("x", SwitchNVML(parsed, peers=lambda a, b: (a < 4) == (b < 4))).topology.links
    assert {links[0][j] for j in range(1, 4)} == {links[4][j] for j in range(5, 8)} == {"NV12"}
    assert {links[i][j] for i in range(4) for j in range(4, 8)} == {"NODE"}


def test_no_nvml_falls_back_to_the_declared_spec(tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text("nodes:\n  - {name: n1, gpus: 2}\n  - {name: n2, gpus: 4}\n")
    node = local_node("n2", spec, nvml=FakeNVML(fail_init=True))
    assert node.source == "cluster-spec" and [g.index for g in node.gpus] == [0, 1, 2, 3]
    with pytest.raises(ClusterSpecError, match="no node named 'n3'"):
        local_node("n3", spec, nvml=FakeNVML(fail_init=True))
    with pytest.raises(ClusterSpecError, match="no GPUs found by NVML"):
        local_node("n3", None, nvml=FakeNVML(fail_init=True))
    assert nvml_inventory("x", FakeNVML(count=0)) is None


def test_ray_start_args_register_one_resource_per_gpu():
    node = nvml_inventory("box-1", FakeNVML())
    args = ray_start_args(node, head=True)
    assert args[0] == "--head" and "--num-gpus=4" in args
    resources = json.loads(next(a for a in args if a.startswith("--resources=")).split("=", 1)[1])
    assert resources == {f"box-1_gpu{i}": 1 for i in range(4)}
    labels = next(a for a in args if a.startswith("--labels="))
    assert "pcs-ray/node=box-1" in labels
    assert ray_start_args(node, address="10.0.0.1:6379")[0] == "--address=10.0.0.1:6379"


def test_cluster_from_ray_nodes_keeps_declared_scores():
    nodes = [
        {"Alive": True, "Resources": {"CPU": 8, "GPU": 2, "a_gpu0": 1, "a_gpu1": 1}},
        {"Alive": True, "Resources": {"b_gpu0": 1, "node:10.0.0.2": 1}},
        {"Alive": False, "Resources": {"c_gpu0": 1}},
    ]
    base = ClusterSpec.model_validate({
        "locality_penalty": 1.5,
        "nodes": [{"name": "a", "gpus": [{"index": 0, "uuid": "U0", "scores": {"A": 1.3}}, {"index": 1, "uuid": "U1"}]}],
    })
    spec = cluster_from_ray_nodes(nodes, base)
    assert [n.name for n in spec.nodes] == ["a", "b"] and spec.num_gpus == 3
    assert spec.score(0, "A") == 1.3 and spec.locality_penalty == 1.5
    with pytest.raises(ClusterSpecError, match="no per-GPU resources"):
        cluster_from_ray_nodes([{"Alive": True, "Resources": {"CPU": 1}}])
