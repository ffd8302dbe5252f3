"""Placement interface, variability profiles and binning, PM-First and PAL (exact expectations)."""

from __future__ import annotations

import numpy as np
import pytest

from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.placement import PLACEMENTS, PlacementError, create_placement
from pcs_ray.placement.pal import lv_traversal
from pcs_ray.variability.profiles import ProfileError, apply_profile, bin_scores, load_profile
from pcs_ray.jobs.state import Snapshot
from builders import holding


def spec_with_scores(scores: list[list[float]], cls: str = "A", penalty: float = 1.0) -> ClusterSpec:
    """Nodes of GPUs with the given ``cls`` scores."""
    nodes = [
        NodeSpec(name=f"n{k}", gpus=[GPUSpec(index=i, uuid=f"g{k}-{i}", scores={cls: s}) for i, s in enumerate(row)])
        for k, row in enumerate(scores)
    ]
    return ClusterSpec(nodes=nodes, locality_penalty=penalty)


def place(p, jobs, changed=None):
    alloc = {j.spec.job_id: j.alloc for j in jobs if j.alloc}
    return p.place(Snapshot(0.0, p.num_gpus, jobs), jobs if changed is None else changed, alloc)


# -- interface -----------------------------------------------------------------------


def test_registry_builds_every_placement_and_rejects_unknown_names():
    cluster = ClusterSpec.homogeneous(8, 4)
    for name in PLACEMENTS:
        p = create_placement(name, cluster)
        assert p.name == name and p.describe()["placement"] == name
    with pytest.raises(ValueError, match="valid placements: packed-sticky"):
        create_placement("best", cluster)


def test_packed_sticky_packs_and_keeps_jobs_where_they_are():
    p = create_placement("packed-sticky", ClusterSpec.homogeneous(8, 4, locality_penalty=1.5))
    a, b = holding(1, 3), holding(2, 2)
    place(p, [a, b])
    assert a.gpus == (0, 1, 2) and b.gpus == (4, 5)  # b does not fit beside a: the next node
    c = holding(3, 1)
    touched = place(p, [a, b, c], changed=[c])
    assert touched == [c] and c.gpus == (3,)  # best fit: the fullest node that still fits
    assert a.gpus == (0, 1, 2) and b.gpus == (4, 5)
    d = holding(4, 2)
    place(p, [a, b, c, d], changed=[d])
    assert d.gpus == (6, 7)
    p.release(a)
    e = holding(5, 3)
    place(p, [b, c, d, e], changed=[e])
    assert e.gpus == (0, 1, 2)
    assert p.assignment() == {2: (4, 5), 3: (3,), 4: (6, 7), 5: (0, 1, 2)}


def test_jobs_spread_over_nodes_pay_the_locality_penalty_on_raw_scores():
    cluster = spec_with_scores([[1.0, 1.2], [1.4, 1.0]], penalty=1.5)
    p = create_placement("packed-sticky", cluster)
    a = holding(1, 3)
    place(p, [a])
    assert a.gpus == (0, 1, 2)
    assert a.slowdown == pytest.approx(1.4 * 1.5)


def test_preempted_job_frees_its_gpus_and_fork_is_independent():
    p = create_placement("packed-sticky", ClusterSpec.homogeneous(4, 4))
    a, b = holding(1, 2), holding(2, 2)
    place(p, [a, b])
    other = p.fork()
    a.alloc = 0
    touched = p.place(Snapshot(1.0, 4, [a, b]), [a], {2: 2})
    assert a in touched and a.gpus == () and a.slowdown == 1.0
    assert p.assignment() == {2: (2, 3)}
    assert other.assignment() == {1: (0, 1), 2: (2, 3)}


def test_a_placement_that_breaks_its_contract_is_caught():
    p = create_placement("packed-sticky", ClusterSpec.homogeneous(2, 2))
    p.select = lambda job, n, free, home: np.array([0, 0])
    with pytest.raises(PlacementError, match="got"):
        place(p, [holding(1, 2)])


# -- profiles and binning -------------------------------------------------------------


def test_longhorn_profile_is_normalised_to_the_median_per_class():
    prof = load_profile("longhorn")
    assert set(prof.scores) == {"A", "B", "C", "D"}
    for values in prof.scores.values():
        assert np.median(values) == pytest.approx(1.0)
    assert prof.scores["A"].max() > 3.5  # the paper's 3.5x slowest ResNet-50 run


