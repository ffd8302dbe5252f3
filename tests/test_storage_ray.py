"""Runs that keep their checkpoints and logs in the cluster's storage (moto's S3 over HTTP): each run in a
node cache of its own, as on machines that share no disk, resumes from the bucket alone."""

from __future__ import annotations

import shutil

from builders import wait_until
from pcs_ray.contract import GPUSlot, RunRequest
from pcs_ray.storage import open_storage
from pcs_ray.train import remote_store
from test_user_code_ray import env  # noqa: F401  (a fixture: Ray, a progress recorder, the loop's folder)


def _request(code_dir, head, cache, storage, gpus, attempt, env, steps=20, reporter=None, **config) -> RunRequest:
    return RunRequest("s1", "user:loop.py:loop", steps, tuple(GPUSlot(n, i) for n, i in gpus), str(head / "checkpoints" / "s1"),
                      code={"entrypoint": "loop.py:loop", "working_dir": str(code_dir), "config": {"sleep": 0.05, **config},
                            "runtime_env": {"env_vars": {**env, "PCS_RAY_CACHE": str(cache)}}},
                      log_dir=str(head / "logs" / "s1" / f"attempt-{attempt}"), report_interval_s=0.0,
                      reporter=reporter, attempt=attempt, storage=storage)


def test_a_run_resumes_from_the_bucket_in_another_nodes_cache(env, s3_bucket, s3_server, tmp_path):  # noqa: F811
    from pcs_ray.executors.user_spares import SPARES

    ray, reporter, code_dir, launch, _ = env
    head = tmp_path / "head"
    first = launch(_request(code_dir, head, tmp_path / "cache-a", s3_bucket, [("node0", 2), ("node1", 3)], 1,
                            s3_server.env(), reporter=reporter))
    wait_until(lambda: ray.get(reporter.top.remote("s1")) >= 3, timeout=90)
    first.request_stop()
    stopped = first.outcome(timeout=120)
    assert stopped.status == "preempted" and 3 <= stopped.step < 20, stopped
    storage = open_storage(s3_bucket)
    assert remote_store.remote_step(storage, "s1") == stopped.step
    assert not (head / "checkpoints").exists()  # nothing on the coordinator's disk
    logs = storage.list("logs/s1/attempt-1")
    assert {"logs/s1/attempt-1/rank-0.log", "logs/s1/attempt-1/rank-1.log"} <= set(logs), logs
    shutil.rmtree(tmp_path / "cache-a")  # the first machine is gone

    resumed = launch(_request(code_dir, head, tmp_path / "cache-b", s3_bucket, [("node1", 1)], 2,
                              s3_server.env())).outcome(timeout=120)
    SPARES.clear()
    assert (resumed.status, resumed.start_step, resumed.step) == ("finished", stopped.step, 20), resumed
    import torch

    final = tmp_path / "check" / "s1"
    assert remote_store.pull(storage, "s1", final)[0] == 20
    state = torch.load(next(final.glob("latest/w.pt")), weights_only=True)
    assert torch.equal(state["w"], torch.full((4,), float(sum(range(1, 21)))))  # every step applied exactly once
    assert f"resumed {stopped.step} world 1" in (storage.read("logs/s1/attempt-2/rank-0.log") or b"").decode()
