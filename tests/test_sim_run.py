"""Whole-simulation checks: exact equivalences between policies, predictions,
determinism, checkpoint overheads, WFQ's completion bound, metrics, and a real
trace."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.sim.metrics import summarize
from pcs_ray.data import data_dir, pcs_config
from pcs_ray.policies import POLICIES, WFQConfig, WFQPolicy, build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.jobs.state import JobState
from pcs_ray.workloads.demand import SubLinearDemand, speedup_table
from pcs_ray.workloads.generator import generate_workload
from builders import job_spec

DATA = data_dir()
PHILLY = DATA / "pcs" / "traces" / "trace_0e4a51.csv"


# --- workloads ------------------------------------------------------------------


def themis1(seed=7, n=100, gpus=16, load=0.9):
    return generate_workload("themis1", n, gpus, load=load, seed=seed)


def sublinear(jobs, alpha=0.7):
    return [replace(j, speedup=speedup_table(SubLinearDemand(alpha), j.max_gpus)) for j in jobs]


def narrow(jobs):
    """themis1 jobs mostly want more than 16 GPUs; cap demand at 1..8 so jobs run side by side."""
    out = []
    for j in jobs:
        m = 1 + j.job_id % 8
        out.append(replace(j, max_gpus=m, min_gpus=1, speedup=linear_speedup(m)))
    return out


def with_rigid(jobs):
    """Every fifth job rigid (its whole demand or nothing), demand kept within 16 GPUs."""
    out = []
    for j in narrow(jobs):
        if j.job_id % 5 == 0:
            j = replace(j, min_gpus=j.max_gpus)
        out.append(j)
    return out


def mixed(jobs):
    """Narrow jobs, some rigid, every third one sub-linear."""
    out = []
    for j in with_rigid(jobs):
        if j.job_id % 3 == 1:
            j = replace(j, speedup=speedup_table(SubLinearDemand(0.6), j.max_gpus))
        out.append(j)
    return out


ELASTIC_WORKLOADS = [
    pytest.param(lambda: themis1(), id="themis1"),
    pytest.param(lambda: sublinear(themis1()), id="themis1-sublinear0.7"),
    pytest.param(lambda: narrow(themis1(seed=3)), id="themis1-narrow"),
    pytest.param(lambda: sublinear(narrow(themis1(seed=5, load=1.3))), id="themis1-narrow-sublinear-overload"),
]


def schedule(result):
    return [(r.job_id, r.start, r.finish) for r in result.records]


def one_queue_per_job(jobs):
    sizes = sorted({j.service for j in jobs})
    assert len(sizes) == len(jobs), "sizes must be distinct for one queue per job"
    thresholds = tuple((a + b) / 2 for a, b in zip(sizes, sizes[1:])) + (math.inf,)
    return WFQConfig(thresholds, (1.0,) * len(thresholds))


# --- exact equivalences -----------------------------------------------------------


@pytest.mark.parametrize("make", ELASTIC_WORKLOADS + [pytest.param(lambda: with_rigid(themis1(seed=11)), id="rigid")])
def test_wfq_single_queue_is_fifo(make):
    jobs = make()
    fifo = simulate(jobs, 16, build_policy("fifo"), predict=False)
    wfq = simulate(jobs, 16, WFQPolicy(WFQConfig((math.inf,), (1.0,), zeta_min=0.0)), predict=False)
    assert len(jobs) == 100
    assert schedule(wfq) == schedule(fifo)


@pytest.mark.parametrize("make", ELASTIC_WORKLOADS)
def test_wfq_one_queue_per_job_equal_weights_is_fair_share(make):
    jobs = make()
    wfq = WFQPolicy(one_queue_per_job(jobs))
    assert len({wfq.queue_of(JobState.new(j)) for j in jobs}) == len(jobs)
    got = simulate(jobs, 16, wfq, predict=False)
    fair = simulate(jobs, 16, build_policy("fair"), predict=False)
    assert [r.finish for r in got.records] == [r.finish for r in fair.records]
    # The comparison is not vacuous: fair share does differ from FIFO here.
    fifo = simulate(jobs, 16, build_policy("fifo"), predict=False)
    assert [r.finish for r in fifo.records] != [r.finish for r in fair.records]


@pytest.mark.parametrize("make", ELASTIC_WORKLOADS)
def test_fifo_predictions_are_exact(make):
    """Under FIFO with elastic jobs a later arrival only takes GPUs no earlier job can use,
    so the prediction made at submission is the finish time."""
    result = simulate(make(), 16, build_policy("fifo"))
    for r in result.records:
        assert r.first_pred == r.finish, r
        assert r.last_pred == r.finish and r.refreshes == 0
    s = summarize(result)
    assert s["avg_pred_err"] == 0.0 and s["p99_pred_err"] == 0.0


def _all_policies():
    out = [pytest.param(name, {}, id=name) for name in POLICIES]
    out += [
        pytest.param("las", {"threshold": 20_000.0}, id="las-short-threshold"),
        pytest.param("themis-lease", {"lease": 5_000.0}, id="themis-lease-5000"),
        pytest.param("themis", {"quantum": 5_000.0}, id="themis-5000"),
    ]
    return out


def _make_policy(name, kw):
    if name == "pcs" and not kw:
        return WFQPolicy(WFQConfig.load(pcs_config("themis1", "jct")))
    return build_policy(name, **kw)


@pytest.mark.parametrize("name,kw", _all_policies())
def test_predictions_never_change_the_schedule(name, kw):
    jobs = mixed(themis1(seed=21, n=60))
    on = simulate(jobs, 16, _make_policy(name, kw), predict=True)
    off = simulate(jobs, 16, _make_policy(name, kw), predict=False)
    assert schedule(on) == schedule(off)
    assert [r.preemptions for r in on.records] == [r.preemptions for r in off.records]
    assert on.predictions == len(jobs) and off.predictions == 0
    assert all(r.first_pred is not None for r in on.records)
    assert all(r.first_pred is None for r in off.records)


@pytest.mark.parametrize("name,kw", _all_policies())
def test_simulation_is_deterministic(name, kw):
    jobs = mixed(themis1(seed=22, n=60))
    a = simulate(jobs, 16, _make_policy(name, kw))
    b = simulate(jobs, 16, _make_policy(name, kw))
    assert a.records == b.records
    assert a.utilization_timeline == b.utilization_timeline
    assert a.events == b.events


@pytest.mark.parametrize("name,start", [("pcs", "fork"), ("themis", "fork"), ("themis", "spawn")])
def test_parallel_forward_plays_give_the_serial_result(name, start, monkeypatch):
    import pcs_ray.sim.run as sim

    monkeypatch.setattr(sim, "_start_method", lambda: start)
    jobs = mixed(themis1(seed=24, n=40))
    serial = simulate(jobs, 16, _make_policy(name, {}))
    parallel = simulate(jobs, 16, _make_policy(name, {}), workers=3)
    assert parallel.records == serial.records
    assert parallel.predictions == serial.predictions == len(jobs)
    assert parallel.utilization_timeline == serial.utilization_timeline


@pytest.mark.parametrize("placement,start", [("pal", "fork"), ("pal", "spawn"), ("packed-sticky", "fork")])
def test_parallel_forward_plays_with_a_placement_give_the_serial_result(placement, start, monkeypatch):
    """Every process replays the schedule on its own copy of the placement (this one on the placement given,
    whose log then holds the whole schedule's placements, as in one process)."""
    import pcs_ray.sim.run as sim
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.placement.configure import configure_placement
    from pcs_ray.placement.stats import PlacementLog

    monkeypatch.setattr(sim, "_start_method", lambda: start)
    jobs = mixed(themis1(seed=24, n=60))
    setup = configure_placement(ClusterSpec.homogeneous(16, 4), placement)
    serial_log, parallel_log = PlacementLog(setup.new()), PlacementLog(setup.new())
    serial = simulate(jobs, 16, _make_policy("pcs", {}), placement=serial_log)
    parallel = simulate(jobs, 16, _make_policy("pcs", {}), placement=parallel_log, workers=3)
    assert parallel.records == serial.records
    assert parallel.predictions == serial.predictions == len(jobs)
    assert parallel.utilization_timeline == serial.utilization_timeline
    assert parallel_log.summary() == serial_log.summary() and len(serial_log.gpus_of) == len(jobs)
    assert parallel_log.assignment() == serial_log.assignment()


class _SlowToPickle:
    """A placement that notes how many jobs it held when it was pickled."""

    held_when_pickled: list[int] = []

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __getstate__(self):
        import threading
        import time

        # Pickled in a thread of its own, it waits (up to 5 s) for the run to start placing jobs.
        deadline = time.monotonic() + 5
        while threading.current_thread() is not threading.main_thread() and not self.inner.held \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        _SlowToPickle.held_when_pickled.append(len(self.inner.held))
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)


