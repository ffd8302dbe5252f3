"""The coordinator actor on Ray with real runners (tiny workload, logical GPUs).

End to end: jobs submitted through the client run on the GPUs placement
chose and finish with their full step budget. Recovery: killing the
coordinator actor mid-run, and again while a preemption is in flight, loses
no job, no acknowledged submission and no step: the run goes on on its warm
runner, and the restarted actor replays its journal and adopts it. The operator's policy:
started from what the solver wrote, swapped with ``pcs-ray config set``,
kept across a restart; refusals reach the client as their own types.
"""

from __future__ import annotations

import json
import math
import time

import pytest

from pcs_ray.cluster import ClusterSpec
from pcs_ray.contract import ConfigError, JobSpecError, UnknownJobError
from pcs_ray.coordinator.config import CoordinatorConfig, cluster_dict

pytestmark = pytest.mark.slow  # the coordinator as a Ray actor

TIMEOUT = 120
LONG = 250  # steps of the long job: tiny_cnn on the 3x slow emulated GPU takes about 0.09 s a step


def _tiny(steps, gpus=1, **kw):
    return {"workload": "tiny_cnn", "steps": steps, "gpus": gpus, "step_time": 0.02,
            "params": {"num_samples": 256}, **kw}


@pytest.fixture
def coordinator(ray_local, tmp_path):
    from pcs_ray.coordinator.actor import start_coordinator

    started = []

    def start(cluster: ClusterSpec, policy: str = "fifo", **kw):
        kw.setdefault("warm_pool", False)  # cold runners: a test that wants the pool says so (it costs a start each)
        config = CoordinatorConfig(
            cluster=cluster_dict(cluster), state_dir=str(tmp_path / "state"), policy=policy, grace_s=15.0,
            progress_journal_every=0.0, **kw,
        )
        actor = start_coordinator(config)
        started.append((actor, cluster))
        return actor

    yield start
    from pcs_ray.executors.pool import kill_warm_runners
    from pcs_ray.contract import GPUSlot

    for actor, cluster in started:
        ray_local.kill(actor, no_restart=True)
        kill_warm_runners([GPUSlot(cluster.node_of(g).name, cluster.gpu(g).index) for g in cluster.gpu_ids()])
    time.sleep(0.5)  # let the name free up for the next test


