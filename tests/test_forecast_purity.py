"""Forecasts never change the schedule: every registered policy, on several placements and under both
semantics, schedules the same jobs at the same times with predictions on and off.

The workloads are small and made to bite where a policy could keep state: rigid jobs of eight
workloads (a power-aware policy costs a workload's first run at TDP and later ones at its measured
power), a power budget that holds jobs back, and more demand than GPUs (backfilling and skipping).
"""

from __future__ import annotations

import inspect
import pickle
from dataclasses import replace

import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.job import JobSpec, linear_speedup
from pcs_ray.placement.configure import configure_placement
from pcs_ray.policies import POLICIES, build_policy, policy_names
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.power.profile import load_power_profile
from pcs_ray.semantics import ordered_policies, with_semantics
from pcs_ray.simulator import simulate
from workloads.generator import generate_workload

GPUS = 8
BUDGET_W = 1300.0  # about four GPUs at TDP, seven at measured power: first runs cost more room
PLACEMENTS = (None, "packed-sticky", "random-nonsticky", "pm-first", "lowest-energy", "vahrm")
SPEC = ClusterSpec.homogeneous(GPUS, 4)
POWER = load_power_profile("longhorn").sample(SPEC, 1)


def jobs(seed: int, load: float) -> list[JobSpec]:
    """Twelve rigid jobs of 1-4 GPUs over eight workloads (two per class)."""
    out = []
    for j in generate_workload("themis1", 12, GPUS, load=load, seed=seed):
        m = 1 + (j.job_id * 5 + seed) % 4
        k = (j.job_id * 3 + seed) % 8
        out.append(replace(j, max_gpus=m, min_gpus=m, speedup=linear_speedup(m), job_class="ABCD"[k % 4],
                           model=f"w{k}"))
    return out


WORKLOADS = {"light": (0, 1.5), "heavy": (1, 3.0)}


def policy(name: str) -> SchedulingPolicy:
    """``name`` as the simulate command builds it: power-aware policies get predicted power and the budget."""
    cls = POLICIES.get(name)
    if cls is not None and "budget_w" in inspect.signature(cls.__init__).parameters:
        predicted = {c: float(v.mean()) for c, v in POWER.predicted.items()}
        return build_policy(name, power=predicted, tdp_w=POWER.tdp_w, budget_w=BUDGET_W)
    return build_policy(name)


def placement(name: str | None):
    if name is None:
        return None
    setup = configure_placement(SPEC, name, profile="longhorn", profile_seed=1)
    setup.cluster = POWER.onto(setup.cluster)
    return setup.new()


def schedule(name: str, placed: str | None, semantics: str, workload: str, predict: bool) -> tuple:
    result = simulate(jobs(*WORKLOADS[workload]), GPUS, with_semantics(policy(name), semantics), predict=predict,
                      placement=placement(placed))
    rows = [(r.job_id, r.start, r.finish, r.preemptions) for r in result.records]
    return rows, result.utilization_timeline, result.predictions


def cases():
    for name in policy_names():
        for semantics in ("continuous", "blox"):
            if semantics == "blox" and name not in ordered_policies():
                continue
            for placed in PLACEMENTS:
                yield pytest.param(name, placed, semantics, id=f"{name}-{placed or 'none'}-{semantics}")


@pytest.mark.parametrize("name, placed, semantics", cases())
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_predictions_leave_the_schedule_unchanged(name, placed, semantics, workload):
    off = schedule(name, placed, semantics, workload, predict=False)
    on = schedule(name, placed, semantics, workload, predict=True)
    assert on[:2] == off[:2]
    assert on[2] == len(on[0]) and off[2] == 0  # every arrival was forecast with predict on, none with it off


def test_the_contract_catches_a_policy_that_forecasts_share(monkeypatch):
    """Were forks to share the live policy object, the contract would see the power-aware policies'
    schedules change: the workloads make their state matter."""
    monkeypatch.setattr(SchedulingPolicy, "fork", lambda self: self, raising=False)
    for cls in POLICIES.values():
        monkeypatch.setattr(cls, "fork", lambda self: self, raising=False)
    changed = [name for name in ("vahrm", "vu-fcfs", "cgva-fcfs-b")
               if schedule(name, None, "continuous", "heavy", True)[:2]
               != schedule(name, None, "continuous", "heavy", False)[:2]]
    assert changed == ["vahrm", "vu-fcfs", "cgva-fcfs-b"]


@pytest.mark.parametrize("name", policy_names())
def test_a_policy_that_is_its_own_fork_keeps_no_state(name):
    """A policy that forward plays share (``fork`` returns itself) is left as it was by a whole run with
    forecasts: a policy that learns as it decides must hand each play its own copy instead."""
    live = policy(name)
    if live.fork() is not live:
        assert type(live.fork()) is type(live) and live.fork() is not live.fork()
        return
    before = pickle.dumps(vars(live))
    simulate(jobs(*WORKLOADS["heavy"]), GPUS, live, predict=True, placement=placement("pm-first"))
    assert pickle.dumps(vars(live)) == before
