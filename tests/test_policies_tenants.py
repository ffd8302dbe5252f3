"""The two-level tenant policy: quotas, lending by weight, reclaiming, the minimum runtime, a live
coordinator lending and reclaiming, and the worst-case bound. Expected counts are worked out by hand from
the rules in ``pcs_ray.policies.tenants``."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import pytest

from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.policies import build_policy
from pcs_ray.policies.tenants import TenantPolicy, tenant_shares, weighted_fill
from pcs_ray.sim.engine import Engine
from pcs_ray.sim.run import simulate
from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.tenants.spec import Tenant, TenantsFile
from pcs_ray.workloads.generator import generate_workload
from builders import Clock, coordinator, job_spec, running

#: A job of up to four GPUs, any of them, with a thousand GPU-seconds of work (``tenant=`` names its tenant).
spec = partial(job_spec, service=1000.0, max_gpus=4)

INF = math.inf


def policy(inner="fifo", **file) -> TenantPolicy:
    return build_policy("tenants", inner=inner, tenants=file)


@pytest.mark.parametrize("amount, wants, weights, expected", [
    pytest.param(8, [8, 8], [1, 1], [4, 4], id="equal-weights-split-evenly"),
    pytest.param(8, [2, 8], [1, 1], [2, 6], id="a-small-want-drops-out-and-frees-the-rest"),
    pytest.param(9, [9, 9], [2, 1], [6, 3], id="by-weight"),
    pytest.param(7, [9, 9], [1, 1], [4, 3], id="an-odd-GPU-to-the-earlier"),
    pytest.param(5, [0, 9, 1], [1, 1, 1], [0, 4, 1], id="no-want-no-GPU"),
    pytest.param(3, [1, 1], [1, 1], [1, 1], id="more-than-wanted-stays-out"),
])
def test_weighted_fill(amount, wants, weights, expected):
    assert weighted_fill(amount, wants, weights) == expected


@pytest.mark.parametrize("tenants, demand, floors, expected", [
    # Quotas first: a has demand 2 of its 4, b gets its 4, the 2 idle GPUs of a's quota go to b.
    pytest.param([Tenant(quota=4), Tenant(quota=4)], [2, 8], [0, 0], [2, 6], id="idle-quota-is-lent"),
    # 8 idle GPUs of c's quota split 3:1 by weight between a and b (both want 8 more).
    pytest.param([Tenant(quota=4, weight=3), Tenant(quota=4), Tenant(quota=8)], [16, 16, 0], [0, 0, 0],
                 [10, 6, 0], id="lent-by-weight"),
    pytest.param([Tenant(quota=4, borrow_limit=1), Tenant(quota=4)], [16, 2], [0, 0], [5, 2],
                 id="a-borrowing-limit-leaves-GPUs-idle"),
    # b's young runs hold 6 of the 8: a gets only 2 of its quota until they age.
    pytest.param([Tenant(quota=4), Tenant(quota=4)], [4, 8], [0, 6], [2, 6], id="young-runs-hold-their-GPUs"),
    pytest.param([Tenant(quota=2), Tenant(quota=2)], [2, 2], [0, 0], [2, 2], id="no-more-than-demand"),
])
def test_tenant_shares(tenants, demand, floors, expected):
    """On a cluster the size of the summed quotas."""
    assert tenant_shares(sum(t.quota for t in tenants), tenants, demand, floors) == expected


def test_a_borrower_uses_idle_quota_and_the_lender_takes_it_back():
    """a's 8-GPU job borrows b's idle 4; when b submits, a is shrunk to its quota at once."""
    jobs = [spec(0, tenant="a", service=8000, max_gpus=8), spec(1, tenant="b", submit=100, service=400)]
    rec = {r.job_id: r for r in simulate(jobs, 8, policy(tenants={"a": {"quota": 4}, "b": {"quota": 4}})).records}
    assert rec[1].start == 100 and rec[1].finish == 200  # b got its 4 GPUs on arrival
    assert rec[0].finish == 200 + (8000 - 100 * 8 - 100 * 4) / 8  # 8 GPUs, except 100 s on 4
    flat = {r.job_id: r for r in simulate(jobs, 8, build_policy("fifo")).records}
    assert flat[1].start == 1000  # without tenants b waits for a's job


def test_inside_a_tenant_the_inner_policy_divides_its_share():
    """a's two jobs share a's 6 GPUs FIFO (first one 4, second 2); b's job is held to its quota."""
    p = policy(tenants={"a": {"quota": 6}, "b": {"quota": 2}})
    jobs = [JobState.new(spec(0, tenant="a")), JobState.new(spec(1, tenant="a", submit=1)),
            JobState.new(spec(2, tenant="b", max_gpus=8))]
    assert p.allocate(Snapshot(10.0, 8, jobs)) == {0: 4, 1: 2, 2: 2}


