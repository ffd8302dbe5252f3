"""The user's own code on Ray: a fresh pinned process per rank with its runtime_env, logs per rank,
DDP over gloo, a stop at a checkpoint and a resume on another world size, a grace-period kill, a hang,
a rank killed by SIGKILL, a working_dir whose own packages share pcs-ray's folder names."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import pcs_ray.train.store as store
from builders import wait_until
from pcs_ray.contract import GPUSlot, RunRequest

LOOP = '''
import os, time
import torch
import pcs_ray.train as train

def loop(config):
    ctx = train.get_context()
    print("env", os.environ["CUDA_VISIBLE_DEVICES"], os.environ["CUDA_DEVICE_ORDER"], os.getcwd(), flush=True)
    step, total = 0, ctx.total_steps
    w = torch.zeros(4)
    if (ckpt := train.get_checkpoint()) is not None:
        state = torch.load(os.path.join(ckpt, "w.pt"), weights_only=True)
        w, step = state["w"], state["step"]
        print("resumed", step, "world", ctx.world_size, flush=True)
    while step < total:
        g = torch.full((4,), float(step + 1))
        if ctx.world_size > 1:
            torch.distributed.all_reduce(g)
            g /= ctx.world_size
        w += g
        step += 1
        time.sleep(config["sleep"])
        if step == config.get("hang_at") and not os.path.exists(config.get("hang_marker", "")):
            if config.get("hang_marker"):  # hangs once only
                open(config["hang_marker"], "w").close()
            train.report({}, step=step)  # a dead data loader: reports its step, then nothing ever again
            time.sleep(3600)
        if step == config.get("die_at") and not os.path.exists(config["marker"]):  # killed once, as by the OOM killer
            open(config["marker"], "w").close()
            os.kill(os.getpid(), 9)
        if config.get("ignore_stops"):
            train.report({}, step=step)
            continue
        if train.should_checkpoint() or step == total or step % config.get("checkpoint_every", total) == 0:
            folder = None
            if ctx.world_rank == 0:
                folder = train.checkpoint_dir()
                torch.save({"w": w, "step": step}, os.path.join(folder, "w.pt"))
            train.report({"w0": float(w[0])}, step=step, checkpoint=folder)
        else:
            train.report({"w0": float(w[0])}, step=step)
'''


@pytest.fixture(scope="module")
def env(ray_local, tmp_path_factory):
    import ray

    @ray.remote(num_cpus=0)
    class Recorder:
        def __init__(self):
            self.reports = []

        def report_progress(self, job_id, step, step_time_s, **extra):
            self.reports.append((job_id, step))

        def top(self, job_id):
            return max([s for j, s in self.reports if j == job_id], default=0)

    code_dir = tmp_path_factory.mktemp("code")
    (code_dir / "loop.py").write_text(LOOP)
    from pcs_ray.executors.launch import launch, stop
    from pcs_ray.executors.user_spares import SPARES

    yield ray, Recorder.remote(), code_dir, launch, stop
    SPARES.clear()


SHADOWING_LOOP = '''
from executors import launch  # the user's own executors/launch.py, named as pcs-ray's module is
import workloads
import pcs_ray.train as train

def loop(config):
    import pcs_ray.workloads.catalog as ours  # pcs-ray's own, imported after the user's
    train.report({"owner": workloads.OWNER, "launch": launch.OWNER}, step=1)
    print("user", workloads.__file__, launch.__file__, flush=True)
    print("ours", ours.__file__, sorted(ours.registered_workloads())[:1], flush=True)
    train.report({}, step=train.get_context().total_steps)
'''


def test_the_users_own_workloads_and_executors_packages_are_what_its_code_imports(env, tmp_path):
    """A working_dir with packages named as pcs-ray's repository folders: the user's are imported, and
    pcs-ray's own (its runner, its training contract, a module it imports later) still work."""
    _, _, _, launch, _ = env
    code_dir = tmp_path / "code"
    for pkg, body in (("workloads", "OWNER = 'user'\n"), ("executors", "")):
        (code_dir / pkg).mkdir(parents=True)
        (code_dir / pkg / "__init__.py").write_text(body)
    (code_dir / "executors" / "launch.py").write_text("OWNER = 'user'\n")
    (code_dir / "loop.py").write_text(SHADOWING_LOOP)
    request = _request(code_dir, tmp_path, [("node0", 0)], steps=2)
    outcome = launch(request).outcome(timeout=120)
    assert (outcome.status, outcome.step) == ("finished", 2), outcome
    log = (tmp_path / "logs" / "u1" / "attempt-1" / "rank-0.log").read_text()
    user = next(line.split() for line in log.splitlines() if line.startswith("user "))
    assert all("working_dir_files" in path for path in user[1:]), log  # Ray's unpacked copy of the user's folder
    assert user[1].endswith("/workloads/__init__.py") and user[2].endswith("/executors/launch.py")
    ours = next(line for line in log.splitlines() if line.startswith("ours "))
    assert "working_dir_files" not in ours and "/workloads/catalog.py" in ours, log