def test_the_other_processes_get_the_placement_as_it_was_before_the_run(monkeypatch):
    """The pool pickles its calls in a thread of its own: the setup is pickled before this process replays its
    share, or the other processes would start from a placement half-way through the schedule."""
    import pcs_ray.sim.run as sim
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.placement.configure import configure_placement

    monkeypatch.setattr(sim, "_start_method", lambda: "fork")
    _SlowToPickle.held_when_pickled.clear()
    jobs = mixed(themis1(seed=24, n=60))
    setup = configure_placement(ClusterSpec.homogeneous(16, 4), "pal")
    serial = simulate(jobs, 16, _make_policy("pcs", {}), placement=setup.new())
    parallel = simulate(jobs, 16, _make_policy("pcs", {}), placement=_SlowToPickle(setup.new()), workers=2)
    assert _SlowToPickle.held_when_pickled == [0]
    assert parallel.records == serial.records


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers"):
        simulate(themis1(n=5), 16, build_policy("fifo"), workers=0)


def test_arrival_order_of_input_does_not_matter():
    jobs = mixed(themis1(seed=23, n=60))
    a = simulate(jobs, 16, build_policy("srsf"))
    b = simulate(list(reversed(jobs)), 16, build_policy("srsf"))
    assert a.records == b.records