def test_rigid_jobs_that_do_not_fit_a_share_give_its_GPUs_back():
    """a's share would be 4+1 but its 4-GPU rigid jobs use 4; the idle one goes to b, which can use it."""
    p = policy(tenants={"a": {"quota": 5}, "b": {"quota": 3}})
    jobs = [JobState.new(spec(0, tenant="a", rigid=True)), JobState.new(spec(1, tenant="a", rigid=True, submit=1)),
            JobState.new(spec(2, tenant="b", max_gpus=8))]
    assert p.allocate(Snapshot(0.0, 8, jobs)) == {0: 4, 2: 4}


def test_jobs_of_undeclared_tenants_only_borrow():
    p = policy(tenants={"a": {"quota": 8}})
    jobs = [JobState.new(spec(0, tenant="a", max_gpus=6)), JobState.new(spec(1, tenant="", max_gpus=8))]
    assert p.allocate(Snapshot(0.0, 8, jobs)) == {0: 6, 1: 2}


@pytest.mark.parametrize("inner", ["fifo", "srsf", "pcs-bal", "themis", "las"])
def test_without_tenants_it_is_the_inner_policy(inner):
    jobs = generate_workload("themis1", 60, 16, load=1.5, seed=3)
    wrapped = simulate(jobs, 16, build_policy("tenants", inner=inner)).records
    plain = simulate(jobs, 16, build_policy(inner)).records
    assert [(r.start, r.finish, r.first_pred, r.preemptions) for r in wrapped] == \
           [(r.start, r.finish, r.first_pred, r.preemptions) for r in plain]


def test_a_forked_tenant_policy_forks_a_stateful_inner():
    p = build_policy("tenants", inner="vahrm")
    assert p.fork() is not p and p.fork().inner is not p.inner
    pure = build_policy("tenants")
    assert pure.fork() is pure


# -- the minimum runtime -------------------------------------------------------------------------


def thrash_stream() -> list[JobSpec]:
    """A long job in the big queue, short ones arriving every minute in the small queue: under WFQ each
    arrival takes GPUs from the long job and each finish gives them back."""
    return [JobSpec(k, 60.0 * k, 20000.0 if k % 4 == 0 else 200.0, 8, linear_speedup(8)) for k in range(40)]


def decisions(policy, jobs, capacity=8):
    """Every GPU count a run lost, with its age then: ``(job, age, min runtime)``; and the preemptions."""
    engine = Engine(capacity, policy)
    arrivals = sorted(jobs, key=lambda s: s.submit_time)
    i, lost = 0, []
    while i < len(arrivals) or engine.active:
        t = engine.next_event(arrivals[i].submit_time if i < len(arrivals) else INF)
        engine.remove(engine.advance(t))
        while i < len(arrivals) and arrivals[i].submit_time <= t:
            engine.admit(arrivals[i])
            i += 1
        before = {jid: (j.alloc, j.since) for jid, j in engine.active.items()}
        engine.reallocate()
        for jid, (n, since) in before.items():
            job = engine.active[jid]
            if n and job.alloc < n:
                lost.append((jid, t - since))
    return lost


def wfq_by_size():
    from pcs_ray.policies import WFQConfig, WFQPolicy

    return WFQPolicy(WFQConfig((1000.0, 5000.0, INF), (1.0, 1.0, 1.0)))


def test_no_run_younger_than_its_min_runtime_is_shrunk_or_preempted():
    jobs = thrash_stream()
    plain = decisions(wfq_by_size(), jobs)
    assert sum(1 for _, age in plain if age < 300) >= 20  # the stream thrashes without the rule
    guarded = decisions(TenantPolicy(wfq_by_size(), TenantsFile(min_runtime_s=300)), jobs)
    assert guarded and min(age for _, age in guarded) >= 300 - 1e-6
    asked = [replace(s, min_runtime_s=600.0) if s.job_id % 2 else s for s in jobs]
    per_job = decisions(TenantPolicy(wfq_by_size(), TenantsFile(min_runtime_s=300, max_min_runtime_s=600)), asked)
    assert per_job and all(age >= (600 if jid % 2 else 300) - 1e-6 for jid, age in per_job)


def test_a_young_run_keeps_its_gpus_unless_a_lender_reclaims():
    jobs = [spec(0, tenant="a", service=8000, max_gpus=8), spec(1, tenant="b", submit=100, service=400)]
    tenants = {"a": {"quota": 4}, "b": {"quota": 4}}
    reclaim = {r.job_id: r for r in simulate(jobs, 8, policy(tenants=tenants, min_runtime_s=1000)).records}
    assert reclaim[1].start == 100  # the operator lets a lender reclaim from young runs
    wait = {r.job_id: r for r in simulate(jobs, 8, policy(tenants=tenants, min_runtime_s=1000,
                                                          reclaim_young_runs=False)).records}
    assert wait[1].start == 1000 and wait[0].finish == 1000  # b waits for a's run to be 1000 s old
    assert wait[1].first_pred == wait[1].finish  # the prediction played the rule


