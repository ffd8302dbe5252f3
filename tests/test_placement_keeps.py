"""A re-placing round keeps jobs on their GPUs without deciding again (``Configuration.keeps``) and gives
exactly what deciding every job again gives: schedules, forecasts and explanations, on clusters of measured
variability (where freed GPUs can be better) and on identical GPUs (where every score ties)."""

from __future__ import annotations

import pytest
from builders import classed, forecasts, measured_cluster, philly, vc_config, with_costs

from pcs_ray.cluster import ClusterSpec
from pcs_ray.cluster.topology import read_topo
from pcs_ray.data import locate
from pcs_ray.placement import PLACEMENTS, create_placement
from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.placement.framework import COUNTERS
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate


@pytest.mark.parametrize("name", ["pal", "combined"])
@pytest.mark.parametrize("cluster", [lambda: measured_cluster(4, 8, 2), lambda: ClusterSpec.homogeneous(32, 8)],
                         ids=["measured", "identical"])
@pytest.mark.parametrize("policy", [lambda: vc_config("0e4a51", "bal"), lambda: build_policy("fifo")], ids=["wfq", "fifo"])
def test_kept_jobs_are_where_deciding_again_puts_them(name, cluster, policy):
    spec, jobs = cluster(), classed(with_costs(philly("0e4a51", 80)))
    runs, places, kept = [], [], []
    for keeping in (False, True):
        place = create_placement(name, spec)
        assert place._keeps
        place._keeps = keeping
        COUNTERS.reset()
        runs.append(simulate(jobs, 32, policy(), predict=True, overhead=5.0, placement=place))
        kept.append(COUNTERS.kept)
        places.append(place)
    assert forecasts(runs[1]) == forecasts(runs[0])
    assert [places[1].explain(j.job_id) for j in jobs] == [places[0].explain(j.job_id) for j in jobs]
    assert kept[0] == 0 and kept[1] > 0  # the rule did keep jobs


def test_which_configurations_keep():
    plain = ClusterFacts(ClusterSpec.homogeneous(16, 8))
    linked = ClusterFacts(ClusterSpec.homogeneous(16, 8), topology=read_topo(locate("topology", "dgx1-v100")))
    assert PLACEMENTS["pal"].keeps(plain) and PLACEMENTS["pal"].keeps(linked)
    assert PLACEMENTS["combined"].keeps(plain)
    assert not PLACEMENTS["combined"].keeps(linked)  # subsets trade scores against links and free neighbours
    for name in ("packed-nonsticky", "random-nonsticky", "energy"):
        assert not PLACEMENTS[name].keeps(plain), name


@pytest.mark.parametrize("name", ["pal", "combined"])
def test_a_keeping_round_orders_jobs_by_their_class_now(name):
    """A keeping round sorts by the class it knows for each job id: a job given a new class (released, then back
    under the same id) and jobs it never saw placed (adopted) must be ordered as deciding every job orders them."""
    from dataclasses import replace

    from pcs_ray.jobs.state import JobState, Snapshot

    spec = measured_cluster(4, 8, 2)
    specs = classed(philly("0e4a51", 12))
    assignments = []
    for keeping in (False, True):
        place = create_placement(name, spec)
        place._keeps = keeping
        jobs = {s.job_id: JobState.new(s, 0.0) for s in specs}
        alloc = {jid: 2 for jid in list(jobs)[:10]}
        place.place(Snapshot(0.0, 32, tuple(jobs.values())), list(jobs.values())[:10], alloc)
        first = place.assignment()
        # job 1 leaves and comes back as another class, with another count; the others keep theirs
        back = list(jobs)[1]
        place.release(jobs[back])
        jobs[back] = JobState.new(replace(jobs[back].spec, job_class="D" if jobs[back].spec.job_class != "D" else "A"), 1.0)
        alloc = {**alloc, back: 1}
        place.place(Snapshot(1.0, 32, tuple(jobs.values())), [jobs[back]], alloc)
        second = place.assignment()
        # a new placement adopts what the jobs hold and places a round where none of them changed
        other = create_placement(name, spec)
        other._keeps = keeping
        for jid, gpus in second.items():
            jobs[jid].gpus = gpus
            other.adopt(jobs[jid])
        extra = list(jobs)[10]
        other.place(Snapshot(2.0, 32, tuple(jobs.values())), [jobs[extra]], {**alloc, extra: 3})
        assignments.append((first, second, other.assignment()))
    assert assignments[1] == assignments[0]