# --- checkpoint / restore overhead --------------------------------------------------


OVERHEAD_CASES = [
    # (policy, kwargs, jobs, capacity, overhead, finish without, finish with, preemptions with)
    # SRSF on 1 GPU: B (2 s) preempts A (10 s) at t=1; A resumes at 3, pays 0.5 s, ends 3.5 + 9.
    pytest.param("srsf", {}, [job_spec(1, service=10), job_spec(2, submit=1, service=2)], 1, 0.5,
                 {1: 12.0, 2: 3.0}, {1: 12.5, 2: 3.0}, {1: 1, 2: 0}, id="srsf-preempt"),
    # LAS (threshold 2): A demoted at 2, B runs 2..4 then is demoted; A resumes at 4 (+1 s stall,
    # 3 s left) -> 8; B resumes at 8 (+1 s, 3 s left) -> 12. Without overhead 7 and 10.
    pytest.param("las", {"threshold": 2.0}, [job_spec(1, service=5), job_spec(2, submit=1, service=5)], 1, 1.0,
                 {1: 7.0, 2: 10.0}, {1: 8.0, 2: 12.0}, {1: 1, 2: 1}, id="las-demotions"),
    # FIFO resizing: B runs on 1 GPU until A ends at 10, then grows to 2 (a restart: +1 s) -> 16.
    pytest.param("fifo", {}, [job_spec(1, service=10), job_spec(2, service=20, max_gpus=2)], 2, 1.0,
                 {1: 10.0, 2: 15.0}, {1: 10.0, 2: 16.0}, {1: 0, 2: 0}, id="fifo-resize"),
    # First starts never pay: FIFO on 1 GPU, no job is ever interrupted.
    pytest.param("fifo", {}, [job_spec(1, service=3), job_spec(2, submit=1, service=2), job_spec(3, submit=1, service=1)],
                 1, 5.0,
                 {1: 3.0, 2: 5.0, 3: 6.0}, {1: 3.0, 2: 5.0, 3: 6.0}, {1: 0, 2: 0, 3: 0}, id="fifo-no-restarts"),
]


