"""Runners on Ray: exact-GPU pinning, preempt/resume across GPUs, kills, DDP over gloo."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch

from pcs_ray.contract import GPUSlot, RunRequest
from pcs_ray.executors.checkpoint import load_checkpoint, peek_step
from builders import wait_until

pytestmark = pytest.mark.slow  # runners as Ray actors

TOTAL = 30
PARAMS = {"seed": 5, "num_samples": 64}
SLOW = 2.0  # emulated slowdown: tiny_cnn steps of about 0.06 s, long enough to stop mid-run
WARM = [("node0", 0), ("node0", 1), ("node1", 0), ("node1", 1)]  # GPUs with a warm runner in these tests


@pytest.fixture(scope="module")
def ray_env(ray_local):
    import ray

    @ray.remote(num_cpus=0)
    class Recorder:
        def __init__(self):
            self.reports = []

        def report_progress(self, job_id, step, step_time_s, **extra):
            self.reports.append((job_id, step, step_time_s, extra))

        def of(self, job_id):
            return [r for r in self.reports if r[0] == job_id]

    from pcs_ray.executors import launch as launch_module

    return ray, launch_module, Recorder.remote()


def _request(job, gpus, directory, **kw) -> RunRequest:
    kw.setdefault("params", PARAMS)
    return RunRequest(job, "tiny_cnn", kw.pop("total_steps", TOTAL), tuple(GPUSlot(n, i) for n, i in gpus), str(directory), **kw)


def _max_step(ray, recorder, job):
    return max([r[1] for r in ray.get(recorder.of.remote(job))], default=0)


def _same(a, b) -> bool:
    a, b = load_checkpoint(a).state["model"], load_checkpoint(b).state["model"]
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def pool(ray_env):
    from pcs_ray.executors.pool import WarmPool

    pool = WarmPool([GPUSlot(n, i) for n, i in WARM])
    pool.ready(timeout=300)
    yield pool
    pool.shutdown(kill_runners=True)


@pytest.fixture(scope="module")
def reference(ray_env, tmp_path_factory):
    """The same job run once without interruption."""
    _, launch_module, _ = ray_env
    directory = tmp_path_factory.mktemp("reference")
    outcome = launch_module.launch(_request("ref", [("node0", 0)], directory)).outcome(timeout=120)
    assert (outcome.status, outcome.step) == ("finished", TOTAL), outcome.error
    return directory


def test_preempted_three_times_on_different_gpus_matches_uninterrupted_run(ray_env, pool, reference, tmp_path):
    ray, launch_module, recorder = ray_env
    placements = [[("node0", 1)], [("node1", 0)], [("node0", 0)], [("node1", 1)]]  # warm runners

    def request(attempt):
        return _request("pre", placements[attempt], tmp_path, slowdown=SLOW, reporter=recorder, report_interval_s=0.0, attempt=attempt)

    segments = []
    handle = pool.launch(request(0))
    for attempt in range(4):
        if attempt < 3:
            start = peek_step(tmp_path) or 0
            wait_until(lambda: _max_step(ray, recorder, "pre") >= start + 3)
        if attempt == 1:
            outcome = launch_module.stop(handle, grace_s=60)  # the blocking helper; stops well within the grace
        else:
            if attempt < 3:
                handle.request_stop()  # returns at once
            if attempt == 2:  # the next run starts now and restores once this one has checkpointed
                following = pool.launch(request(3), after=handle.done)
            outcome = handle.outcome(timeout=120)
        segments.append((outcome.status, outcome.start_step, outcome.step))
        assert outcome.gpus == request(attempt).gpus and outcome.emulated and outcome.runner == "warm"
        if attempt < 3:
            handle = following if attempt == 2 else pool.launch(request(attempt + 1))
    assert [s[0] for s in segments] == ["preempted"] * 3 + ["finished"]
    for (_, _, end), (_, next_start, _) in zip(segments, segments[1:]):
        assert next_start == end  # nothing lost, nothing repeated
    assert 0 < segments[0][2] < segments[1][2] < segments[2][2] < TOTAL == segments[3][2]
    assert _same(reference, tmp_path)
    reports = ray.get(recorder.of.remote("pre"))
    # Each run's first report says its loop began (no step time), then its steps follow, emulated.
    steps = [r for r in reports if r[2] is not None]
    assert steps and all(extra.get("emulated") is True and t > 0 for _, _, t, extra in steps)
    assert all(step >= 0 for _, step, t, _ in reports if t is None)


def test_pinned_runner_killed_resumes_from_its_last_checkpoint(ray_env, reference, tmp_path):
    ray, launch_module, _ = ray_env
    handle = launch_module.launch(_request("kill", [("node1", 1)], tmp_path, slowdown=SLOW, checkpoint_every=4))
    env = ray.get(handle.actors[0].environment.remote(), timeout=60)
    assert env["cuda_visible_devices"] == "1"
    assert env["resources"] == {"node1_gpu1": 1.0}  # num_gpus=0: no Ray GPU, just the chosen one
    assert ray.available_resources().get("node1_gpu1", 0) == 0
    wait_until(lambda: (peek_step(tmp_path) or 0) >= 8)
    handle.kill()
    outcome = handle.outcome(timeout=60)
    assert outcome.status == "failed" and "died" in outcome.error
    assert outcome.step >= 8 and outcome.step % 4 == 0 and outcome.step == peek_step(tmp_path)
    wait_until(lambda: ray.available_resources().get("node1_gpu1", 0) == 1, timeout=30)  # the GPU is free again
    resumed = launch_module.launch(_request("kill", [("node0", 2)], tmp_path)).outcome(timeout=120)
    assert (resumed.status, resumed.start_step, resumed.step) == ("finished", outcome.step, TOTAL)
    assert _same(reference, tmp_path)


def test_stop_kills_a_runner_that_misses_the_grace_period(ray_env, tmp_path):
    _, launch_module, _ = ray_env
    handle = launch_module.launch(_request("slow", [("node0", 3)], tmp_path, slowdown=5000.0, reporter=None))
    wait_until(lambda: ray_env[0].get(handle.actors[0].boundaries_passed.remote()) >= 1)  # inside a ~25 s step
    began = time.monotonic()
    outcome = launch_module.stop(handle, grace_s=1.0)
    assert outcome.status == "failed" and time.monotonic() - began < 30
    assert outcome.step == 0  # no checkpoint yet: resumes from the start


def test_two_gpu_ddp_job_checkpoints_and_resumes_across_nodes(ray_env, pool, tmp_path):
    ray, launch_module, recorder = ray_env
    # the uninterrupted reference and the first, interrupted segment run side by side (disjoint GPUs)
    reference = launch_module.launch(_request("ddp-ref", [("node0", 2), ("node0", 3)], tmp_path / "whole", total_steps=12))
    parts = tmp_path / "parts"
    first = pool.launch(_request("ddp", [("node0", 0), ("node1", 1)], parts, total_steps=12, slowdown=SLOW, reporter=recorder, report_interval_s=0.0))
    wait_until(lambda: _max_step(ray, recorder, "ddp") >= 3)
    first.request_stop()
    stopped = first.outcome(timeout=120)
    assert stopped.status == "preempted" and 0 < stopped.step < 12
    whole = reference.outcome(timeout=120)
    assert (whole.status, whole.step) == ("finished", 12)
    state = load_checkpoint(parts).state
    assert state["world_size"] == 2 and len(state["rng"]) == 2
    resumed = pool.launch(_request("ddp", [("node1", 0), ("node0", 1)], parts, total_steps=12)).outcome(timeout=120)
    assert (resumed.status, resumed.start_step, resumed.step) == ("finished", stopped.step, 12)
    assert (stopped.runner, resumed.runner, whole.runner) == ("warm", "warm", "cold")
    assert _same(tmp_path / "whole", parts)  # same world size on other GPUs: bitwise identical

    # a changed world size continues the same sample stream to the end (not bitwise: see pcs_ray.executors.training)
    shrunk = pool.launch(_request("ddp", [("node0", 0)], parts, total_steps=16)).outcome(timeout=120)
    assert (shrunk.status, shrunk.start_step, shrunk.step) == ("finished", 12, 16)
    assert load_checkpoint(parts).state["data"]["samples_seen"] == 16 * 8


def test_a_failing_job_resolves_to_a_failed_outcome(ray_env, pool, tmp_path):
    from pcs_ray.executors.pool import WarmPool

    bad = _request("bad", [("node0", 0)], tmp_path, params={"no_such_param": 1})
    outcome = pool.launch(bad).outcome(timeout=120)
    assert outcome.status == "failed" and "no_such_param" in outcome.error and outcome.runner == "warm"
    none_fit = WarmPool([GPUSlot("node0", 2)], max_per_node=0)  # no room for a warm runner: runs start cold
    outcome = none_fit.launch(replace(bad, gpus=(GPUSlot("node0", 2),))).outcome(timeout=120)
    assert outcome.status == "failed" and "no_such_param" in outcome.error and outcome.runner == "cold"
    assert none_fit.cold_only == [GPUSlot("node0", 2)] and none_fit.describe()[0]["kind"] == "cold"
    none_fit.shutdown()


def test_a_run_handed_to_a_runner_still_starting_is_labelled_warming_then_warm(ray_env, tmp_path):
    """The coordinator's speed model charges a handle's runner kind: a run that waited for its runner's
    process start and imports paid what a cold start pays, and must not be taught as a warm start."""
    from pcs_ray.executors.pool import WarmPool

    fresh = WarmPool([GPUSlot("node1", 3)])
    try:
        first = fresh.launch(_request("early", [("node1", 3)], tmp_path / "early", total_steps=2))
        assert first.runner == "warming" and first.warm
        assert first.outcome(timeout=180).status == "finished"
        second = fresh.launch(_request("later", [("node1", 3)], tmp_path / "later", total_steps=2))
        assert second.runner == "warm"
        outcome = second.outcome(timeout=120)
        assert (outcome.status, outcome.runner) == ("finished", "warm")
    finally:
        fresh.shutdown(kill_runners=True)


def test_a_dead_warm_runner_is_replaced_and_its_job_resumes_on_the_new_one(ray_env, pool, reference, tmp_path):
    ray, _, _ = ray_env
    gpu = GPUSlot("node1", 1)
    handle = pool.launch(_request("wkill", [("node1", 1)], tmp_path, slowdown=SLOW, checkpoint_every=4))
    before = ray.get(handle.actors[0].info.remote())
    wait_until(lambda: (peek_step(tmp_path) or 0) >= 8)
    handle.kill()
    outcome = handle.outcome(timeout=60)
    assert outcome.status == "failed" and "died" in outcome.error and outcome.step % 4 == 0
    replaced = wait_until(lambda: [r for r in pool.describe() if (r["node"], r["gpu"]) == (gpu.node, gpu.index)
                                    and r["replaced"] == 1 and r["state"] == "ready"], timeout=180)
    assert replaced[0]["pid"] != before["pid"] and replaced[0]["rss_mb"] > 100
    resumed = pool.launch(_request("wkill", [("node1", 1)], tmp_path)).outcome(timeout=120)
    assert (resumed.status, resumed.start_step, resumed.step, resumed.runner) == ("finished", outcome.step, TOTAL, "warm")
    assert _same(reference, tmp_path)


def test_a_new_pool_adopts_a_run_that_outlived_its_coordinator_and_stops_the_others(ray_env, pool, reference, tmp_path):
    """What a restarted coordinator does: the runs go on without anyone waiting on them; a new pool
    finds the runners by name, adopts one run (its progress now reaches a new reporter, its outcome is
    collected, its weights are those of an uninterrupted run) and stops the other at a checkpoint."""
    from pcs_ray.executors.pool import WarmPool

    ray, _, recorder = ray_env
    kept = _request("adopt", [("node0", 1)], tmp_path / "kept", slowdown=4 * SLOW, attempt=1)
    stale = _request("stale", [("node1", 0)], tmp_path / "stale", slowdown=4 * SLOW, attempt=1, total_steps=500)
    first = [pool.launch(kept), pool.launch(stale)]
    for handle in first:
        wait_until(lambda: (ray.get(handle.actors[0].runs_state.remote())["step"] or 0) >= 3)
    successor = WarmPool([GPUSlot(n, i) for n, i in WARM], keep_runs=True)
    try:
        found = successor.survivors()
        assert found[GPUSlot("node0", 1)]["current"] == ("adopt", 1)
        assert found[GPUSlot("node1", 0)]["current"] == ("stale", 1) and found[GPUSlot("node0", 0)]["current"] is None
        step = found[GPUSlot("node0", 1)]["step"]
        assert 3 <= step < TOTAL
        adopted = successor.reattach(replace(kept, reporter=recorder))
        successor.release([("adopt", 1)])
        stopped = first[1].outcome(timeout=60)
        assert stopped.status == "preempted" and peek_step(tmp_path / "stale") == stopped.step  # no step lost
        outcome = adopted.outcome(timeout=120)
        assert (outcome.status, outcome.start_step, outcome.step) == ("finished", 0, TOTAL)  # never restarted
        assert _max_step(ray, recorder, "adopt") > step  # progress reached the new reporter
        assert _same(reference, tmp_path / "kept")
        assert ray.get(adopted.actors[0].runs_state.remote())["ended"][("adopt", 1)] == ("finished", TOTAL)
    finally:
        successor.shutdown()


def test_warm_runners_per_node_are_what_its_memory_share_holds_unless_set():
    from pcs_ray.executors.pool import warm_capacity

    gib = 2**30
    assert warm_capacity(16 * gib, 0.75 * gib, share=0.5) == 10
    assert warm_capacity(2 * gib, 0.75 * gib, share=0.5) == 1
    assert warm_capacity(1 * gib, 0.75 * gib, share=0.5) == 0  # none fits: every run there starts cold
    assert warm_capacity(16 * gib, 0.75 * gib, share=0.5, max_per_node=3) == 3


def test_launch_rejects_bad_requests_before_starting_anything(ray_env, tmp_path):
    _, launch_module, _ = ray_env
    with pytest.raises(ValueError, match="no GPUs"):
        launch_module.launch(_request("x", [], tmp_path))
    with pytest.raises(ValueError, match="twice"):
        launch_module.launch(_request("x", [("node0", 0), ("node0", 0)], tmp_path))