def _request(code_dir, root: Path, gpus, steps=20, reporter=None, **config) -> RunRequest:
    return RunRequest("u1", "user:loop.py:loop", steps, tuple(GPUSlot(n, i) for n, i in gpus), str(root / "checkpoints" / "u1"),
                      code={"entrypoint": "loop.py:loop", "working_dir": str(code_dir), "config": {"sleep": 0.05, **config},
                            "runtime_env": {"env_vars": {"MY_FLAG": "1"}}},
                      log_dir=str(root / "logs" / "u1" / "attempt-1"), report_interval_s=0.0, reporter=reporter)


def test_a_two_rank_user_run_stops_at_its_checkpoint_and_resumes_on_one_gpu(env, tmp_path):
    ray, recorder, code_dir, launch, _ = env
    first = launch(_request(code_dir, tmp_path, [("node0", 2), ("node1", 3)], reporter=recorder))
    wait_until(lambda: ray.get(recorder.top.remote("u1")) >= 3, timeout=90)
    first.request_stop()
    stopped = first.outcome(timeout=120)
    assert stopped.status == "preempted" and 3 <= stopped.step < 20 and stopped.runner == "cold"
    assert store.newest(tmp_path / "checkpoints" / "u1")[1] == stopped.step
    logs = tmp_path / "logs" / "u1" / "attempt-1"
    rank0, rank1 = (logs / "rank-0.log").read_text(), (logs / "rank-1.log").read_text()
    assert rank0.startswith("env 2 PCI_BUS_ID ") and rank1.startswith("env 3 PCI_BUS_ID ")
    assert "working_dir_files" in rank0.split()[3]  # Ray runs it in its unpacked copy of working_dir

    handle = launch(_request(code_dir, tmp_path, [("node0", 1)]))
    resumed = handle.outcome(timeout=120)
    assert (resumed.status, resumed.start_step, resumed.step) == ("finished", stopped.step, 20)
    # A process pre-started for this runtime env after the first run took it, pinned to its new GPU.
    assert handle.runner == "spare" and resumed.timings["actor_created"] < resumed.timings["launched"]
    assert "env 1 PCI_BUS_ID" in (logs / "rank-0.log").read_text()
    import torch

    final = torch.load(store.newest(tmp_path / "checkpoints" / "u1")[0] / "w.pt", weights_only=True)
    assert torch.equal(final["w"], torch.full((4,), float(sum(range(1, 21)))))  # every step applied exactly once
    assert f"resumed {stopped.step} world 1" in (logs / "rank-0.log").read_text()


def test_a_loop_that_ignores_the_stop_is_killed_after_the_grace_and_resumes_from_its_checkpoint(env, tmp_path):
    ray, recorder, code_dir, launch, stop = env
    handle = launch(_request(code_dir, tmp_path, [("node0", 3)], steps=400, ignore_stops=True, sleep=0.05, reporter=recorder))
    wait_until(lambda: ray.get(recorder.top.remote("u1")) >= 5, timeout=90)
    outcome = stop(handle, grace_s=1.0)
    assert outcome.status == "failed" and outcome.step == 0  # never checkpointed: resumes from the start


@pytest.fixture
def coordinator(ray_local, tmp_path):
    from pcs_ray.coordinator.actor import start_coordinator
    from pcs_ray.coordinator.config import CoordinatorConfig, cluster_dict

    started = []

    def start(cluster, policy="fair"):
        config = CoordinatorConfig(cluster=cluster_dict(cluster), state_dir=str(tmp_path / "state"), policy=policy,
                                   grace_s=20.0, progress_journal_every=0.0, warm_pool=False)
        started.append(start_coordinator(config))
        return started[-1]

    yield start
    for actor in started:
        ray_local.kill(actor, no_restart=True)
    time.sleep(0.5)


