"""The across-nodes fallback (``Spread``) reads one GPU at a time only on the last node it takes from, and the
per-node free masks are read from the free mask packed into bytes; both must give what the plain rules give."""

from __future__ import annotations

import numpy as np
import pytest

from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.jobs.state import JobState
from pcs_ray.placement.candidates import Spread
from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.placement.mapa import MAPA_PRESERVE
from pcs_ray.placement.plugin import Context


def _spread_rule(facts: ClusterFacts, free: np.ndarray, n: int, home: tuple[int, ...]) -> list[int]:
    """The rule as written: nodes with the most free GPUs first (ties: lowest node); from each, as many as are
    still needed, its lowest free ids, the job's own first when the node has more free GPUs than it gives."""
    per_node = [int(free[facts.node == k].sum()) for k in range(facts.num_nodes)]
    out, need = [], n
    for node in sorted(range(facts.num_nodes), key=lambda k: (-per_node[k], k)):
        take = min(need, per_node[node])
        if take <= 0:
            break
        ids = [g for g in np.flatnonzero(free).tolist() if facts.node[g] == node]
        if len(ids) > take:
            ids = [g for g in ids if g in home] + [g for g in ids if g not in home]
        out += ids[:take]
        need -= take
        if not need:
            break
    return out


def _mixed(sizes: list[int]) -> ClusterSpec:
    """Nodes of these sizes, in order."""
    return ClusterSpec(nodes=[NodeSpec(name=f"node{k}", gpus=[GPUSpec(index=i, uuid=f"GPU-{k}-{i}") for i in range(size)])
                              for k, size in enumerate(sizes)])


CLUSTERS = {
    "8-gpu nodes": ClusterSpec.homogeneous(800, 8),
    "16-gpu nodes": ClusterSpec.homogeneous(480, 16),
    "a smaller last node": ClusterSpec.homogeneous(203, 8),
    "6-gpu nodes": ClusterSpec.homogeneous(120, 6),
    "24-gpu nodes": ClusterSpec.homogeneous(480, 24),
    "32-gpu nodes": ClusterSpec.homogeneous(640, 32),
    "mixed sizes": _mixed([8, 2, 4, 8, 1, 8, 3] * 12),
}


@pytest.mark.parametrize("name", list(CLUSTERS))
def test_spread_gives_the_rule_on_random_free_gpus(name):
    cluster = CLUSTERS[name]
    facts = ClusterFacts(cluster)
    rng = np.random.default_rng(len(name))
    num = facts.num_gpus
    for trial in range(200):
        free = rng.random(num) < rng.choice([0.005, 0.05, 0.3, 0.9])
        if not free.any():
            continue
        n = int(rng.integers(1, min(int(free.sum()), 3 * facts.gpus_per_node) + 1))
        # the job's own GPUs: some free (it just gave them back), some taken since
        mine = rng.choice(np.flatnonzero(free), size=int(rng.integers(0, min(int(free.sum()), n) + 1)), replace=False)
        taken = rng.choice(num, size=int(rng.integers(0, 3)), replace=False)
        home = tuple(dict.fromkeys(int(g) for g in [*mine.tolist(), *taken.tolist()]))
        job = JobState.new(JobSpec(trial, 0.0, 1.0, n, linear_speedup(n)), 0.0)
        ctx = Context(MAPA_PRESERVE, facts, job, n, free, home)
        (batch,) = Spread().candidates(ctx)
        assert batch.across and batch.gpus.shape == (1, n)
        assert batch.gpus[0].tolist() == _spread_rule(facts, free, n, home), (name, trial)


@pytest.mark.parametrize("name", list(CLUSTERS))
def test_free_masks_per_node_are_the_plain_counts_and_bits(name):
    facts = ClusterFacts(CLUSTERS[name])
    assert facts.byte_nodes == (name in ("8-gpu nodes", "16-gpu nodes", "32-gpu nodes"))
    rng = np.random.default_rng(7)
    for p in (0.0, 0.02, 0.5, 1.0):
        free = rng.random(facts.num_gpus) < p
        counts = [int(free[facts.node == k].sum()) for k in range(facts.num_nodes)]
        bits = [sum(1 << int(facts.local[g]) for g in np.flatnonzero(free & (facts.node == k)))
                for k in range(facts.num_nodes)]
        per_node, masks = facts.free_per_node(free), facts.free_bits(free)
        assert per_node.dtype == np.int64 and masks.dtype == np.int64
        assert per_node.tolist() == counts
        assert masks.tolist() == bits