@pytest.mark.parametrize("policy,kw,jobs,capacity,overhead,without,with_,preempt", OVERHEAD_CASES)
def test_overhead_exact(policy, kw, jobs, capacity, overhead, without, with_, preempt):
    base = simulate(jobs, capacity, build_policy(policy, **kw), overhead=0.0)
    slow = simulate(jobs, capacity, build_policy(policy, **kw), overhead=overhead)
    assert {r.job_id: r.finish for r in base.records} == pytest.approx(without, abs=1e-9)
    assert {r.job_id: r.finish for r in slow.records} == pytest.approx(with_, abs=1e-9)
    assert {r.job_id: r.preemptions for r in slow.records} == preempt


@pytest.mark.parametrize("make", [pytest.param(lambda: narrow(themis1(seed=31)), id="narrow"),
                                  pytest.param(lambda: sublinear(narrow(themis1(seed=32))), id="narrow-sublinear")])
def test_overhead_never_speeds_up_fifo(make):
    """FIFO only ever grows a job's allocation, so overheads can only delay every job."""
    jobs = make()
    base = simulate(jobs, 16, build_policy("fifo"), predict=False)
    slow = simulate(jobs, 16, build_policy("fifo"), predict=False, overhead=30.0)
    later = 0
    for b, s in zip(base.records, slow.records):
        assert s.finish >= b.finish - 1e-6 * max(1.0, b.finish), (b, s)
        later += s.finish > b.finish + 1e-6
    assert later > 0


@pytest.mark.parametrize("name,kw", _all_policies())
def test_preempted_jobs_pay_the_overhead(name, kw):
    """After its last resume a preempted job stalls ``overhead`` seconds before it moves again,
    so its JCT is at least its fastest runtime plus one overhead; and the preempting policies
    do preempt here, so the check is not vacuous for them."""
    jobs = mixed(themis1(seed=41, n=60))
    overhead = 500.0
    base = simulate(jobs, 16, _make_policy(name, kw), predict=False)
    slow = simulate(jobs, 16, _make_policy(name, kw), predict=False, overhead=overhead)
    preempted = [r for r in slow.records if r.preemptions]
    for r in preempted:
        assert r.jct >= r.min_runtime + overhead - 1e-6 * max(1.0, r.jct), r
    for r in slow.records:
        assert r.jct >= r.min_runtime - 1e-6 * max(1.0, r.jct)
    if name in ("srsf", "srtf", "themis", "themis-lease", "las", "afs", "afs-l"):
        assert preempted
    # (FIFO preempts too here: a job backfilled beside a waiting rigid job that arrived
    # earlier gives its GPUs back when the rigid job fits.)
    if not build_policy(name).work_conserving:  # backfilling never preempts: overheads cost nothing
        assert not preempted and [r.finish for r in slow.records] == [r.finish for r in base.records]
        return
    # In aggregate, overheads cost time.
    assert sum(r.finish for r in slow.records) > sum(r.finish for r in base.records)


def test_overhead_rejects_negative():
    with pytest.raises(ValueError, match="overhead"):
        simulate([job_spec(1, service=1)], 1, build_policy("fifo"), overhead=-1.0)


# --- WFQ completion bound -----------------------------------------------------------------