def test_an_elastic_user_job_is_resized_by_a_second_arrival_and_loses_no_step(coordinator, ray_local, env, tmp_path):
    from pcs_ray.client import Client
    from pcs_ray.cluster import ClusterSpec

    _, _, code_dir, _, _ = env
    actor = coordinator(ClusterSpec.homogeneous(4, 2))
    client = Client(coordinator=actor)
    spec = {"entrypoint": "loop.py:loop", "working_dir": str(code_dir), "steps": 120, "gpus": 4, "min_gpus": 1,
            "config": {"sleep": 0.05}, "step_time": 0.05, "name": "elastic"}
    a = client.submit(spec)
    wait_until(lambda: _steps(client, a.id) >= 10, timeout=120)
    b = client.submit({**spec, "steps": 30, "gpus": 2, "min_gpus": 2, "name": "second"})
    finals = [client.wait(h.id, timeout=300) for h in (a, b)]
    assert [f["state"] for f in finals] == ["finished", "finished"], [f["error"] for f in finals]
    first = finals[0]
    counts = [len(s["gpus"]) for s in first["segments"]]
    assert counts[0] == 4 and min(counts) < 4 and first["preemptions"] >= 1  # the resize is in its history
    assert first["steps"] == 120 and first["lost_steps"] == 0
    # Every resume started from the newest checkpoint the loop itself reported: the step its run ended at.
    assert all(s["from_step"] > 0 for s in first["segments"][1:])
    import torch

    state = torch.load(Path(tmp_path / "state" / "checkpoints" / str(a.id) / "latest" / "w.pt"), weights_only=True)
    assert torch.equal(state["w"], torch.full((4,), float(sum(range(1, 121)))))  # no step skipped or applied twice
    log = client.logs(a.id, 2)["ranks"]["0"]["text"]  # what `pcs-ray logs ID --attempt 2` prints
    assert f"resumed {first['segments'][1]['from_step']} world {counts[1]}" in log


def _steps(client, jid) -> int:
    return next(j for j in client.status()["jobs"] if j["id"] == jid)["steps"]


def test_a_hung_run_is_killed_with_its_stacks_logged_or_retried_and_a_rank_killed_by_sigkill_is_told_in_words(
        coordinator, ray_local, env, tmp_path):
    from pcs_ray.client import Client
    from pcs_ray.cluster import ClusterSpec

    _, _, code_dir, _, _ = env
    client = Client(coordinator=coordinator(ClusterSpec.homogeneous(3), policy="fifo"))
    spec = {"entrypoint": "loop.py:loop", "working_dir": str(code_dir), "steps": 20, "gpus": 1, "step_time": 0.05}
    hung = client.submit({**spec, "name": "hung", "report_timeout_s": 5, "config": {"sleep": 0.05, "hang_at": 3}})
    once = client.submit({**spec, "name": "hung-once", "report_timeout_s": 5, "max_failures": 1,
                          "config": {"sleep": 0.05, "hang_at": 3, "checkpoint_every": 2,
                                     "hang_marker": str(tmp_path / "hung-once")}})
    dies = client.submit({**spec, "name": "dies", "config": {"sleep": 0.05, "die_at": 5,
                                                             "marker": str(tmp_path / "died-once")}})
    after = client.submit({**spec, "name": "after", "config": {"sleep": 0.05}})  # waits for a GPU
    wait_until(lambda: _steps(client, hung.id) >= 1, timeout=120)  # reports are throttled: step 3 may never arrive
    hung_at = time.time()  # at most two 0.05 s steps before it hangs
    gone = client.wait(hung.id, timeout=60)
    detected_s = gone["finish"] - hung_at
    assert gone["state"] == "failed" and gone["end_reason"]["code"] == "hang" and gone["gpus"] == [], gone
    assert detected_s <= 5 + 10, detected_s
    # Every thread's stack, the loop's sleep among them. The dump is written before the kill, but on a loaded
    # machine it may still be reaching the file when the job is seen failed: read until it is whole.
    deadline = time.monotonic() + 30
    while True:
        log = client.logs(hung.id, 1)["ranks"]["0"]["text"]
        if ("Timeout (0:00:05)!" in log and "in loop" in log) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "Timeout (0:00:05)!" in log and "in loop" in log, log[-3000:]
    finals = {h.id: client.wait(h.id, timeout=240) for h in (once, dies, after)}
    assert finals[after.id]["state"] == "finished"  # the hung run's GPU went back to the pool
    died = finals[dies.id]
    assert died["state"] == "finished" and died["attempts"] == 2, died
    assert died["error"].startswith("rank 0 died: killed by signal 9 (SIGKILL: out of memory?"), died["error"]
    retried = finals[once.id]  # hung once under max_failures 1: killed, then resumed from its checkpoint at step 2
    assert (retried["state"], retried["retries"], retried["attempts"]) == ("finished", 1, 2), retried
    first, second = retried["segments"]
    assert first["stopped_for"] == "hang" and first["error"].startswith("hang: ") and second["from_step"] == 2
    assert retried["error"].startswith("hang: ") and "retry 1 of max_failures 1" in retried["error"]
    assert "Timeout (0:00:05)!" in client.logs(once.id, 1)["ranks"]["0"]["text"]
    assert "resumed 2 world 1" in client.logs(once.id, 2)["ranks"]["0"]["text"]
    print({"hang_detected_after_s": round(detected_s, 2), "report_timeout_s": 5})
