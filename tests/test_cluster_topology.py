"""The `nvidia-smi topo -m` parser and the hardware graph, on every fixture and on malformed input."""

from __future__ import annotations

import pytest

from pcs_ray.data import data_dir
from pcs_ray.cluster.topology import TopologyError, hardware_graph, link_bandwidth, nvlinks, parse_topo, read_topo

TOPO = data_dir() / "topology"
FIXTURES = {  # file -> (GPUs, sockets)
    "dgx1-v100.topo": (8, [0, 0, 0, 0, 1, 1, 1, 1]),
    "dgx1-p100.topo": (8, [0, 0, 0, 0, 1, 1, 1, 1]),
    "summit-node.topo": (6, [0, 0, 0, 8, 8, 8]),
    "dgx2.topo": (16, [0] * 8 + [1] * 8),
    "dgx-a100.topo": (8, [3] * 4 + [7] * 4),
    "hgx-h100.topo": (8, [0] * 4 + [1] * 4),
    "pcie-8gpu.topo": (8, [0] * 4 + [1] * 4),
    "a100-pcie-4gpu-bridged.topo": (4, [0, 0, 1, 1]),
}


def test_every_fixture_is_listed():
    assert sorted(p.name for p in TOPO.glob("*.topo")) == sorted(FIXTURES)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_parser_reads_every_fixture(name):
    size, sockets = FIXTURES[name]
    m = read_topo(TOPO / name)
    assert m.gpus == [f"GPU{i}" for i in range(size)]
    assert m.sockets() == sockets
    for i in range(size):
        assert m.link(i, i) == "X"
        for j in range(size):
            assert m.link(i, j) == m.link(j, i)
    g = hardware_graph(m)
    assert g.number_of_nodes() == size
    assert g.number_of_edges() == size * (size - 1) // 2  # complete: every pair talks, as in MAPA


def test_dgx1_v100_link_facts():
    m = read_topo(TOPO / "dgx1-v100.topo")
    g = hardware_graph(m)
    doubles = sorted((i, j) for i, j, d in g.edges(data=True) if d["nvlinks"] == 2)
    singles = sorted((i, j) for i, j, d in g.edges(data=True) if d["nvlinks"] == 1)
    assert doubles == [(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)]
    assert len(singles) == 8
    for v in g.nodes:  # six NVLinks per V100: two doubles and two singles
        assert sum(d["nvlinks"] for _, _, d in g.edges(v, data=True)) == 6
    assert g[0][4]["bw"] == 50 and g[0][1]["bw"] == 25 and g[0][5]["bw"] == 12 and g[0][5]["link"] == "SYS"
    # MAPA's examples (its GPUs are numbered from 1): {1,2,5} -> 87 GB/s, {1,3,4} -> 125 GB/s
    assert sum(g[a][b]["bw"] for a, b in [(0, 1), (0, 4), (1, 4)]) == 87
    assert sum(g[a][b]["bw"] for a, b in [(0, 2), (0, 3), (2, 3)]) == 125


def test_link_codes():
    assert nvlinks("NV18") == 18 and nvlinks("SYS") == 0 and nvlinks("PIX") == 0
    assert link_bandwidth("NV12") == 300 and link_bandwidth("PXB") == 12


def test_space_separated_with_nic_rows_and_columns():
    text = """        GPU0    GPU1    GPU2    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV4     SYS     PIX     0-15    0               N/A
GPU1    NV4      X      SYS     PIX     0-15    0               N/A
GPU2    SYS     SYS      X      SYS     16-31   1               N/A
NIC0    PIX     PIX     SYS      X

Legend:

  X    = Self
"""
    m = parse_topo(text)
    assert m.gpus == ["GPU0", "GPU1", "GPU2"]
    assert m.links == [["X", "NV4", "SYS"], ["NV4", "X", "SYS"], ["SYS", "SYS", "X"]]
    assert m.numa == [0, 0, 1]


@pytest.mark.parametrize("text, message", [
    ("", "no 'nvidia-smi topo -m' matrix"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV2\t X \n", "asymmetric"),
    ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "unknown link code"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV1\n", "no row for GPU1"),
    ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV1\t X \n", "cells"),
])
def test_malformed_matrices_are_one_line_value_errors(text, message):
    with pytest.raises(TopologyError, match=message) as e:
        parse_topo(text)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)
