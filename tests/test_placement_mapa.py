"""MAPA and the combined placement on the DGX-1 V100 matrix: exact allocations from the link facts,
the effective-bandwidth regression's check values, and the communication slowdown."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.data import data_dir
from pcs_ray.placement import create_placement
from pcs_ray.placement.bandwidth import CommModel, EffBWRegression, pattern_edges, subset_table
from pcs_ray.cluster.topology import read_topo
from pcs_ray.jobs.state import Snapshot
from builders import holding

DATA = data_dir()
DGX1 = read_topo(DATA / "topology" / "dgx1-v100.topo")
EFFBW_JSON = DATA / "mapa" / "effbw-dgx1v.json"
ONE_NODE = ClusterSpec.homogeneous(8, 8)


def pick(name: str, free: set[int], n: int, sensitive: bool, cluster=ONE_NODE, **kw) -> set[int]:
    p = create_placement(name, cluster, topology=DGX1, **kw)
    mask = np.zeros(cluster.num_gpus, dtype=bool)
    mask[list(free)] = True
    return set(p.select(holding(1, n, bw_sensitive=sensitive), n, mask, ()).tolist())


# -- the regression -------------------------------------------------------------------


def test_regression_reproduces_the_check_values():
    raw = json.loads(EFFBW_JSON.read_text())
    reg = EffBWRegression.from_json(EFFBW_JSON)
    assert raw["check_values"]
    for key, expected in raw["check_values"].items():
        x, y, z = (int(v) for v in key.split(","))
        assert float(reg.predict(x, y, z)) == pytest.approx(expected, abs=5e-4)


def test_pattern_graphs():
    assert pattern_edges("ring", 2) == [(0, 1)]
    assert pattern_edges("ring", 4) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert pattern_edges("tree", 4) == [(0, 1), (1, 2), (2, 3)]
    assert len(pattern_edges("all-to-all", 5)) == 10
    with pytest.raises(ValueError, match="pattern"):
        pattern_edges("star", 3)


def test_subset_scores_from_the_link_facts():
    reg = EffBWRegression.from_json(EFFBW_JSON)
    two = subset_table(DGX1, 2, "ring", reg)
    eff = {tuple(m): e for m, e in zip(two.members.tolist(), two.effbw)}
    assert eff[(0, 4)] == pytest.approx(float(reg.predict(1, 0, 0)))  # double NVLink
    assert eff[(0, 1)] == pytest.approx(float(reg.predict(0, 1, 0)))  # single NVLink
    assert eff[(0, 5)] == pytest.approx(float(reg.predict(0, 0, 1)))  # PCIe across sockets
    three = subset_table(DGX1, 3, "ring", reg)
    agg = {tuple(m): a for m, a in zip(three.members.tolist(), three.aggbw)}
    assert agg[(0, 1, 4)] == 87 and agg[(0, 2, 3)] == 125 and three.aggbw.max() == 125  # MAPA section 2.2


# -- MAPA ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mapa-greedy", "mapa-preserve", "combined"])
def test_sensitive_pair_gets_the_double_nvlink(name):
    assert pick(name, {0, 1, 4}, 2, sensitive=True) == {0, 4}
    assert pick(name, {0, 2, 4, 5}, 2, sensitive=True) == {0, 4}


def test_preserve_leaves_the_double_link_free_for_later():
    assert pick("mapa-preserve", {0, 2, 4, 5}, 2, sensitive=False) == {2, 5}
    assert pick("combined", {0, 2, 4, 5}, 2, sensitive=False) == {2, 5}
    # Greedy gives the insensitive job the double link all the same.
    assert pick("mapa-greedy", {0, 2, 4, 5}, 2, sensitive=False) == {0, 4}


def test_baseline_and_topo_aware():
    assert pick("mapa-baseline", {0, 1, 4}, 2, sensitive=True) == {0, 1}
    assert pick("mapa-baseline", set(range(8)), 3, sensitive=True) == {0, 1, 2}
    # Topo-aware: socket 0 has only GPUs 2, 3 free, so a 3-GPU job goes to socket 1.
    assert pick("mapa-topo", {2, 3, 4, 5, 6}, 3, sensitive=True) == {4, 5, 6}
    assert pick("mapa-baseline", {2, 3, 4, 5, 6}, 3, sensitive=True) == {2, 3, 4}


def test_more_cases_from_the_link_facts():
    # A 3-GPU ring on an idle node: the ideal 125 GB/s triangle (two doubles and a single).
    reg = EffBWRegression.from_json(EFFBW_JSON)
    best3 = pick("mapa-greedy", set(range(8)), 3, sensitive=True)
    a, b, c = sorted(best3)
    bws = sorted(DGX1.link(x, y) for x, y in [(a, b), (a, c), (b, c)])
    assert bws == ["NV1", "NV2", "NV2"]
    # Only GPUs 1, 2, 5, 6 free: the 4-ring 1-2-6-5 uses NV2, NV1, NV2, NV2.
    assert pick("mapa-preserve", {1, 2, 5, 6}, 4, sensitive=True) == {1, 2, 5, 6}
    # Free {0, 3, 5, 6}: the only double links are 0-3 and 5-6; a sensitive pair takes one of them.
    assert pick("mapa-preserve", {0, 3, 5, 6}, 2, sensitive=True) in ({0, 3}, {5, 6})
    # A sensitive 3-GPU job among {0, 1, 2, 5}: {0, 1, 2} is NVLink-only (NV1, NV1, NV2), the others use PCIe.
    assert pick("mapa-preserve", {0, 1, 2, 5}, 3, sensitive=True) == {0, 1, 2}
    assert float(reg.predict(1, 2, 0)) > float(reg.predict(1, 1, 1))


def test_mapa_is_sticky_and_returns_gpus_in_rank_order():
    p = create_placement("mapa-greedy", ONE_NODE, topology=DGX1)
    a = holding(1, 4, bw_sensitive=True)
    p.place(Snapshot(0.0, 8, [a]), [a], {1: 4})
    ring = list(a.gpus)
    links = [DGX1.link(ring[i], ring[(i + 1) % 4]) for i in range(4)]
    assert sum(int(code[2:]) for code in links) * 25 == 175  # the best 4-ring: 50 + 50 + 50 + 25
    b = holding(2, 2, bw_sensitive=False)
    p.place(Snapshot(1.0, 8, [a, b]), [b], {1: 4, 2: 2})
    assert list(a.gpus) == ring


# -- communication slowdown and the combined policy ----------------------------------------


def test_comm_model_slowdown():
    model = CommModel([DGX1], comm_fraction=0.5, regression=EffBWRegression.from_json(EFFBW_JSON))
    sens = holding(1, 2, bw_sensitive=True).spec
    assert model.slowdown(sens, 0, [0, 4]) == pytest.approx(1.0)  # the best pair
    expected = 0.5 + 0.5 * float(model.regression.predict(1, 0, 0) / model.regression.predict(0, 0, 1))
    assert model.slowdown(sens, 0, [0, 5]) == pytest.approx(expected)
    assert model.slowdown(holding(2, 2, bw_sensitive=False).spec, 0, [0, 5]) == 1.0


def test_combined_trades_a_slow_gpu_against_a_slow_link():
    # GPU 4 is twice as slow for class A: the double link 0-4 loses to the single link 0-1.
    nodes = [NodeSpec(name="dgx", gpus=[GPUSpec(index=i, uuid=f"g{i}", scores={"A": 2.0 if i == 4 else 1.0})
                                        for i in range(8)])]
    cluster = ClusterSpec(nodes=nodes)
    assert pick("combined", {0, 1, 4}, 2, sensitive=True, cluster=cluster) == {0, 1}
    assert pick("mapa-preserve", {0, 1, 4}, 2, sensitive=True, cluster=cluster) == {0, 4}
    # A class with no variability keeps the double link.
    p = create_placement("combined", cluster, topology=DGX1)
    mask = np.zeros(8, dtype=bool)
    mask[[0, 1, 4]] = True
    assert set(p.select(holding(1, 2, bw_sensitive=True, job_class="C"), 2, mask, ()).tolist()) == {0, 4}


def test_combined_without_topology_is_pal():
    from pcs_ray.variability.profiles import apply_profile, load_profile
    from pcs_ray.policies import build_policy
    from pcs_ray.sim.run import simulate
    from pcs_ray.workloads.traces import read_sia_philly

    jobs = read_sia_philly(DATA / "pal" / "sia-philly" / "workload-3.csv")
    cluster = apply_profile(ClusterSpec.homogeneous(64, 4, 1.7), load_profile("longhorn"), 1)
    pal = simulate(jobs, 64, build_policy("fifo"), placement=create_placement("pal", cluster), predict=False)
    comb = simulate(jobs, 64, build_policy("fifo"), placement=create_placement("combined", cluster), predict=False)
    assert [r.finish for r in pal.records] == [r.finish for r in comb.records]


def test_topology_named_in_the_cluster_spec(tmp_path):
    from pcs_ray.cluster import load_cluster_spec

    (tmp_path / "dgx1.topo").write_text((DATA / "topology" / "dgx1-v100.topo").read_text())
    (tmp_path / "cluster.yaml").write_text("nodes:\n  - {name: a, gpus: 8, topology: dgx1.topo}\n  - {name: b, gpus: 8}\n")
    cluster = load_cluster_spec(tmp_path / "cluster.yaml")
    p = create_placement("mapa-preserve", cluster)
    assert p.topologies[0].links == DGX1.links and p.topologies[1] is None
    free = np.zeros(16, dtype=bool)
    free[[0, 1, 4]] = True
    assert set(p.select(holding(1, 2, bw_sensitive=True), 2, free, ()).tolist()) == {0, 4}
