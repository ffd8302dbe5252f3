"""Incremental forward plays give, bit for bit, the forecasts of the reference plays
(a full fork of the engine per arrival): first and last prediction, refresh count and
bound of every job, on several traces, policies, overheads and job shapes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pcs_ray.data import pcs_config
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.policies import WFQConfig, WFQPolicy, build_policy
from pcs_ray.sim.engine import Engine
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.generator import generate_workload
from pcs_ray.workloads.traces import read_sia_philly
from builders import DATA, classed, forecasts, measured_cluster, philly, vc_config, with_costs


def mixed_themis1(seed: int) -> list[JobSpec]:
    """Narrow jobs, every fifth one rigid, every seventh needing at least two GPUs."""
    out = []
    for j in generate_workload("themis1", 150, 16, load=1.2, seed=seed):
        m = 1 + j.job_id % 8
        lo = m if j.job_id % 5 == 0 else (min(2, m) if j.job_id % 7 == 0 else 1)
        out.append(replace(j, max_gpus=m, min_gpus=lo, speedup=linear_speedup(m)))
    return out


CASES = [
    pytest.param(lambda: philly("0e4a51", 300), 64, lambda: vc_config("0e4a51", "jct"), 0.0, id="0e4a51-pcs-jct"),
    pytest.param(lambda: philly("0e4a51", 300), 64, lambda: vc_config("0e4a51", "pred"), 0.0, id="0e4a51-pcs-pred"),
    pytest.param(lambda: philly("ee9e8c", 150), 64, lambda: vc_config("ee9e8c", "bal"), 0.0, id="ee9e8c-pcs-bal"),
    pytest.param(lambda: philly("b436b2", 250, "linear"), 32, lambda: vc_config("b436b2", "jct"), 30.0,
                 id="b436b2-linear-pcs-jct-overhead"),
    pytest.param(lambda: philly("0e4a51", 250), 64, lambda: build_policy("fifo"), 0.0, id="0e4a51-fifo"),
    pytest.param(lambda: generate_workload("themis1", 150, 64, load=0.9, seed=4567), 64,
                 lambda: WFQPolicy(WFQConfig.load(pcs_config("themis1", "bal"))), 0.0, id="themis1-pcs-bal"),
    pytest.param(lambda: mixed_themis1(3), 16, lambda: WFQPolicy(WFQConfig.from_params((50_000, 400_000, float("inf")),
                 0.5, 0.7, 0.2)), 0.0, id="rigid-mixed-pcs"),
    pytest.param(lambda: mixed_themis1(5), 16, lambda: build_policy("fifo"), 20.0, id="rigid-mixed-fifo-overhead"),
    pytest.param(lambda: with_costs(philly("0e4a51", 250)), 64, lambda: vc_config("0e4a51", "jct"), 15.0,
                 id="0e4a51-pcs-jct-per-job-costs"),
    pytest.param(lambda: read_sia_philly(DATA / "pal" / "sia-philly" / "workload-1.csv")[:200], 64,
                 lambda: build_policy("pcs-pred"), 0.0, id="sia-philly-rigid-pcs-pred"),
]


@pytest.mark.parametrize("jobs, gpus, policy, overhead", CASES)
def test_incremental_forecasts_equal_the_reference(jobs, gpus, policy, overhead):
    jobs, policy = jobs(), policy()
    ref = simulate(jobs, gpus, policy, predict=True, overhead=overhead, incremental=False)
    new = simulate(jobs, gpus, policy, predict=True, overhead=overhead, incremental=True)
    assert forecasts(new) == forecasts(ref)
    assert sum(r.refreshes for r in ref.records) > 0 or policy.name == "fifo"  # the comparison has teeth


def arrive(engine: Engine, spec) -> None:
    """Play ``engine`` up to ``spec``'s submission (every event before it), then admit it and decide."""
    while engine.active and engine.next_event(spec.submit_time) < spec.submit_time:
        engine.remove(engine.advance(engine.next_event(spec.submit_time)))
        engine.reallocate()
    engine.remove(engine.advance(spec.submit_time))
    engine.admit(spec)
    engine.reallocate()


