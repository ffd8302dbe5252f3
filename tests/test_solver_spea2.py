"""SPEA2 on toy problems with known Pareto fronts (ZDT1, Schaffer N.1), and its determinism."""

from __future__ import annotations

import math
import random

import pytest

from pcs_ray.solver.front import hypervolume, pareto_indices
from pcs_ray.solver.spea2 import SPEA2, SearchError


def zdt1(x):
    f1 = x[0]
    g = 1 + 9 * sum(x[1:]) / (len(x) - 1)
    return (f1, g * (1 - math.sqrt(f1 / g)))


def batch(f):
    return lambda genomes: [f(g) for g in genomes]


def test_zdt1_reaches_its_front():
    n = 6
    algo = SPEA2([0.0] * n, [1.0] * n, 2, population_size=40, seed=3)
    state = algo.run(batch(zdt1), generations=120)
    values = [m.values for m in state.archive]
    front = [values[i] for i in pareto_indices(values)]
    # Known front: g = 1, f2 = 1 - sqrt(f1) for f1 in [0, 1].
    gaps = [abs(f2 - (1 - math.sqrt(f1))) for f1, f2 in front]
    assert max(gaps) < 0.05
    assert min(f1 for f1, _ in front) < 0.05 and max(f1 for f1, _ in front) > 0.9
    # Hypervolume of the true front w.r.t. (1.1, 1.1) is 1.21 - 1/3.
    assert hypervolume(front, (1.1, 1.1)) > 0.97 * (1.21 - 1 / 3)


def test_schaffer_front_is_x_between_0_and_2():
    algo = SPEA2([-10.0], [10.0], 2, population_size=20, seed=1)
    state = algo.run(batch(lambda x: (x[0] ** 2, (x[0] - 2) ** 2)), generations=30)
    xs = [m.genes[0] for m in state.archive]
    assert all(-0.01 <= x <= 2.01 for x in xs)
    assert max(xs) - min(xs) > 1.8  # spread along the whole front


def test_same_seed_same_search_and_callers_random_untouched():
    random.seed(99)
    before = random.random()
    random.seed(99)
    runs = [SPEA2([0.0] * 3, [1.0] * 3, 2, 10, seed=5).run(batch(zdt1), 5) for _ in range(2)]
    assert random.random() == before
    assert runs[0].to_json() == runs[1].to_json()
    other = SPEA2([0.0] * 3, [1.0] * 3, 2, 10, seed=6).run(batch(zdt1), 5)
    assert other.to_json() != runs[0].to_json()


def test_resuming_from_a_saved_state_continues_identically():
    algo = SPEA2([0.0] * 3, [1.0] * 3, 2, 10, seed=5)
    full = algo.run(batch(zdt1), 6)
    saved = []
    algo.run(batch(zdt1), 6, on_generation=lambda s: (saved.append(s.to_json()), s.generation == 2)[1])
    from pcs_ray.solver.spea2 import SearchState

    resumed = algo.run(batch(zdt1), 6, state=SearchState.from_json(saved[-1]))
    assert resumed.to_json() == full.to_json()


def test_bad_settings():
    with pytest.raises(SearchError, match="generations must be >= 1"):
        SPEA2([0.0], [1.0], 1, 4).run(batch(lambda x: (x[0],)), 0)
    with pytest.raises(SearchError, match="at least 2"):
        SPEA2([0.0], [1.0], 1, 1)
    with pytest.raises(SearchError, match="lower < upper"):
        SPEA2([1.0], [1.0], 1, 4)


def test_truncation_keeps_the_ends_and_spreads_the_rest():
    from pcs_ray.solver.spea2 import truncate

    front = [(x / 100, 1 - math.sqrt(x / 100)) for x in range(101)]
    keep = truncate(front, 10)
    assert len(keep) == 10 and keep[0] == 0 and keep[-1] == 100
    gaps = [math.dist(front[a], front[b]) for a, b in zip(keep, keep[1:])]
    assert max(gaps) <= 2.5 * min(gaps)  # evenly spread in objective space (a plain prefix would fail)
    assert truncate(front[:5], 10) == [0, 1, 2, 3, 4]


def test_local_moves_make_their_share_of_offspring_and_resume_identically():
    from pcs_ray.solver.spea2 import SearchState

    calls = []

    def nudge(genes, rng):
        calls.append(1)
        out = list(genes)
        out[0] = min(max(out[0] + rng.choice((-0.01, 0.01)), 0.0), 1.0)
        return out

    only_local = SPEA2([0.0] * 3, [1.0] * 3, 2, 10, seed=5, local_move=nudge, local_rate=1.0)
    only_local.run(batch(zdt1), 3)
    assert len(calls) == 3 * 10  # every child of every generation
    calls.clear()
    SPEA2([0.0] * 3, [1.0] * 3, 2, 10, seed=5, local_move=nudge, local_rate=0.0).run(batch(zdt1), 3)
    assert calls == []
    mixed = SPEA2([0.0] * 3, [1.0] * 3, 2, 10, seed=5, local_move=nudge, local_rate=0.5)
    full = mixed.run(batch(zdt1), 6)
    assert 0 < len(calls) < 6 * 10
    saved = []
    mixed.run(batch(zdt1), 6, on_generation=lambda s: (saved.append(s.to_json()), s.generation == 3)[1])
    assert mixed.run(batch(zdt1), 6, state=SearchState.from_json(saved[-1])).to_json() == full.to_json()
    with pytest.raises(SearchError, match="local-move rate"):
        SPEA2([0.0], [1.0], 1, 4, local_rate=1.5)