def test_sampling_is_seeded_and_without_repetition():
    prof = load_profile("longhorn")
    a = prof.sample(64, seed=3)["A"]
    assert np.array_equal(a, prof.sample(64, seed=3)["A"])
    assert not np.array_equal(a, prof.sample(64, seed=4)["A"])
    rows = [int(np.flatnonzero(prof.scores["A"] == v)[0]) for v in a]  # values are distinct measurements
    assert len(set(prof.scores["A"][rows])) == len(set(a)) == len(np.unique(a))
    # A ready per-GPU profile keeps each GPU's classes together.
    gpu32 = load_profile("32gpu")
    drawn = gpu32.sample(32, seed=1)
    pairs = {(float(x), float(y)) for x, y in zip(gpu32.scores["A"], gpu32.scores["D"])}
    assert {(float(x), float(y)) for x, y in zip(drawn["A"], drawn["D"])} == pairs


def test_apply_profile_sets_every_gpu_score():
    cluster = apply_profile(ClusterSpec.homogeneous(8, 4), load_profile("frontera"), seed=2)
    assert all(set(cluster.gpu(i).scores) == {"A", "B", "C", "D"} for i in range(8))
    with pytest.raises(ProfileError, match="unknown profile"):
        load_profile("nowhere")


def test_binning_finds_the_clusters_and_keeps_outliers():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0.9, 0.005, 40), rng.normal(1.0, 0.005, 40), rng.normal(1.2, 0.005, 40),
                             [3.5]])
    binned = bin_scores(values)
    assert binned[-1] == 3.5  # a >3 sigma outlier keeps its own score
    centres = np.unique(binned[:-1])
    assert len(centres) == 3
    assert centres == pytest.approx([values[:40].mean(), values[40:80].mean(), values[80:120].mean()])
    assert bin_scores(np.array([1.0, 1.0, 2.0])).tolist() == [1.0, 1.0, 2.0]  # too few values to cluster


# -- PAL and PM-First -----------------------------------------------------------------


def test_lv_traversal_of_the_papers_four_bin_example():
    order = lv_traversal([0.89, 0.94, 1.06, 2.55], 1.5)
    pairs = [(l, v) for l, v, _ in order]
    # The paper lists (1,0.89) (1,0.94) (1,1.06) (1.5,1.34) (1.5,1.41) (1.5,1.59) (1.5,3.88):
    assert pairs[:6] == [(1.0, 0.89), (1.0, 0.94), (1.0, 1.06), (1.5, 0.89), (1.5, 0.94), (1.5, 1.06)]
    assert [p for _, _, p in order[:6]] == pytest.approx([0.89, 0.94, 1.06, 1.335, 1.41, 1.59])  # 1.335 -> "1.34"
    # Its list leaves out (1, 2.55), which sorts before the last entry, and prints 3.88 for 1.5 x 2.55.
    assert pairs[6:] == [(1.0, 2.55), (1.5, 2.55)]
    assert order[7][2] == pytest.approx(3.825)


def test_pm_first_gives_class_a_the_best_gpus_without_reordering_the_cut():
    cluster = ClusterSpec(nodes=[NodeSpec(name="n0", gpus=[
        GPUSpec(index=i, uuid=f"g{i}", scores={"A": a, "C": c})
        for i, (a, c) in enumerate([(1.3, 1.0), (0.9, 1.0), (1.1, 1.0), (1.0, 1.0)])])])
    p = create_placement("pm-first", cluster, binned={"A": np.array([1.3, 0.9, 1.1, 1.0]), "C": np.ones(4)})
    c, a = holding(1, 2, job_class="C"), holding(2, 1, job_class="A")
    place(p, [c, a])
    assert a.gpus == (1,)  # the best A score, though the class C job is first in the queue
    assert c.gpus == (0, 2)
    assert a.slowdown == 0.9 and c.slowdown == 1.0


def test_pal_packs_unless_the_node_is_much_worse_than_spreading():
    # Two nodes of two GPUs; a 2-GPU job, L = 1.5.
    within = spec_with_scores([[0.89, 1.06], [0.89, 2.55]], penalty=1.5)
    p = create_placement("pal", within, binned={"A": np.array([0.89, 1.06, 0.89, 2.55])})
    j = holding(1, 2)
    place(p, [j])
    assert j.gpus == (0, 1)  # (1, 1.06) comes before (1.5, 0.89 x 1.5 = 1.34)
    across = spec_with_scores([[0.89, 2.55], [0.89, 2.55]], penalty=1.5)
    p = create_placement("pal", across, binned={"A": np.array([0.89, 2.55, 0.89, 2.55])})
    j = holding(1, 2)
    place(p, [j])
    assert j.gpus == (0, 2)  # (1.5, 1.34) comes before (1, 2.55)
    assert j.slowdown == pytest.approx(0.89 * 1.5)