def test_incremental_play_leaves_the_engine_untouched_and_falls_back_when_it_must():
    jobs = philly("0e4a51", 120)
    engine = Engine(64, vc_config("0e4a51", "jct"))
    for spec in jobs:
        arrive(engine, spec)
    assert len(engine.active) > 20
    before = ({j: (s.remaining, s.alloc, s.anchor) for j, s in engine.active.items()}, dict(engine.eta), engine.busy)
    fast = engine.play_ahead()
    assert ({j: (s.remaining, s.alloc, s.anchor) for j, s in engine.active.items()}, dict(engine.eta), engine.busy) == before
    assert fast == engine.fork().play_forward()
    # A job whose held count disagrees with the last decision: only the full fork knows what to do.
    jid = next(iter(engine.running))
    engine.prev_alloc = {**engine.prev_alloc, jid: engine.prev_alloc[jid] + 1}
    assert engine.play_ahead() == engine.fork().play_forward()


def test_live_model_predictions_equal_the_full_fork():
    """The coordinator's case: an engine with a placement whose GPUs are all alike, played without it,
    after progress reports (new remaining work and restart stalls) and with an overhead."""
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.placement import create_placement

    cluster = ClusterSpec.homogeneous(32, 8)
    engine = Engine(32, build_policy("pcs-bal"), placement=create_placement("packed-sticky", cluster), overhead=12.0)
    for spec in philly("0e4a51", 150):
        arrive(engine, spec)
        for k, jid in enumerate(engine.running_ids()[:3]):  # runners report: a little behind, one restarting
            job = engine.job(jid)
            engine.set_remaining(jid, job.remaining * 1.01, spec.submit_time + 5.0 * k)
        assert engine.play_ahead(placement=False) == engine.fork(placement=False).play_forward()