@pytest.mark.parametrize("config", ["bal", "jct", "pred"])
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: themis1(seed=51), id="themis1"),
        pytest.param(lambda: sublinear(themis1(seed=52)), id="sublinear"),
        pytest.param(lambda: narrow(themis1(seed=53, load=1.2)), id="narrow-overload"),
        pytest.param(lambda: sublinear(narrow(themis1(seed=54, load=1.5))), id="narrow-sublinear-overload"),
    ],
)
def test_wfq_completion_bound_holds(config, make):
    policy = WFQPolicy(WFQConfig.load(pcs_config("themis1", config)))
    result = simulate(make(), 16, policy)
    bounded = [r for r in result.records if r.bound is not None]
    assert len(bounded) >= 40  # the check is not vacuous
    for r in bounded:
        assert r.finish <= r.bound + 1e-6 * max(1.0, r.bound), r
        assert r.bound >= r.submit + r.min_runtime - 1e-6 * max(1.0, r.bound)
    s = summarize(result)
    assert s["bound_violations"] == 0 and s["jobs_with_bound"] == len(bounded)


@pytest.mark.parametrize("policy", [
    pytest.param(lambda: WFQPolicy(WFQConfig.load(pcs_config("themis1", "bal"))), id="wfq-own-queue"),
    pytest.param(lambda: build_policy("fifo"), id="fifo-every-job"),
])
def test_a_bound_made_with_only_the_jobs_it_reads_settled_is_the_bound_of_every_job_settled(policy, monkeypatch):
    """At each arrival ``simulate`` brings up to date only the jobs ``bound_reads`` names: the bound is,
    bit for bit, the one made after every running job was brought up to date."""
    from pcs_ray.sim.engine import Engine

    policy = policy()
    seen = {"engine": None, "bounds": 0, "stale": 0}
    settle_each, settle_all = Engine.settle_each, Engine.settle_all

    def remembered(self, jobs):
        seen["engine"] = self
        return settle_each(self, jobs)

    def remembered_all(self):
        seen["engine"] = self
        return settle_all(self)

    bound = type(policy).completion_bound

    def compared(self, snap, job):
        got = bound(self, snap, job)
        engine = seen["engine"]
        if engine is not None and engine.snapshot().now == snap.now:
            seen["stale"] += sum(1 for j in engine.running.values() if j.anchor != snap.now)
            settle_all(engine)
            assert bound(self, snap, job) == got
            seen["bounds"] += got is not None
        return got

    monkeypatch.setattr(Engine, "settle_each", remembered)
    monkeypatch.setattr(Engine, "settle_all", remembered_all)
    monkeypatch.setattr(type(policy), "completion_bound", compared)
    simulate(narrow(themis1(seed=11, n=300, load=1.2)), 16, policy, predict=True)
    assert seen["bounds"] > 100
    assert seen["stale"] > 0 or policy.name == "fifo"  # WFQ left jobs of other queues as they were


# --- metrics ---------------------------------------------------------------------------


EXPECTED_KEYS = {
    "policy", "jobs", "gpus", "avg_jct", "p50_jct", "p99_jct", "makespan", "avg_pred_err", "p99_pred_err",
    "avg_signed_pred_err", "avg_unfairness", "p99_unfairness", "utilization", "avg_refreshes",
    "bound_violations", "jobs_with_bound", "events", "predictions", "wall_s",
}


@pytest.mark.parametrize("name,kw", _all_policies())
def test_summarize(name, kw):
    jobs = mixed(themis1(seed=61, n=60))
    result = simulate(jobs, 16, _make_policy(name, kw))
    s = summarize(result)
    assert EXPECTED_KEYS <= set(s)
    assert s["jobs"] == 60 and s["gpus"] == 16 and s["policy"] == result.policy["policy"]
    assert s["p99_jct"] >= s["p50_jct"] > 0
    assert s["p99_pred_err"] >= 0 and s["avg_pred_err"] >= 0
    assert 0 < s["utilization"] <= 1 + 1e-9
    jct = [r.finish - r.submit for r in result.records]
    assert s["avg_jct"] == pytest.approx(sum(jct) / len(jct))
    assert s["makespan"] == pytest.approx(max(r.finish for r in result.records) - min(r.submit for r in result.records))