def _reference_lv(scores, node, free, n, penalty):
    """The literal traversal, written out: every (within/across, V) entry by increasing
    L x V (within first on ties); the first with a feasible allocation wins."""
    values = np.unique(scores[free])
    entries = sorted([(v, 0, v, True) for v in values] + [(v * penalty, 1, v, False) for v in values])
    for _, _, v, within in entries:
        ok = free & (scores <= v + 1e-12)
        if within:
            if np.bincount(node[ok], minlength=node.max() + 1).max(initial=0) >= n:
                return within, v
        elif ok.sum() >= n:
            return within, v
    raise AssertionError("nothing feasible")


@pytest.mark.parametrize("seed", range(40))
def test_pal_selection_equals_the_literal_matrix_traversal(seed):
    rng = np.random.default_rng(seed)
    nodes, per = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    bins = np.round(rng.choice([0.89, 0.94, 1.06, 1.3, 2.55], size=nodes * per), 2)
    penalty = float(rng.choice([1.0, 1.2, 1.5, 1.7, 3.0]))
    cluster = spec_with_scores(bins.reshape(nodes, per).tolist(), penalty=penalty)
    p = create_placement("pal", cluster, binned={"A": bins})
    free = rng.random(nodes * per) < 0.7
    n = int(rng.integers(2, per + 1))
    if free.sum() < n:
        free[:] = True
    within, v = _reference_lv(bins, p.node, free, n, penalty)
    chosen = p.select(holding(1, n), n, free, ())
    assert free[chosen].all() and len(set(chosen.tolist())) == n
    assert bins[chosen].max() == pytest.approx(v)
    if within or penalty > 1.0:  # with L = 1 an across entry may land on one node by chance
        assert p.spans(list(chosen)) == (not within)


def test_adopting_running_jobs_after_a_restart():
    cluster = spec_with_scores([[1.0, 1.3], [1.0, 1.0]], penalty=2.0)
    p = create_placement("pal", cluster)
    a = holding(1, 2)
    a.gpus = (1, 2)
    p.adopt(a)
    assert p.assignment() == {1: (1, 2)} and a.slowdown == pytest.approx(1.3 * 2.0)
    b = holding(2, 2)
    with pytest.raises(PlacementError, match="cannot adopt"):
        b.gpus = (2, 3)
        p.adopt(b)
    b.gpus = ()
    touched = place(p, [a, b], changed=[b])
    # PAL is non-sticky: the adopted job moves to the node of nominal GPUs, the new one takes the rest.
    assert a.gpus == (2, 3) and b.gpus == (0, 1) and a in touched and a.slowdown == 1.0
    sticky = create_placement("packed-sticky", cluster)
    a.gpus = (1, 2)
    sticky.adopt(a)
    b.gpus = ()
    assert place(sticky, [a, b], changed=[b]) == [b]
    assert a.gpus == (1, 2) and set(b.gpus) == {0, 3}


def test_sized_order_hands_the_worst_gpu_to_the_smallest_job_within_a_class():
    """A synchronous job runs at its slowest GPU's pace: with every GPU in use, PAL's order (the policy's
    within a class) leaves the 3x GPU to whichever job comes last, here the 7-GPU one; ``-sized`` places
    larger jobs first so the 1-GPU job takes it. The class order still comes first."""
    spec = spec_with_scores([[3.0, 1.0, 1.02, 1.04], [1.01, 1.03, 1.05, 1.06]])
    for name, small, big in (("combined", 1.0, 3.0), ("combined-sized", 3.0, 1.06), ("energy-sized", 3.0, 1.06)):
        p = create_placement(name, spec)
        a, b = holding(1, 1), holding(2, 7)
        place(p, [a, b])
        assert (a.slowdown, b.slowdown) == (small, big), name
        assert sorted(a.gpus + b.gpus) == list(range(8))
    p = create_placement("combined-sized", spec)
    a, b = holding(1, 1, job_class="A"), holding(2, 7, job_class="B")  # B has no scores: every GPU is 1.0 to it
    place(p, [b, a])
    assert 0 not in a.gpus and (a.slowdown, b.slowdown) == (1.0, 1.0)
    assert PLACEMENTS["combined-sized"].size_order and not PLACEMENTS["combined"].size_order