def test_first_pass_stops_where_no_waiting_job_fits_and_decides_the_same():
    """``_QueueIndex.least``: with a long queue of rigid and wide jobs, stopping the FIFO pass once
    fewer GPUs are left than any job needs must give the allocation the full walk gives."""
    import random

    from pcs_ray.policies.wfq import _QueueIndex

    rng = random.Random(7)
    policy = WFQPolicy(WFQConfig.from_params((3_000, 60_000, float("inf")), 0.4, 0.6, 0.3))
    engine = Engine(23, policy)
    for jid in range(400):
        m = rng.choice([2, 3, 4, 8, 16])
        lo = rng.choice([m, m, max(1, m // 2)])
        engine.admit(JobSpec(job_id=jid, submit_time=0.0, service=rng.lognormvariate(9, 2), max_gpus=m,
                             speedup=(0.0,) + tuple(k ** 0.7 for k in range(1, m + 1)), min_gpus=lo))
    full = _QueueIndex.least
    for removed in range(0, 390, 13):
        snap = engine.snapshot()
        fast = policy.allocate(snap)
        try:
            _QueueIndex.least = lambda self, q: 1  # the full walk
            slow = policy.allocate(snap)
        finally:
            _QueueIndex.least = full
        assert fast == slow
        engine.remove([engine.job(j) for j in list(engine.active)[:13]])
    assert engine.index.needs == _QueueIndex(policy, engine.active.values()).needs  # counts follow removals


@pytest.mark.parametrize("name, options, policy, overhead", [
    ("packed-sticky", {}, lambda: vc_config("0e4a51", "bal"), 0.0),
    ("random-sticky", {"seed": 3}, lambda: vc_config("0e4a51", "jct"), 10.0),
    ("pal", {"sticky": True}, lambda: build_policy("fifo"), 0.0),  # class A first: the placing order is not the policy's
    ("logged:packed-sticky", {}, lambda: vc_config("0e4a51", "bal"), 0.0),  # as simulate's CLI wraps it (PlacementLog)
])
def test_plays_with_a_sticky_placement_equal_the_full_fork(name, options, policy, overhead, monkeypatch):
    """The queue play runs a sticky placement itself (the GPUs and slowdown of every job whose count changed):
    forecasts are those of full forks that re-run policy and placement at every event."""
    from pcs_ray.placement import create_placement
    from pcs_ray.forecast.queue_play import QueuePlay

    placed = []
    commit = QueuePlay._commit_placed
    monkeypatch.setattr(QueuePlay, "_commit_placed", lambda self, *a: placed.append(1) or commit(self, *a))
    from pcs_ray.placement.stats import PlacementLog

    def placement():
        made = create_placement(name.removeprefix("logged:"), cluster, **options)
        return PlacementLog(made) if name.startswith("logged:") else made

    cluster, jobs, policy = measured_cluster(4, 8, 2), classed(with_costs(philly("0e4a51", 150))), policy()
    runs = [simulate(jobs, 32, policy, predict=True, overhead=overhead, incremental=incremental,
                     placement=placement()) for incremental in (False, True)]
    assert forecasts(runs[1]) == forecasts(runs[0])
    assert sum(r.refreshes for r in runs[0].records) > 0 and len(placed) > 1000  # the queue play did place


def test_a_play_until_a_job_finishes_gives_the_whole_plays_numbers():
    """``predict(until=j)`` (a submission's own forecast) stops at j's finish: j's forecast and every
    earlier one are the whole play's, with and without placement in the play."""
    from pcs_ray.placement import create_placement

    engine = Engine(32, vc_config("0e4a51", "bal"), placement=create_placement("packed-sticky", measured_cluster(4, 8, 5)))
    for spec in classed(philly("0e4a51", 160)):
        arrive(engine, spec)
    for placement in (True, False):
        whole = engine.fork(placement=placement).play_forward()
        assert engine.play_ahead(placement=placement) == whole
        ids = sorted(whole, key=whole.get)
        assert len(ids) > 40
        for jid in (ids[0], ids[len(ids) // 2], ids[-1], max(whole)):
            part = engine.play_ahead(placement=placement, until=jid)
            assert part[jid] == whole[jid] and all(whole[j] == t for j, t in part.items())
            assert {j for j in whole if whole[j] < whole[jid]} <= set(part)
            assert engine.fork(placement=placement).play_forward(until=jid) == part or not placement


@pytest.mark.parametrize("placed", [False, True])
def test_a_pass_that_passed_a_job_over_resumes_there_and_decides_the_same(placed, monkeypatch):
    """A queue whose FIFO pass served jobs behind a rigid one it could not fit resumes at that job
    at the next event (the skip front) instead of walking the queue again; with and without a sticky
    placement in the play, forecasts are the full fork's."""
    from pcs_ray.placement import create_placement
    from pcs_ray.forecast.queue_play import QueuePlay

    resumed = []
    decide = QueuePlay.decide

    def counting(self):
        skips = [(q, self.front[q].share) for q in self.dirty
                 if not self.spread and self.front[q] is not None and self.front[q].passed is not None]
        decision = decide(self)
        resumed.extend(q for q, share in skips if decision.shares[q] >= share)  # the skip front's resume path
        return decision

    monkeypatch.setattr(QueuePlay, "decide", counting)
    jobs = classed(mixed_themis1(11))
    policy = WFQPolicy(WFQConfig.from_params((50_000, 400_000, float("inf")), 0.5, 0.7, 0.2))
    runs = [simulate(jobs, 16, policy, predict=True, incremental=incremental,
                     placement=create_placement("packed-sticky", measured_cluster(2, 8, 4)) if placed else None)
            for incremental in (False, True)]
    assert forecasts(runs[1]) == forecasts(runs[0])
    assert len(resumed) > 100  # the path under test ran


@pytest.mark.parametrize("name", ["pal", "packed-sticky", None])
def test_final_forecasts_of_changes_only_leave_the_records_as_whole_plays_do(name, monkeypatch):
    """Where every job holds all it can use, a forecast brings only the finishes that changed since the last
    such one (``Engine.final_changes``), with a placement or without (the chained plays): every job's first
    and last prediction and refresh count are the reference's, which plays every arrival's whole forecast."""
    from pcs_ray.placement import create_placement

    sizes = []
    changes = Engine.final_changes

    def spy(self):
        forecast = changes(self)
        if forecast is not None:
            sizes.append((len(forecast), len(self.running)))
        return forecast

    monkeypatch.setattr(Engine, "final_changes", spy)
    cluster, jobs = measured_cluster(32, 8, 2), classed(generate_workload("themis1", 400, 256, load=0.7, seed=11))
    policy = WFQPolicy(WFQConfig.load(pcs_config("themis1", "bal")))
    runs = [simulate(jobs, 256, policy, predict=True, incremental=incremental,
                     placement=name and create_placement(name, cluster)) for incremental in (False, True)]
    assert forecasts(runs[1]) == forecasts(runs[0])
    assert sum(r.refreshes for r in runs[0].records) > 0
    assert sum(1 for n, running in sizes if n < running) > 50  # changes only, often
