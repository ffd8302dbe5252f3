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
