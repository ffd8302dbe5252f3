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
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.placement.configure import configure_placement
from pcs_ray.policies import POLICIES, build_policy, policy_names
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.power.profile import load_power_profile
from pcs_ray.sim.semantics import ordered_policies, with_semantics
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.generator import generate_workload

GPUS = 8
BUDGET_W = 1300.0  # with idle GPUs at 60 W: three GPUs at TDP, about six at measured power: first runs cost more room
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
                           model=f"w{k}", tenant="abc"[j.job_id % 3]))
    return out


WORKLOADS = {"light": (0, 1.5), "heavy": (1, 3.0)}
#: Tenants for the jobs (c is declared nowhere: it only borrows), and young runs kept 2 minutes.
TENANTS = {"tenants": {"a": {"quota": 4}, "b": {"quota": 2, "weight": 2}}, "min_runtime_s": 120}


def policy(name: str) -> SchedulingPolicy:
    """``name`` as the simulate command builds it: power-aware policies get predicted power and the budget."""
    cls = POLICIES.get(name)
    if cls is not None and "budget_w" in inspect.signature(cls.__init__).parameters:
        predicted = {c: float(v.mean()) for c, v in POWER.predicted.items()}
        return build_policy(name, power=predicted, tdp_w=POWER.tdp_w, budget_w=BUDGET_W, gpu_power=POWER.predicted,
                            idle_w=POWER.idle_w)
    if name == "tenants":
        return build_policy(name, tenants=TENANTS)
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


@pytest.mark.parametrize("name, placed, semantics", list(cases()))
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_predictions_leave_the_schedule_unchanged(name, placed, semantics, workload):
    off = schedule(name, placed, semantics, workload, predict=False)
    on = schedule(name, placed, semantics, workload, predict=True)
    assert on[:2] == off[:2]
    assert on[2] == len(on[0]) and off[2] == 0  # every arrival was forecast with predict on, none with it off


def test_the_contract_catches_a_policy_that_forecasts_share(monkeypatch):
    """Were forks to share the live policy object, the contract would see the power-aware policies'
    schedules, and the live coordinator's decisions, change: the workloads make their state matter."""
    monkeypatch.setattr(SchedulingPolicy, "fork", lambda self: self, raising=False)
    for cls in POLICIES.values():
        monkeypatch.setattr(cls, "fork", lambda self: self, raising=False)
    changed = [name for name in ("vahrm", "vu-fcfs", "cgva-fcfs-b")
               if schedule(name, None, "continuous", "heavy", True)[:2]
               != schedule(name, None, "continuous", "heavy", False)[:2]]
    assert changed == ["vahrm", "vu-fcfs", "cgva-fcfs-b"]
    live = [name for name in ("vahrm", "cgva-fcfs-b") if coordinator_actions(name, True) != coordinator_actions(name, False)]
    assert live == ["vahrm", "cgva-fcfs-b"]


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


# -- the live coordinator ------------------------------------------------------------------------------


def coordinator_actions(name: str, forecasts: bool) -> list[tuple]:
    """A live coordinator's decisions over submissions of eight workloads and run ends, with its forecasts
    made (every submission's own, then a refresh of all) or never made."""
    import random

    from pcs_ray.contract import StartRun, StopRun
    from builders import placed_core

    core, clock = placed_core(POWER.onto(SPEC), policy(name), workloads=tuple(f"w{k}" for k in range(8)))
    rng = random.Random(7)
    log = []

    def note(actions):
        for a in actions:
            if isinstance(a, StartRun):
                log.append(("start", a.job_id, a.kind, tuple((s.node, s.index) for s in a.request.gpus)))
            elif isinstance(a, StopRun):
                log.append(("stop", a.job_id, a.reason))

    for _ in range(30):
        clock.t += rng.uniform(1.0, 60.0)
        running = [j for j in core.active.values() if j.state.holds_gpus]
        if running and rng.random() < 0.4:
            done = rng.choice(running)
            note(core.run_ended(done.job_id, done.attempt, "finished", done.spec.steps))
        else:
            gpus = rng.choice([1, 2, 4])
            jid, actions = core.submit({"workload": f"w{rng.randrange(8)}", "steps": rng.randrange(50, 3000), "gpus": gpus,
                                        "min_gpus": gpus, "class": rng.choice("ABCD"), "step_time": 0.1},
                                       refresh=forecasts)
            note(actions)
        if forecasts:
            core.play_refresh()
    return log


@pytest.mark.parametrize("name", ["vahrm", "vu-fcfs", "cgva-fcfs-b", "pcs-bal", "fifo"])
def test_the_live_coordinators_decisions_are_the_same_with_forecasts_on_and_off(name):
    on, off = coordinator_actions(name, True), coordinator_actions(name, False)
    assert on == off and sum(1 for a in on if a[0] == "start") >= 10