def test_a_young_run_grows_into_gpus_nobody_else_can_use():
    p = policy(min_runtime_s=600)
    young = running(spec(0, tenant="", max_gpus=8), alloc=4, since=0.0)
    assert p.allocate(Snapshot(10.0, 8, [young])) == {0: 8}


def test_the_review_comes_when_a_protection_ends():
    p = policy(min_runtime_s=600)
    jobs = [running(spec(0, tenant="", max_gpus=8), alloc=8, since=100.0), JobState.new(spec(1, tenant="", submit=5))]
    snap = Snapshot(200.0, 8, jobs)
    alloc = p.allocate(snap)
    assert alloc == {0: 8} and p.next_review(snap, alloc) == 700.0


# -- the live coordinator ----------------------------------------------------------------------


def test_the_live_coordinator_lends_and_reclaims_by_tenant(tmp_path):
    """Job files' tenants reach the live model: a's job borrows b's idle GPUs, and b's submission takes them back."""
    policy = build_policy("tenants", inner="fifo", tenants={"tenants": {"a": {"quota": 2}, "b": {"quota": 2}}})
    core = coordinator(policy=policy, checkpoint_root=str(tmp_path), clock=Clock())
    a, _ = core.submit({"workload": "tiny", "steps": 10_000, "gpus": 4, "min_gpus": 1, "step_time": 0.1, "tenant": "a"})
    assert len(core.model.plan()[a]) == 4
    b, _ = core.submit({"workload": "tiny", "steps": 100, "gpus": 2, "step_time": 0.1, "tenant": "b"})
    plan = core.model.plan()
    assert len(plan[a]) == 2 and len(plan[b]) == 2


# -- the worst-case bound --------------------------------------------------------------------------


def tenant_stream(seed: int, load: float) -> list[JobSpec]:
    """A themis1-like stream of 1-8 GPU jobs, each in one of three tenants (one of them a guest)."""
    jobs = generate_workload("themis1", 120, 16, load=load, seed=seed)
    out = []
    for j in jobs:
        m = 1 + j.job_id % 8
        out.append(replace(j, max_gpus=m, min_gpus=1, speedup=linear_speedup(m), tenant="abc"[j.job_id % 3]))
    return out


@pytest.mark.parametrize("inner", ["pcs-bal", "fifo"])
@pytest.mark.parametrize("file", [
    pytest.param({"tenants": {"a": {"quota": 8}, "b": {"quota": 6}}}, id="quotas"),
    pytest.param({"tenants": {"a": {"quota": 8}, "b": {"quota": 6, "borrow_limit": 2}}, "min_runtime_s": 400},
                 id="quotas-min-runtime"),
    pytest.param({"tenants": {"a": {"quota": 8}, "b": {"quota": 6}}, "min_runtime_s": 400,
                  "reclaim_young_runs": False}, id="no-reclaim"),
    pytest.param({"min_runtime_s": 400}, id="min-runtime-only"),
])
@pytest.mark.parametrize("seed,load", [(71, 0.9), (72, 1.4)])
def test_the_tenant_bound_holds(inner, file, seed, load):
    """Every job with a bound finishes by it; a guest (tenant c, no quota) gets none."""
    result = simulate(tenant_stream(seed, load), 16, build_policy("tenants", inner=inner, tenants=file))
    bounded = [r for r in result.records if r.bound is not None]
    assert len(bounded) >= 40  # the check is not vacuous
    late = [(r.job_id, r.finish, r.bound) for r in bounded if r.finish > r.bound + 1e-6 * max(1.0, r.bound)]
    assert not late
    if file.get("tenants"):
        guests = {s.job_id for s in tenant_stream(seed, load) if s.tenant == "c"}
        assert all(r.bound is None for r in result.records if r.job_id in guests)


def test_reusing_an_inner_decision_changes_nothing():
    """The tenant level reuses a tenant's last inner decision while its GPUs and jobs stay the same; a run
    that decides afresh every time (an inner policy that does not say ``membership_only``) is identical."""
    from pcs_ray.policies import WFQPolicy

    calls = {True: 0, False: 0}

    class Counted(WFQPolicy):
        def allocate(self, snap):
            calls[self.membership_only] += 1
            return super().allocate(snap)

    class Afresh(Counted):
        membership_only = False

    file = {"tenants": {"a": {"quota": 8}, "b": {"quota": 6}, "c": {"quota": 2}}}
    jobs = tenant_stream(73, 1.2)
    config = build_policy("pcs-bal").config
    fresh = simulate(jobs, 16, build_policy("tenants", inner=Afresh(config), tenants=file), predict=True)
    reused = simulate(jobs, 16, build_policy("tenants", inner=Counted(config), tenants=file), predict=True)
    key = lambda r: (r.job_id, r.start, r.finish, r.first_pred, r.last_pred, r.preemptions)  # noqa: E731
    assert [key(r) for r in fresh.records] == [key(r) for r in reused.records]
    assert 0 < calls[True] < 0.8 * calls[False]  # a fifth of the inner decisions at least were reused
