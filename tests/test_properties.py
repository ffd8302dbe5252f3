"""Property tests: random small workloads through every policy.

A checking wrapper sits between the engine and the policy. On every
``allocate`` (the engine's rounds and the prediction forks alike) it checks
capacity and demand with ``validate_allocation`` and that the allocation is
work-conserving; on the real engine it also records the allocation timeline,
from which each job's progress is integrated independently of the engine.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.policies import POLICIES, WFQConfig, WFQPolicy, build_policy
from pcs_ray.policies.base import SchedulingPolicy, validate_allocation
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.demand import SubLinearDemand, speedup_table

EXAMPLES = 60
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class CheckedPolicy(SchedulingPolicy):
    """Delegates to ``inner``; asserts the allocation contract on every call."""

    def __init__(self, inner: SchedulingPolicy, record: bool) -> None:
        self.inner = inner
        self.name = inner.name
        self.reads_progress = inner.reads_progress
        self.record = record
        self.timeline: list[tuple[float, dict[int, int]]] = []
        self.calls = 0

    def make_index(self, jobs):
        return self.inner.make_index(jobs)

    def allocate(self, snap):
        alloc = self.inner.allocate(snap)
        jobs = list(snap.jobs)
        validate_allocation(snap, alloc, self.name)
        ids = [j.spec.job_id for j in jobs]
        assert len(set(ids)) == len(ids)
        free = snap.capacity - sum(alloc.values())
        assert free >= 0
        if free > 0 and self.inner.work_conserving:
            for j in jobs:
                spec = j.spec
                have = alloc.get(spec.job_id, 0)
                if have == 0:
                    # Could it start on the free GPUs? Rigid jobs need all of theirs, others min_gpus.
                    need = spec.max_gpus if spec.rigid else spec.min_gpus
                    assert need > free, (
                        f"{self.name}: {free} GPUs idle at t={snap.now} while job {spec.job_id} "
                        f"({spec.min_gpus}..{spec.max_gpus}) waits; alloc={alloc}"
                    )
                else:
                    assert have == spec.max_gpus, (
                        f"{self.name}: {free} GPUs idle at t={snap.now} while job {spec.job_id} runs on "
                        f"{have} of up to {spec.max_gpus}; alloc={alloc}"
                    )
        self.calls += 1
        if self.record:
            self.timeline.append((snap.now, {k: v for k, v in alloc.items() if v}))
        return alloc

    def next_review(self, snap, alloc):
        return self.inner.next_review(snap, alloc)

    def completion_bound(self, snap, job):
        return self.inner.completion_bound(snap, job)

    def describe(self):
        return self.inner.describe()


POLICY_FACTORIES = {name: (lambda name=name: build_policy(name)) for name in POLICIES}
POLICY_FACTORIES.update({
    "las-threshold50": lambda: build_policy("las", threshold=50.0),
    "themis-lease40": lambda: build_policy("themis-lease", lease=40.0),
    "themis-q40": lambda: build_policy("themis", quantum=40.0),
    "pcs-3q-zeta": lambda: WFQPolicy(WFQConfig((20.0, 200.0, math.inf), (0.6, 0.3, 0.1), 0.8, 0.2)),
    "pcs-2q-zeta-delta0": lambda: WFQPolicy(WFQConfig((100.0, math.inf), (0.3, 0.7), 0.9, 0.0)),
})


@st.composite
def workloads(draw):
    capacity = draw(st.integers(1, 16))
    n = draw(st.integers(5, 25))
    jobs = []
    for jid in range(n):
        submit = draw(st.one_of(st.integers(0, 30).map(float), st.floats(0.0, 400.0)))
        service = draw(st.one_of(st.integers(1, 60).map(float), st.floats(0.5, 600.0)))
        max_gpus = draw(st.integers(1, 8))
        kind = draw(st.sampled_from(["elastic", "elastic", "rigid", "min"]))
        if kind == "rigid":
            max_gpus = min(max_gpus, capacity)
            min_gpus = max_gpus
        elif kind == "min":
            min_gpus = draw(st.integers(1, min(max_gpus, capacity)))
        else:
            min_gpus = 1
        alpha = draw(st.sampled_from([None, None, 0.5, 0.7, 0.9]))
        table = linear_speedup(max_gpus) if alpha is None else speedup_table(SubLinearDemand(alpha), max_gpus)
        jobs.append(JobSpec(jid, submit, service, max_gpus, table, min_gpus=min_gpus))
    return jobs, capacity


def _progress(spec: JobSpec, timeline, finish: float) -> tuple[float, float]:
    """(1-GPU-seconds of work done, GPU-seconds held) by ``spec`` per the recorded allocations."""
    work = held = 0.0
    for (t0, alloc), (t1, _) in zip(timeline, timeline[1:] + [(math.inf, {})]):
        n = alloc.get(spec.job_id, 0)
        if not n:
            continue
        lo, hi = max(t0, spec.submit_time), min(t1, finish)
        if hi > lo:
            work += spec.speedup[n] * (hi - lo)
            held += n * (hi - lo)
    return work, held


@pytest.mark.parametrize("policy_name", sorted(POLICY_FACTORIES))
@SETTINGS
@given(workload=workloads())
def test_random_workloads(policy_name, workload):
    jobs, capacity = workload
    make = POLICY_FACTORIES[policy_name]

    # Run 1: no predictions, timeline recorded (every allocate call is the real engine's).
    rec = CheckedPolicy(make(), record=True)
    result = simulate(jobs, capacity, rec, predict=False)
    by_id = {s.job_id: s for s in jobs}
    assert rec.calls > 0
    assert rec.timeline == sorted(rec.timeline, key=lambda x: x[0])

    busy_total = 0.0
    for r in result.records:
        spec = by_id[r.job_id]
        # Every job completes, after it was submitted and started.
        assert r.finish is not None and math.isfinite(r.finish)
        assert r.start is not None and r.submit <= r.start <= r.finish
        # No faster than its best allocation allows.
        assert r.jct >= spec.min_runtime * (1 - 1e-9) - 1e-9, (r, spec)
        # Work conserved: speedup(alloc) integrated over its life equals its service.
        work, held = _progress(spec, rec.timeline, r.finish)
        assert work == pytest.approx(spec.service, rel=1e-6, abs=1e-6), (r.job_id, work, spec.service)
        busy_total += held

    # Capacity x makespan bounds the busy GPU-seconds, and the engine's utilisation
    # timeline integrates to the same busy GPU-seconds as the recorded allocations.
    first = min(s.submit_time for s in jobs)
    last = max(r.finish for r in result.records)
    assert capacity * (last - first) >= busy_total * (1 - 1e-9) - 1e-6
    tl = result.utilization_timeline
    engine_busy = sum(n * (min(t1, last) - t0) for (t0, n), (t1, _) in zip(tl, tl[1:] + [(last, 0)]) if t1 > t0)
    assert engine_busy == pytest.approx(busy_total, rel=1e-6, abs=1e-6)
    assert all(0 <= n <= capacity for _, n in tl)

    # Run 2: with predictions; the checks also run inside every prediction fork.
    chk = CheckedPolicy(make(), record=False)
    predicted = simulate(jobs, capacity, chk, predict=True)
    assert [(r.job_id, r.start, r.finish) for r in predicted.records] == [
        (r.job_id, r.start, r.finish) for r in result.records
    ]
    for r in predicted.records:
        spec = by_id[r.job_id]
        # A prediction is a finish time the job could actually reach.
        assert r.first_pred >= r.submit + spec.min_runtime * (1 - 1e-9) - 1e-9
        if r.bound is not None:
            assert r.finish <= r.bound + 1e-6 * max(1.0, r.bound), r


def _schedule(result):
    return [(r.job_id, r.start, r.finish) for r in result.records]


@SETTINGS
@given(workload=workloads())
def test_wfq_single_queue_is_fifo_on_random_workloads(workload):
    """WFQ with one queue and zeta_min = 0 is FIFO, rigid and min-GPU jobs included."""
    jobs, capacity = workload
    fifo = simulate(jobs, capacity, build_policy("fifo"), predict=False)
    wfq = simulate(jobs, capacity, WFQPolicy(WFQConfig((math.inf,), (1.0,), 0.0, 0.0)), predict=False)
    assert _schedule(wfq) == _schedule(fifo)


def _elastic(jobs):
    """Every job elastic from one GPU, sizes made distinct (one WFQ queue per job)."""
    out = []
    for k, s in enumerate(jobs):
        out.append(JobSpec(s.job_id, s.submit_time, s.service + k * 1e-3, s.max_gpus, s.speedup, min_gpus=1))
    return out


@SETTINGS
@given(workload=workloads())
def test_one_queue_per_job_equal_weights_is_fair_share(workload):
    jobs, capacity = workload
    jobs = _elastic(jobs)
    sizes = sorted(j.service for j in jobs)
    assert len(set(sizes)) == len(sizes)
    thresholds = tuple((a + b) / 2 for a, b in zip(sizes, sizes[1:])) + (math.inf,)
    wfq = WFQPolicy(WFQConfig(thresholds, (1.0,) * len(thresholds)))
    got = simulate(jobs, capacity, wfq, predict=False)
    fair = simulate(jobs, capacity, build_policy("fair"), predict=False)
    assert [r.finish for r in got.records] == [r.finish for r in fair.records]


@SETTINGS
@given(workload=workloads())
def test_fifo_predictions_exact_for_elastic_jobs(workload):
    """FIFO never delays a job for a later one when every job can start on one GPU,
    so each prediction made at submission is the finish time."""
    jobs, capacity = workload
    result = simulate(_elastic(jobs), capacity, build_policy("fifo"), predict=True)
    for r in result.records:
        assert r.first_pred == r.finish, r
        assert r.refreshes == 0, r