def test_summarize_toy_numbers():
    # Two 1-GPU jobs at t=0 on one GPU under FIFO: JCTs 10 and 30, utilisation 100%.
    result = simulate([job_spec(1, service=10), job_spec(2, service=20)], 1, build_policy("fifo"))
    s = summarize(result)
    assert s["avg_jct"] == 20.0 and s["makespan"] == 30.0 and s["utilization"] == pytest.approx(1.0)
    assert s["avg_pred_err"] == 0.0 and s["p50_jct"] == 20.0


# --- input errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "jobs,capacity,fragment",
    [
        pytest.param([job_spec(1, service=1), job_spec(1, submit=1, service=1)], 1, "unique", id="duplicate-ids"),
        pytest.param([JobSpec(1, 0.0, 1.0, 4, linear_speedup(4), min_gpus=4)], 2, "needs at least", id="too-wide"),
        pytest.param([job_spec(1, service=1)], 0, "cluster has 0", id="no-gpus"),
        pytest.param([], 0, "at least one GPU", id="no-gpus-no-jobs"),
    ],
)
def test_simulate_input_errors(jobs, capacity, fragment):
    with pytest.raises(ValueError, match=fragment):
        simulate(jobs, capacity, build_policy("fifo"))


# --- a real trace ---------------------------------------------------------------------------


def test_philly_trace_fifo_64_gpus():
    from pcs_ray.workloads.traces import read_pcs_trace

    jobs = read_pcs_trace(PHILLY)
    assert len(jobs) == 2465
    result = simulate(jobs, 64, build_policy("fifo"), predict=False)
    # The work is counted, not timed (bench/sim_speed.py times replays): one decision per arrival and
    # per completion at most, FIFO asking for no reviews.
    assert len(jobs) <= result.events <= 2 * len(jobs)
    assert all(r.finish is not None for r in result.records)
    for r in result.records:
        assert r.jct >= r.min_runtime - 1e-6 * max(1.0, r.jct)
        assert r.start >= r.submit
    s = summarize(result)
    assert s["p99_jct"] >= s["p50_jct"] and 0 < s["utilization"] <= 1 + 1e-9


# --- regression: a job whose finish time comes back to an earlier value -------------------------


def _eta_revisit_jobs():
    """Found by tests/test_properties.py. Job 5 (17 s, up to 2 GPUs) runs on 1 GPU from t=1 with
    ETA 1 + 17 = 18, is paused at t=8 with 10 s left, resumes on 1 GPU at t=11 and grows to 2 GPUs
    at t=15 with 6 s left: its ETA is 15 + 6/2 = 18 again, exactly."""
    shape = [(0, 1, 1), (0, 1, 1), (0, 15, 1), (0, 22, 2), (0, 56, 4), (0, 17, 2), (8, 101, 2), (0, 101, 4)]
    return [job_spec(i, submit=t, service=s, max_gpus=m) for i, (t, s, m) in enumerate(shape)]


def _eta_revisit_policy():
    return WFQPolicy(WFQConfig((100.0, math.inf), (0.3, 0.7), zeta_min=0.9, delta=0.0))


@pytest.mark.parametrize("predict", [False, True], ids=["no-predictions", "predictions"])
def test_job_whose_eta_returns_to_an_earlier_value_finishes_once(predict):
    result = simulate(_eta_revisit_jobs(), 12, _eta_revisit_policy(), predict=predict)
    finish = {r.job_id: r.finish for r in result.records}
    assert finish[5] == pytest.approx(18.0)
    assert all(f is not None for f in finish.values())


def test_forward_play_processes_are_spawned_while_other_threads_run():
    """fork would copy another thread's locks mid-state (Ray, a progress bar)."""
    import threading

    import pcs_ray.sim.run as sim

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert sim._start_method() == "spawn"
    finally:
        stop.set()
        t.join()
