"""PM-First's cluster-wide choice (``best_scores``) reads only the head of a class's GPU ranking; it must give
what the rule gives over every free GPU of the cluster."""

from __future__ import annotations

import numpy as np
import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.jobs.state import JobState
from pcs_ray.placement.candidates import best_scores
from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.placement.pal import PAL
from pcs_ray.placement.plugin import Context


def _rule(scores: np.ndarray, free: np.ndarray, n: int, home: tuple[int, ...]) -> list[int]:
    """The rule as written: free GPUs by binned score then id; among those tied at the n-th, the job's own first."""
    ranked = sorted(np.flatnonzero(free).tolist(), key=lambda g: (scores[g], g))
    if len(ranked) <= n or not home:
        return ranked[:n]
    thr = scores[ranked[n - 1]]
    below = [g for g in ranked if scores[g] < thr]
    tied = [g for g in ranked if scores[g] == thr]
    tied = [g for g in tied if g in home] + [g for g in tied if g not in home]
    return (below + tied)[:n]


@pytest.mark.parametrize("num_gpus", [16, 600, 4000])
def test_best_scores_gives_the_rule_over_every_free_gpu(num_gpus):
    rng = np.random.default_rng(num_gpus)
    cluster = ClusterSpec.homogeneous(num_gpus, 8)
    for trial in range(150):
        bins = np.round(rng.random(int(rng.integers(1, 5))) + 0.5, 3)  # few bins: long runs of ties
        scores = rng.choice(bins, size=num_gpus)
        facts = ClusterFacts(cluster, binned={"A": scores})
        free = rng.random(num_gpus) < rng.choice([0.01, 0.1, 0.6])  # a busy cluster makes it read further
        if not free.any():
            continue
        n = int(rng.integers(1, min(int(free.sum()), 24) + 1))
        # the job's own GPUs: mostly free ones near the n-th best (it just gave them back), some taken since
        near = _rule(scores, free, 2 * n + 8, ())
        own = rng.choice(near, size=int(rng.integers(0, min(len(near), n + 4) + 1)), replace=False).tolist()
        taken = rng.choice(num_gpus, size=int(rng.integers(0, 3)), replace=False).tolist()
        home = tuple(dict.fromkeys(int(g) for g in own + taken))
        job = JobState.new(JobSpec(trial, 0.0, 1.0, n, linear_speedup(n)), 0.0)
        ctx = Context(PAL, facts, job, n, free, home)
        assert best_scores(ctx, free).tolist() == _rule(scores, free, n, home)


def test_member_is_isin_for_every_shape_and_range():
    """``member`` picks a broadcast compare, a set or isin's table by size; each gives ``np.isin``'s answer."""
    from pcs_ray.placement.plugin import member

    rng = np.random.default_rng(3)
    cases = 0
    for values_size, among_size, top in [(8, 4, 16), (64, 64, 8000), (300, 40, 64000), (2000, 8, 1000), (40, 90, 200)]:
        for _ in range(20):
            values = rng.integers(0, top, values_size)
            among = tuple(rng.integers(0, top, among_size).tolist())
            assert member(values, among).tolist() == np.isin(values, among).tolist()
            grid = values[: values_size // 4 * 4].reshape(-1, 4)  # a batch of GPU sets, as scores compare them
            assert member(grid, among).tolist() == np.isin(grid, among).tolist()
            cases += 1
    floats = rng.random(100)
    assert member(floats, floats[::7]).tolist() == np.isin(floats, floats[::7]).tolist()
    assert cases == 100
