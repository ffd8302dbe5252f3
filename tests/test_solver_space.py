"""Decoding WFQ(T, W, zeta_min, delta) genomes into concrete configurations, on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from pcs_ray.solver.objectives import ObjectiveError, parse_objective, parse_objectives
from pcs_ray.solver.space import SearchSpace, SpaceError, config_key, max_running_c2
from builders import job_spec


SIZES = (1.0, 2.0, 10.0, 11.0)


def space(sizes=SIZES, speedups=None, search_delta=True) -> SearchSpace:
    jobs = [job_spec(i, submit=i, service=s, max_gpus=2, speedup=speedups[i] if speedups else None)
            for i, s in enumerate(sizes)]
    return SearchSpace.from_samples([jobs], search_delta)


def test_c2_max_is_the_largest_running_c2():
    # prefixes of 1, 2, 10, 11: C^2 = 0, 1/9, (35 - 169/9) / (169/9) = 146/169, 20.5/36
    assert max_running_c2(SIZES) == pytest.approx(146 / 169)
    s = space()
    assert s.upper[0] == pytest.approx(146 / 169)
    assert s.lower == (1e-3, -3.0, 0.0, 0.01) and s.upper[1:] == (3.0, 1.0, 0.9)


@pytest.mark.parametrize(
    "T, thresholds",
    [
        # {1,2}: C^2 = 1/9 > 0.1, cut at 1; {2,10}: 4/9 > 0.1, cut at 2; {10,11}: 1/441 stays
        (0.1, (1.0, 2.0, math.inf)),
        # {1,2} 1/9 ok; {1,2,10} 146/169 > 0.5, cut at 2; {10,11} stays
        (0.5, (2.0, math.inf)),
        # the top of the range is one queue (FIFO)
        (146 / 169, (math.inf,)),
    ],
)
def test_thresholds_from_T(T, thresholds):
    assert space().decode([T, 0.0, 0.0, 0.5]).thresholds == thresholds


def test_weights_are_exp_minus_i_W_normalised_and_quantised():
    config = space().decode([0.1, 1.004, 0.0, 0.5])  # three queues, W quantised to 1.00
    total = 1 + math.exp(-1) + math.exp(-2)
    assert config.normalised_weights == pytest.approx((1 / total, math.exp(-1) / total, math.exp(-2) / total))
    negative = space().decode([0.5, -0.5, 0.0, 0.5])  # two queues, larger jobs favoured
    assert negative.normalised_weights == pytest.approx((1 / (1 + math.exp(0.5)), math.exp(0.5) / (1 + math.exp(0.5))))


def test_one_queue_ignores_W_and_genes_are_clipped():
    a = space().decode([5.0, 2.7, 0.0, 0.5])  # T above the range: clipped to C2max, one queue
    b = space().decode([146 / 169, -1.3, 0.0, 0.5])
    assert a.thresholds == (math.inf,) and a.weights == (1.0,)
    assert config_key(a) == config_key(b)


def test_zeta_below_every_efficiency_is_no_cap():
    linear = space().decode([0.5, 1.0, 0.7, 0.33])
    assert (linear.zeta_min, linear.delta) == (0.0, 0.0)  # linear jobs: efficiency 1 everywhere
    sub = [(0, 1, 1.5, 1.8)] * 4  # efficiencies 1, 0.75, 0.6
    s = space(speedups=sub)
    assert (s.decode([0.5, 1.0, 0.55, 0.33]).zeta_min, s.decode([0.5, 1.0, 0.55, 0.33]).delta) == (0.0, 0.0)
    capped = s.decode([0.5, 1.0, 0.7049, 0.1234])
    assert (capped.zeta_min, capped.delta) == (0.7, 0.12)


def test_without_delta_the_genome_has_three_genes():
    s = space(speedups=[(0, 1, 1.5, 1.8)] * 4, search_delta=False)
    assert s.dimensions == 3 and len(s.lower) == 3
    assert s.decode([0.5, 1.0, 0.7]).delta == 0.0
    with pytest.raises(SpaceError, match="expected 3 genes"):
        s.decode([0.5, 1.0, 0.7, 0.1])


def test_equal_behaviour_decodes_to_one_cache_key():
    s = space()
    assert config_key(s.decode([0.12, 1.001, 0.3, 0.2])) == config_key(s.decode([0.15, 0.999, 0.9, 0.8]))
    assert config_key(s.decode([0.12, 1.0, 0.0, 0.2])) != config_key(s.decode([0.12, 1.5, 0.0, 0.2]))


def test_extreme_W_with_many_queues_stays_a_valid_config():
    sizes = [float(2 ** i) for i in range(300)]
    s = space(sizes)
    for W in (-3.0, 3.0):
        config = s.decode([1e-3, W, 0.0, 0.5])
        assert len(config.thresholds) > 250
        assert all(w > 0 and math.isfinite(w) for w in config.normalised_weights)


def test_a_workload_needs_two_jobs_of_different_sizes():
    with pytest.raises(SpaceError, match="at least 2 jobs"):
        space((5.0,))
    with pytest.raises(SpaceError, match="same size"):
        space((5.0, 5.0))


def test_objective_parsing():
    assert parse_objective("jct:avg").label == "jct:avg"
    assert parse_objective("p99_pred_error").label == "pred_err:p99"
    assert parse_objective("avg_jct").label == "jct:avg"
    assert parse_objective("unfairness_p99.0").label == "unfairness:p99"
    assert [o.label for o in parse_objectives([("jct", "avg"), ("pred_err", "p99"), ("pred_err", "avg")])] == [
        "jct:avg", "pred_err:p99", "pred_err:avg"]
    for bad, msg in (("speed:avg", "unknown objective metric"), ("jct:p0", "unknown measure"),
                     ("jct:median", "unknown measure"), ("jct", "METRIC:MEASURE"), ("", "at least one"),
                     ("jct:avg,jct:avg", "twice")):
        with pytest.raises(ObjectiveError, match=msg):
            parse_objectives(bad)


def cuts_space(sizes=SIZES, max_queues=4, search_delta=True) -> SearchSpace:
    jobs = [job_spec(i, submit=i, service=s, max_gpus=2) for i, s in enumerate(sizes)]
    return SearchSpace.from_samples([jobs], search_delta, kind="cuts", max_queues=max_queues)


def test_cuts_reach_every_threshold_vector_the_paper_space_misses():
    # {1, 2, 10} then {11}: the prefix C^2 at 11 (0.57) is below the record at 10 (0.86), so no T ends a queue at 10
    paper = {space().decode([t, 0.0, 0.0, 0.5]).thresholds for t in [1e-3 * 1.01 ** k for k in range(700)]}
    assert (10.0, math.inf) not in paper and (1.0, 2.0, math.inf) in paper
    s = cuts_space()
    assert s.gene_names == ("queues", "log10_cut1", "log10_cut2", "log10_cut3", "W", "zeta_min", "delta")
    assert len(s.lower) == len(s.upper) == s.dimensions == 7
    inner = (1.0, 2.0, 10.0)  # the largest size cannot end a queue: the last one would be empty
    for mask in range(8):
        want = tuple(x for k, x in enumerate(inner) if mask >> k & 1)
        config = s.decode(s.encode_thresholds(want, W=1.0))
        assert config.thresholds == (*want, math.inf)
        assert config.weights == pytest.approx(tuple(math.exp(-i) for i in range(len(want) + 1)))


def test_cuts_snap_down_to_sizes_merge_and_drop_empty_queues():
    s = cuts_space()
    log = math.log10
    # three queues asked, cuts between sizes snap down to the size below; the unused fourth gene is ignored
    assert s.decode([3.2, log(9.0), log(1.5), log(2.0), 0.0, 0.0, 0.5]).thresholds == (1.0, 2.0, math.inf)
    # both cuts snap to 2: one cut; a cut at the largest size is dropped (FIFO)
    assert s.decode([3.0, log(2.5), log(2.0), 0.0, 0.0, 0.0, 0.5]).thresholds == (2.0, math.inf)
    assert s.decode([2.0, log(11.0), 0.0, 0.0, 0.0, 0.0, 0.5]).thresholds == (math.inf,)
    # the queue count is rounded and clipped: 0.7 -> 1 queue, 9 -> 4
    assert s.decode([0.7, log(2.0), log(10.0), log(1.0), 1.0, 0.0, 0.5]).thresholds == (math.inf,)
    assert s.decode([9.0, log(2.0), log(10.0), log(1.0), 1.0, 0.0, 0.5]).thresholds == (1.0, 2.0, 10.0, math.inf)
    # equal behaviour, one cache key; the same partition as the paper's space, the same key as there
    assert config_key(s.decode([2.0, log(2.9), 0.0, 0.0, 1.0, 0.0, 0.5])) == config_key(
        s.decode([2.0, log(2.1), log(10.0), log(1.0), 1.001, 0.4, 0.9]))
    assert config_key(s.decode(s.encode_thresholds((2.0,), W=1.0))) == config_key(space().decode([0.5, 1.0, 0.0, 0.5]))


def test_cuts_space_seeds_extremes_and_paper_partitions():
    s = cuts_space(search_delta=False)
    seeds = [s.decode(g) for g in s.seeds(10)]
    assert len(s.seeds(10)[0]) == s.dimensions == 6
    assert seeds[0].thresholds == (math.inf,)  # FIFO first
    assert len(seeds[1].thresholds) == 3 and seeds[1].weights[-1] < seeds[1].weights[0]  # SJF-like (log-even cuts)
    assert len(set(seeds[2].weights)) == 1  # fair-like
    c2_partitions = {space().decode([t, 0.0, 0.0, 0.5]).thresholds for t in (0.1, 0.5)}
    assert c2_partitions <= {c.thresholds for c in seeds[3:]}


def test_bad_space_settings():
    jobs = [job_spec(0, service=1.0, max_gpus=2), job_spec(1, submit=1, service=2.0, max_gpus=2)]
    with pytest.raises(SpaceError, match="unknown search space 'grid'"):
        SearchSpace.from_samples([jobs], kind="grid")
    with pytest.raises(SpaceError, match="between 2 and 64"):
        cuts_space(max_queues=1)
    with pytest.raises(SpaceError, match="only the cuts space"):
        space().encode_thresholds((2.0,))


class _Draws:
    """A stand-in for random.Random: randrange and choice return scripted values."""

    def __init__(self, *picks) -> None:
        self.picks = list(picks)

    def randrange(self, n):
        v = self.picks.pop(0)
        assert 0 <= v < n
        return v

    def choice(self, seq):
        v = self.picks.pop(0)
        assert v in seq
        return v


def test_neighbour_steps_a_cut_to_the_next_train_size_and_W_by_quanta():
    s = cuts_space(sizes=(1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0))
    genes = s.encode_thresholds((3.0, 8.0), W=1.0, zeta=0.0)  # queues 3, cuts at 3 and 8
    # cut gene 2 (8.0), one size up (m = 0): 13.0; every other parameter as it was
    moved = s.decode(s.neighbour(genes, _Draws(0, 1, 2)))
    assert moved.thresholds == (3.0, 13.0, math.inf) and moved.weights == s.decode(genes).weights
    # cut gene 1 (3.0), 2^2 = 4 sizes down: clipped at the smallest size
    assert s.decode(s.neighbour(genes, _Draws(2, -1, 1))).thresholds == (1.0, 8.0, math.inf)
    # W (gene index 6 = head), 2^3 quanta up: 1.0 -> 1.08
    W_gene = s.gene_names.index("W")
    assert s.neighbour(genes, _Draws(3, 1, W_gene))[W_gene] == pytest.approx(1.08)
    # the queue count moves by one: the third cut gene (at the top of the range) joins and is dropped
    assert len(s.decode(s.neighbour(genes, _Draws(0, 1, 0))).thresholds) == 3
    assert s.decode(s.neighbour(genes, _Draws(0, -1, 0))).thresholds == (3.0, math.inf)


def test_neighbour_stays_in_bounds_and_changes_one_gene():
    import random

    for kind in ("paper", "cuts"):
        s = space() if kind == "paper" else cuts_space()
        rng = random.Random(7)
        genes = [rng.uniform(lo, hi) for lo, hi in zip(s.lower, s.upper)]
        for _ in range(200):
            out = s.neighbour(genes, rng)
            assert all(lo <= g <= hi for g, lo, hi in zip(out, s.lower, s.upper))
            assert sum(a != b for a, b in zip(out, s.clip(genes))) <= 1
            genes = out