def _wait_for(predicate, timeout=TIMEOUT, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _kill_and_wait_restart(ray, actor):
    before = ray.get(actor.ping.remote())
    ray.kill(actor, no_restart=False)
    # The kill is asynchronous: wait for an answer from the restarted process.
    after = _wait_for(lambda: (p := ray.get(actor.ping.remote(), timeout=TIMEOUT))["pid"] != before["pid"] and p,
                      what="the coordinator to restart")
    assert after["epoch"] == before["epoch"]
    return after


def test_jobs_run_on_the_chosen_gpus_and_finish(coordinator, ray_local):
    from pcs_ray.client import Client

    actor = coordinator(ClusterSpec.homogeneous(8, 4))
    client = Client(coordinator=actor)
    a = client.submit(_tiny(30, gpus=2))
    b = client.submit(_tiny(20))
    assert a.id != b.id and a.predicted_completion > time.time() - 1 and a.bound is not None
    finals = [client.wait(h.id, timeout=TIMEOUT) for h in (a, b)]
    assert [f["state"] for f in finals] == ["finished", "finished"]
    assert [f["steps"] for f in finals] == [30, 20]
    assert finals[0]["segments"][0]["gpus"] == ["node0:0", "node0:1"]
    assert finals[1]["segments"][0]["gpus"] == ["node0:2"]
    assert finals[0]["emulated"] and finals[0]["step_time"] > 0
    with pytest.raises(JobSpecError, match="unknown workload"):
        client.submit({"workload": "nope", "steps": 3})
    with pytest.raises(JobSpecError, match="the cluster has 8"):
        client.submit(_tiny(3, gpus=9))


def test_killing_the_coordinator_mid_run_and_mid_preemption_loses_no_step(coordinator, ray_local):
    from pcs_ray.client import Client

    # One GPU and SRSF: a short arrival preempts the long job, so a preemption is easy to catch in flight.
    # Its GPU is 3x slow for class A: its emulated steps take 3x the nominal GPU's (waiting, no CPU),
    # so the long job lasts long enough to be caught mid-run even on an idle machine.
    slow_gpu = ClusterSpec.model_validate({"nodes": [{"name": "node0", "gpus": [{"index": 0, "uuid": "GPU-s", "scores": {"A": 3.0}}]}]})
    actor = coordinator(slow_gpu, policy="srsf", warm_pool=True)  # the restarted coordinator finds its warm runner
    client = Client(coordinator=actor)
    long_job = client.submit(_tiny(LONG, checkpoint_every=100))  # a crash that lost work would lose up to 99 steps
    _wait_for(lambda: client.job(long_job.id)["steps"] >= 30, what="the long job to make progress")
    warm = _wait_for(lambda: (r := client.status()["runners"][0])["state"] == "ready" and r, what="the warm runner")
    assert warm["kind"] == "warm" and warm["rss_mb"] > 0

    # 1. Killed mid-run (Ray restarts it): the run goes on, and the restarted coordinator adopts it.
    reached = client.job(long_job.id)["steps"]
    info = _kill_and_wait_restart(ray_local, actor)
    assert info["reattached"] == 1 and info["recovered"] == 0
    job = client.job(long_job.id)
    assert job["state"] == "running" and job["attempts"] == 1 and job["steps"] >= reached  # 0 steps lost
    again = _wait_for(lambda: (r := client.status()["runners"][0])["state"] == "ready" and r, what="the runner found")
    assert again["pid"] == warm["pid"]  # the same detached runner, found by name, not a new one
    seen = client.job(long_job.id)["steps"]
    _wait_for(lambda: client.job(long_job.id)["steps"] > seen, what="progress reports to reach the restarted coordinator")

    # 2. Killed during a preemption, for good this time, and started anew: submit a short job (SRSF
    # stops the long one) and kill at once. The new coordinator completes the preemption.
    short = client.submit(_tiny(10))
    assert client.job(long_job.id)["state"] == "stopping"
    reached = client.job(long_job.id)["steps"]
    ray_local.kill(actor, no_restart=True)
    _wait_for(lambda: _gone(ray_local), what="the coordinator's name to be free")
    actor = coordinator(slow_gpu, policy="srsf", warm_pool=True)
    client = Client(coordinator=actor)
    info = ray_local.get(actor.ping.remote())
    assert info["recovered"] == 0  # the stopping run was adopted, or had ended and its outcome was kept
    ids = {j["id"] for j in client.status()["jobs"]}
    assert {long_job.id, short.id} <= ids  # the acknowledged submission survived

    finals = {h.id: client.wait(h.id, timeout=TIMEOUT) for h in (short, long_job)}
    assert finals[short.id]["state"] == "finished" and finals[short.id]["steps"] == 10
    final = finals[long_job.id]
    assert final["state"] == "finished" and final["steps"] == LONG
    assert finals[short.id]["finish"] < final["finish"]  # SRSF ran the short one first
    assert final["attempts"] == 2 and final["preemptions"] == 1  # one preemption, no lost run
    assert final["segments"][1]["from_step"] >= reached  # it resumed where the preemption checkpointed: 0 steps lost


def _gone(ray) -> bool:
    from pcs_ray.api.actor_ref import ACTOR_NAME, NAMESPACE

    try:
        ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
        return False
    except ValueError:
        return True


def test_the_operators_policy_is_started_swapped_and_kept_and_errors_stay_typed(
        coordinator, ray_local, tmp_path, monkeypatch, capsys):
    from pcs_ray.cli import run
    from pcs_ray.client import Client
    from pcs_ray.policies import WFQConfig
    from pcs_ray.solver.preference import set_wfq_config

    monkeypatch.setenv("PCS_RAY_WFQ_CONFIG", str(tmp_path / "solver" / "wfq.json"))
    written = WFQConfig.load(set_wfq_config(WFQConfig.from_params((100.0, math.inf), W=1.0, zeta_min=0.0)))
    actor = coordinator(ClusterSpec.homogeneous(1, 1), policy=None)  # none named: the solver's choice
    client = Client(coordinator=actor)
    shown = client.config()
    assert shown["source"] == "start" and shown["policy"]["policy"] == "pcs"
    assert shown["policy"]["class_thresholds"] == written.to_dict()["class_thresholds"]

    assert run(["config", "set", "--policy", "fifo"]) == 0
    assert capsys.readouterr().out.startswith("policy fifo (set with `pcs-ray config set`")
    external = {"workload": "tiny_cnn", "gpus": 1, "step_time": 1.0, "executor": "external"}
    long_job, short = client.submit({**external, "steps": 1000}), client.submit({**external, "steps": 10})
    assert client.assignment(long_job.id)["state"] == "running" and client.assignment(short.id)["state"] == "queued"
    assert short.predicted_completion > long_job.predicted_completion

    assert run(["config", "set", "--policy", "srsf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == {"policy": "srsf"}
    assert client.assignment(long_job.id)["state"] == "stopping"  # decisions follow at once ...
    assert client.predict(short.id)["predicted_completion"] < client.predict(long_job.id)["predicted_completion"]  # ... and predictions

    _kill_and_wait_restart(ray_local, actor)
    capsys.readouterr()
    assert run(["config", "show", "--json"]) == 0
    # This process is also the Ray driver that owns the actor: Ray may print "(raylet) Task
    # CoordinatorService.ping failed ... will be retried" about the kill into the same stdout, late.
    # The CLI's own output is its last line.
    shown = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert shown["policy"] == {"policy": "srsf"} and shown["source"] == "set"
    assert client.assignment(short.id)["state"] == "running" and client.assignment(long_job.id)["state"] == "queued"

    with pytest.raises(UnknownJobError, match="no job with id 999"):
        client.predict(999)
    with pytest.raises(UnknownJobError):
        client.job(999)
    with pytest.raises(ConfigError, match="unknown policy 'nope'"):
        client.set_config("nope")
    assert run(["cancel", "999"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: no job with id 999"

    # Ownership through the actor: the caller crosses Ray, and the refusals come back typed.
    from pcs_ray.client import actor_call
    from pcs_ray.contract import PermissionDeniedError
    from pcs_ray.tenants.identity import Caller

    root, bob = Client(coordinator=actor, identity=Caller("root", "a")), Client(coordinator=actor, identity=Caller("bob", "b"))
    assert root.set_tenants({"tenants": {"a": {"quota": 1}}, "operators": ["root"]})["tenants"]["operators"] == ["root"]
    owned = root.submit({**external, "steps": 10})
    assert (client.job(owned.id)["tenant"], client.job(owned.id)["user"]) == ("a", "root")
    with pytest.raises(PermissionDeniedError, match=f"job {owned.id} belongs to tenant 'a'"):
        bob.cancel(owned.id)
    with pytest.raises(PermissionDeniedError, match="stop is for operators"):
        actor_call(actor, "drain", 1.0, Caller("bob", "b").to_wire())
    assert root.cancel(owned.id)
