"""A submission is answered from a play that stops at the new job's finish, and the queue's
forecasts are refreshed by a play that runs outside the host's lock: both give the numbers the
whole play under the lock gives."""

from __future__ import annotations

import random

from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.coordinator import Coordinator, Journal
from pcs_ray.placement import create_placement
from pcs_ray.policies import build_policy


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def variable(nodes: int = 4, per_node: int = 4) -> ClusterSpec:
    """Unequal GPUs and a locality penalty: placement plays along in every forecast."""
    pick = random.Random(3)
    return ClusterSpec(nodes=[NodeSpec(name=f"n{n}", gpus=[
        GPUSpec(index=i, uuid=f"GPU-f-{n}-{i}", scores={c: pick.uniform(1.0, 1.6) for c in "ABCD"})
        for i in range(per_node)]) for n in range(nodes)], locality_penalty=1.3)


def job(rng: random.Random) -> dict:
    gpus = rng.choice([1, 1, 2, 4])
    return {"workload": "tiny", "steps": rng.randrange(50, 3000), "gpus": gpus, "min_gpus": rng.choice([1, gpus]),
            "class": rng.choice("ABCD"), "step_time": rng.uniform(0.05, 0.5)}


def make(cluster: ClusterSpec, policy: str) -> tuple[Coordinator, Clock]:
    clock = Clock()
    core = Coordinator(cluster, build_policy(policy), Journal(":memory:"), checkpoint_root="/tmp/ckpt",
                       placement=create_placement("packed-sticky", cluster), clock=clock, workloads=("tiny",))
    return core, clock


def whole_play(core: Coordinator) -> dict[int, float]:
    core.model.sync(core.now(), core.active, core._dirty, core.speed)
    return core.model.engine.fork().play_forward()  # policy and placement re-run at every event


def test_a_submissions_forecast_is_the_whole_plays_and_the_rest_follow_outside_the_lock():
    for cluster, policy in ((variable(), "pcs-bal"), (ClusterSpec.homogeneous(16, 4), "pcs-jct"), (variable(), "fifo")):
        core, clock = make(cluster, policy)
        rng = random.Random(policy)
        for _ in range(60):
            clock.t += rng.uniform(0.0, 30.0)
            jid, _ = core.submit(job(rng))
            assert core.jobs[jid].predicted == whole_play(core)[jid]
        assert core._predictions_stale  # the other jobs wait for a refresh
        began, play = core.begin_play_refresh()  # a queue play, detached from the model
        clock.t += 1.0
        late, _ = core.submit(job(rng))  # the model moves on while the play runs
        newer = {jid: core.jobs[jid].predicted for jid in core._forecast_at}  # the late job and all finishing first
        old = play()
        core.end_play_refresh(began, old)
        assert {jid: core.jobs[jid].predicted for jid in newer} == newer and core._predictions_stale
        assert late in newer and late not in old and len(newer) > 1
        began, play = core.begin_play_refresh()
        core.end_play_refresh(began, play())
        whole = whole_play(core)
        assert not core._predictions_stale
        assert {jid: j.predicted for jid, j in core.active.items()} == whole and len(whole) > 30


def test_a_refresh_that_needs_the_model_runs_under_the_lock():
    """Lease-based policies re-decide on reviews: no detached play, the caller refreshes in place."""
    core, clock = make(variable(), "themis")
    rng = random.Random(5)
    for _ in range(20):
        clock.t += 10.0
        core.submit(job(rng))
    assert core.begin_play_refresh() is None
    core.play_refresh()
    assert not core._predictions_stale and core.begin_play_refresh() is None
