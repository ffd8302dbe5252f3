"""Reused placement decisions (``Placement(cache=True)``, the default) are the decisions computed afresh:
same forecasts, schedules and explanations on a cluster of measured variability; plugins that draw
random numbers, keep state or do not declare what they read are never served from the cache."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest

from pcs_ray.placement import PLACEMENTS, Placement, create_placement
from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.plugin import Score
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.jobs.state import JobState
from builders import classed, forecasts, measured_cluster, philly, vc_config, with_costs


def counting(monkeypatch) -> list[int]:
    """Counts decisions the configurations compute (a reused one is not computed)."""
    calls: list[int] = []
    decide = Configuration.decide
    monkeypatch.setattr(Configuration, "decide", lambda self, ctx: calls.append(1) or decide(self, ctx))
    return calls


@pytest.mark.parametrize("name, options, policy", [
    ("packed-sticky", {}, lambda: vc_config("0e4a51", "bal")),  # the queue play places itself
    ("pal", {"sticky": True}, lambda: build_policy("fifo")),
    ("pal", {}, lambda: vc_config("0e4a51", "jct")),  # non-sticky: every running job re-placed each round
    ("pm-first", {}, lambda: build_policy("fifo")),
    ("combined", {}, lambda: vc_config("0e4a51", "bal")),
    ("mapa-preserve", {}, lambda: build_policy("fifo")),
])
def test_reused_decisions_equal_fresh_ones(name, options, policy, monkeypatch):
    calls = counting(monkeypatch)
    cluster, jobs = measured_cluster(4, 8, 2), classed(with_costs(philly("0e4a51", 90)))
    runs, places, counts = [], [], []
    for cache in (False, True):
        place = create_placement(name, cluster, cache=cache, **options)
        before = len(calls)
        runs.append(simulate(jobs, 32, policy(), predict=True, overhead=5.0, placement=place))
        counts.append(len(calls) - before)
        places.append(place)
    assert places[1]._reuse is not None and places[0]._reuse is None
    assert forecasts(runs[1]) == forecasts(runs[0])
    explained = [places[0].explain(j.job_id) for j in jobs]
    assert sum(e is not None for e in explained) > 0
    assert [places[1].explain(j.job_id) for j in jobs] == explained
    assert counts[1] < counts[0]  # the cache did serve decisions


def test_every_registered_placement_either_declares_its_inputs_or_is_never_cached():
    for config in PLACEMENTS.values():
        stateful = any(p.stateful for p in config.plugins())
        undeclared = any(p.reads is None for p in config.plugins())
        assert (config.cache_fields is None) == (stateful or undeclared), config.name


def one_job(jid: int, **fields) -> JobState:
    from pcs_ray.jobs.spec import JobSpec, linear_speedup

    return JobState.new(JobSpec(job_id=jid, submit_time=0.0, service=100.0, max_gpus=2, speedup=linear_speedup(2), **fields))


def test_a_random_placement_draws_again_at_the_same_inputs():
    place = create_placement("random-sticky", measured_cluster(2, 8, 1), seed=4)
    assert place._reuse is None
    job, drawn = one_job(1), set()
    for _ in range(12):
        drawn.add(place.take(job, 2, ()))
        place.give_back(1)
    assert len(drawn) > 1  # one cached answer would repeat


class ByModel(Score):
    """Prefers node ``len(model) % nodes``: its answer depends on a job field no other plugin reads."""

    name = "by-model"
    reads: ClassVar = None  # undeclared

    def score(self, ctx, batch) -> np.ndarray:
        want = len(ctx.spec.model) % ctx.facts.num_nodes
        return np.where(batch.nodes == want, 1.0, 2.0)


class ByModelDeclared(ByModel):
    reads: ClassVar = frozenset({"model"})


class ByModelStateful(ByModel):
    reads: ClassVar = frozenset()
    stateful: ClassVar = True


@pytest.mark.parametrize("plugin, cached", [(ByModel(), False), (ByModelDeclared(), True), (ByModelStateful(), False)])
def test_a_decision_is_reused_only_when_its_plugins_declare_what_they_read(plugin, cached):
    config = dataclasses.replace(PLACEMENTS["packed-sticky"], name="by-model", scores=((plugin, 1.0),))
    place = Placement(measured_cluster(2, 8, 1), config)
    assert (place._reuse is not None) is cached
    got = []
    for jid, model in ((1, "ab"), (2, "abc"), (3, "ab")):  # same free GPUs, count and home each time
        got.append(place.take(one_job(jid, model=model), 2, ()))
        place.give_back(jid)
    assert got[0] == got[2] and {place.node[g] for g in got[0]} == {0} and {place.node[g] for g in got[1]} == {1}


def test_a_full_table_forgets_its_older_half_and_decides_the_same(monkeypatch):
    from pcs_ray.placement import base

    forgot: list[int] = []
    forget = base._forget_oldest
    monkeypatch.setattr(base, "_forget_oldest", lambda table: forgot.append(len(table)) or forget(table))
    cluster, jobs = measured_cluster(4, 8, 3), classed(with_costs(philly("0e4a51", 90)))
    fresh = simulate(jobs, 32, vc_config("0e4a51", "bal"), predict=True, placement=create_placement("pal", cluster, cache=False))
    place = create_placement("pal", cluster)
    place._reuse_limit = 40
    reused = simulate(jobs, 32, vc_config("0e4a51", "bal"), predict=True, placement=place)
    assert forgot and set(forgot) == {40} and len(place._reuse) <= 40
    assert forecasts(reused) == forecasts(fresh)
