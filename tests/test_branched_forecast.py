"""A submission's forecast branched from the latest refresh play: the very number a fresh play gives
when nothing moved since the refresh (and, for the simulator's own engine, wherever the engine's
rules let the branch point be stepped to the arrival); a fresh play where the refresh is unusable;
branch points that hold only the jobs still in their play."""

from __future__ import annotations

import random

import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator import Coordinator
from pcs_ray.coordinator.config import coordinator_policy
from pcs_ray.forecast import BranchPoints
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.policies import build_policy
from pcs_ray.sim.engine import Engine
from builders import Clock, placed_core, random_submission, submit_random, unequal_cluster, whole_play


def make(cluster: ClusterSpec, policy: str, **options) -> tuple[Coordinator, Clock]:
    """A placed core that builds the policies a configuration change asks for."""
    return placed_core(cluster, policy, policies=coordinator_policy, **options)


def refresh(core: Coordinator) -> None:
    """What the actor's loop does at most once a second: a play outside the lock, then its results."""
    began, play = core.begin_play_refresh()
    core.end_play_refresh(began, play())


@pytest.mark.parametrize("cluster, policy", [
    (ClusterSpec.homogeneous(16, 4), "pcs-bal"), (unequal_cluster(), "pcs-bal"), (unequal_cluster(), "fifo"),
    (ClusterSpec.homogeneous(16, 4), "pcs-jct"),
], ids=["uniform-pcs-bal", "placed-pcs-bal", "placed-fifo", "uniform-pcs-jct"])
def test_a_branched_forecast_is_the_fresh_plays_number_when_nothing_moved_since_the_refresh(cluster, policy):
    core, clock = make(cluster, policy)
    rng = random.Random(policy)
    bases = []
    for _ in range(25):
        for _ in range(rng.randrange(1, 4)):
            clock.t += rng.uniform(0.0, 20.0)
            core.submit(random_submission(rng), refresh=False)
        clock.t += 1.0
        refresh(core)
        for _ in range(3):  # the same clock as the refresh: the state is the refresh's plus the jobs since
            jid, _ = core.submit(random_submission(rng))
            got = core.jobs[jid]
            bases.append(got.forecast_basis)
            assert got.predicted == whole_play(core)[jid]
            assert (got.refresh_age == 0.0) if got.forecast_basis == "branch" else got.refresh_age is None
    assert bases.count("branch") >= 15, bases  # waiting jobs branch; those that start at once are played fresh


def test_a_forecast_is_played_fresh_without_a_usable_refresh():
    core, clock = make(ClusterSpec.homogeneous(8, 4), "pcs-bal", branch_max_age_s=5.0)
    rng = random.Random(2)
    for _ in range(30):
        clock.t += 1.0
        core.submit(random_submission(rng), refresh=False)
    first, _ = core.submit(random_submission(rng))
    assert core.jobs[first].forecast_basis == "fresh"  # no refresh yet
    refresh(core)
    jid, _ = core.submit(random_submission(rng))
    assert core.jobs[jid].forecast_basis == "branch"

    refresh(core)
    clock.t += 5.0  # as old as the bound allows: no longer usable
    late, _ = core.submit(random_submission(rng))
    assert core.jobs[late].forecast_basis == "fresh" and core.jobs[late].predicted == whole_play(core)[late]

    refresh(core)
    core.set_policy("pcs-jct")  # a configuration change: the refresh played the old policy
    swapped, _ = core.submit(random_submission(rng))
    assert core.jobs[swapped].forecast_basis == "fresh"
    assert core.jobs[swapped].predicted == whole_play(core)[swapped]

    began, play = core.begin_play_refresh()
    core.set_policy("pcs-bal")  # changed while the refresh played: its branch points are not kept
    core.end_play_refresh(began, play())
    again, _ = core.submit(random_submission(rng))
    assert core.jobs[again].forecast_basis == "fresh"

    never, clock = make(ClusterSpec.homogeneous(8, 4), "pcs-bal", branch_max_age_s=0.0)
    for _ in range(30):
        never.submit(random_submission(rng), refresh=False)
    refresh(never)
    jid, _ = never.submit(random_submission(rng))
    assert never.jobs[jid].forecast_basis == "fresh"


def queued(seed: int):
    """A core whose refreshes are usable for 5 s, with 30 jobs submitted a second apart and not yet forecast."""
    core, clock = make(ClusterSpec.homogeneous(8, 4), "pcs-bal", branch_max_age_s=5.0)
    rng = random.Random(seed)
    for _ in range(30):
        clock.t += 1.0
        core.submit(random_submission(rng), refresh=False)
    return core, clock, rng


