"""A round whose allocation is the last round's, with no GPU moved since, is known to keep every job without
walking them (``Placement.keep_all``): schedules, forecasts, explanations and placement counters are what
placing that round gives, and any change since the last round makes it place again."""

from __future__ import annotations

import pytest
from builders import classed, forecasts, holding, measured_cluster, philly, vc_config, with_costs

from pcs_ray.cluster import ClusterSpec
from pcs_ray.jobs.state import Snapshot
from pcs_ray.placement import create_placement
from pcs_ray.placement.base import Placement
from pcs_ray.placement.framework import COUNTERS
from pcs_ray.policies import build_policy
from pcs_ray.policies.power_aware import PlannedAllocation
from pcs_ray.sim.run import simulate


def placed(name: str):
    """A placement of ``name`` on 16 GPUs after one round of three jobs, with those jobs and the round's allocation."""
    p = create_placement(name, ClusterSpec.homogeneous(16, 8))
    jobs = [holding(1, 4), holding(2, 2), holding(3, 8)]
    alloc = {j.spec.job_id: j.alloc for j in jobs}
    p.place(Snapshot(0.0, p.num_gpus, jobs), jobs, alloc)
    return p, jobs, alloc


@pytest.mark.parametrize("name", ["pal", "combined", "mapa-preserve", "packed-sticky"])
def test_the_same_allocation_keeps_every_job_and_counts_the_round_as_placing_it(name):
    p, jobs, alloc = placed(name)
    before = dict(p.held)
    COUNTERS.reset()
    assert p.place(Snapshot(1.0, p.num_gpus, jobs), [], dict(alloc)) == []
    by_place = COUNTERS.as_dict()
    COUNTERS.reset()
    assert p.keep_all(dict(alloc))
    assert COUNTERS.as_dict() == by_place and by_place["rounds"] == 1
    assert p.held == before


@pytest.mark.parametrize("name", ["pal", "mapa-preserve"])
def test_any_change_since_the_last_round_places_again(name):
    p, jobs, alloc = placed(name)
    assert not p.keep_all(dict(reversed(list(alloc.items()))))  # the same counts in another order
    assert not p.keep_all({**alloc, 2: 1})
    assert not p.keep_all({1: 4, 2: 2})
    planned = PlannedAllocation(alloc)
    planned.gpus = {1: (0, 1, 2, 3)}
    assert not p.keep_all(planned)
    assert p.keep_all(dict(alloc))
    p.release(jobs[1])
    assert not p.keep_all(dict(alloc))
    p, jobs, alloc = placed(name)
    p.give_back(1)
    assert not p.keep_all(dict(alloc))
    p, jobs, alloc = placed(name)
    p.take(holding(9, 1), 1, ())
    assert not p.keep_all(dict(alloc))


def test_a_re_placing_placement_that_does_not_keep_always_places():
    p, _, alloc = placed("packed-nonsticky")
    assert not p.keep_all(dict(alloc))


@pytest.mark.parametrize("name", ["pal", "combined"])
@pytest.mark.parametrize("policy", [lambda: vc_config("0e4a51", "bal"), lambda: build_policy("fifo")], ids=["wfq", "fifo"])
def test_a_run_that_skips_unchanged_rounds_gives_what_placing_them_gives(name, policy, monkeypatch):
    spec, jobs = measured_cluster(4, 8, 2), classed(with_costs(philly("0e4a51", 80)))
    runs, places, counters = [], [], []
    for skipping in (False, True):
        if not skipping:
            monkeypatch.setattr(Placement, "keep_all", lambda self, alloc: False)
        else:
            monkeypatch.undo()
        place = create_placement(name, spec)
        COUNTERS.reset()
        runs.append(simulate(jobs, 32, policy(), predict=True, overhead=5.0, placement=place))
        counters.append(COUNTERS.as_dict())
        places.append(place)
    assert forecasts(runs[1]) == forecasts(runs[0])
    assert [places[1].explain(j.job_id) for j in jobs] == [places[0].explain(j.job_id) for j in jobs]
    assert counters[1] == counters[0]