def test_a_refresh_play_that_took_long_stays_usable_for_twice_its_length():
    core, clock, rng = queued(seed=5)
    began, play = core.begin_play_refresh()
    clock.t += 20.0  # the play took 20 s of the coordinator's clock, as one of 100,000 jobs does
    core.end_play_refresh(began, play())
    clock.t += 15.0  # 35 s after its state: older than 5 s, younger than twice the play's 20 s
    jid, _ = core.submit(random_submission(rng))
    assert core.jobs[jid].forecast_basis == "branch" and core.jobs[jid].refresh_age == pytest.approx(35.0)
    clock.t += 10.0  # 45 s: too old
    late, _ = core.submit(random_submission(rng))
    assert core.jobs[late].forecast_basis == "fresh"


def test_while_the_next_refresh_plays_the_last_one_stays_usable():
    core, clock, rng = queued(seed=6)
    refresh(core)  # took no time: usable for 5 s
    clock.t += 2.0
    core.submit(random_submission(rng), refresh=False)  # something to play again for
    began, play = core.begin_play_refresh()  # the next play, slow under load
    clock.t += 10.0  # 12 s after the last play's state, 10 s into the next
    jid, _ = core.submit(random_submission(rng))
    assert core.jobs[jid].forecast_basis == "branch" and core.jobs[jid].refresh_age == pytest.approx(12.0)
    core.end_play_refresh(began, play())  # it took 10 s: usable for 20 s from its state
    clock.t += 11.0
    late, _ = core.submit(random_submission(rng))
    assert core.jobs[late].forecast_basis == "fresh"  # 21 s after its state, and no play under way


def test_a_policy_without_queues_forecasts_fresh():
    core, clock = make(unequal_cluster(), "themis")  # lease reviews: no queue play, no branch points
    rng = random.Random(4)
    submit_random(core, clock, rng, count=20, gap=10.0)
    assert core.begin_play_refresh() is None
    core.play_refresh()
    jid, _ = core.submit(random_submission(rng))
    assert core.jobs[jid].forecast_basis == "fresh"


def test_the_prediction_view_says_how_the_submissions_forecast_was_played():
    core, clock = make(ClusterSpec.homogeneous(8, 4), "pcs-bal")
    rng = random.Random(6)
    for _ in range(30):
        core.submit(random_submission(rng), refresh=False)
    refresh(core)
    clock.t += 0.5
    jid, _ = core.submit(random_submission(rng))
    view = core.prediction(jid)
    assert (view["basis"], view["refresh_age_s"]) == ("branch", 0.5)


def spec(jid: int, rng: random.Random, t: float) -> JobSpec:
    gpus = rng.choice([1, 1, 2, 4])
    return JobSpec(job_id=jid, submit_time=t, service=10 ** rng.uniform(2.0, 6.0), max_gpus=gpus,
                   min_gpus=rng.choice([1, gpus]), speedup=tuple(float(n) ** 0.8 for n in range(gpus + 1)))


def step_to(engine: Engine, t: float) -> None:
    """The engine's own loop up to ``t`` (what ``simulate`` does between arrivals)."""
    while engine.active and engine.next_event() <= t:
        at = engine.next_event()
        done = engine.advance(at)
        if done:
            engine.remove(done)
        engine.reallocate()
    engine.advance(t)


def test_a_branch_stepped_to_a_later_arrival_is_the_engines_own_forecast():
    """The simulator's engine is exact: where a branch point lies before the arrival and is stepped
    to it, the branched forecast is still the number the engine's own play gives at that arrival."""
    stepped = 0
    for policy in ("pcs-bal", "pcs-jct", "fifo"):
        rng = random.Random(policy)
        engine = Engine(16, build_policy(policy), overhead=2.0)
        for jid in range(120):
            engine.admit(spec(jid, rng, 0.0))
        engine.reallocate()
        points = BranchPoints(engine.play_detached())
        whole = points.run()
        assert whole == engine.play_ahead()
        end, branched = max(whole.values()), 0
        for k in range(150):
            t = rng.uniform(0.0, end)
            later = engine.fork()
            step_to(later, t)
            new = later.admit(spec(1000 + k, rng, t))
            later.reallocate()
            finish = None if new.alloc else points.branch(new, t)
            if finish is None:
                continue
            branched += 1
            stepped += points.points[points.policy.queue_of(new)].now < t
            assert finish[new.spec.job_id] == later.play_ahead(until=new.spec.job_id)[new.spec.job_id]
        assert branched >= 10, (policy, branched)
    assert stepped >= 5


def test_branch_points_hold_only_the_jobs_still_in_their_play():
    rng = random.Random(9)
    engine = Engine(8, build_policy("pcs-bal"))
    for jid in range(300):
        engine.admit(spec(jid, rng, 0.0))
    engine.reallocate()
    points = BranchPoints(engine.play_detached())
    points.run()
    kept = [p for p in points.points if p is not None]
    assert kept and len(kept) <= len(engine.policy.queue_form().weights)
    for point in kept:
        alive = {j.spec.job_id for queue in point.queues for j in queue}
        assert set(point.jobs) == alive == set(point.rem) == set(point.cnt) == set(point.anc) == set(point.stl)
        assert set(point.eta) <= alive and point.log == [] and point.finish == {}
    assert points.held() < 300 * len(kept)  # the latest points come after most jobs finished
