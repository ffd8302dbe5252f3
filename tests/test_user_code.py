"""The user's own code: the contract (pcs_ray.train), its checkpoint store, and a rank's run in-process.

Ray-free: ``run_rank`` is what a run's rank process executes, called here directly.
"""

from __future__ import annotations

import base64
import os
import textwrap
from pathlib import Path

import pytest
import torch

import pcs_ray.train as train
import pcs_ray.train.session as session
import pcs_ray.train.store as store
from pcs_ray.executors.user_run import run_rank
from pcs_ray.contract import GPUSlot, RunRequest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "user-code"


def _request(tmp_path, code: dict, steps: int = 12, **kw) -> RunRequest:
    return RunRequest("7", "user:" + (code.get("entrypoint") or "fn"), steps, (GPUSlot("node0", 0),),
                      str(tmp_path / "checkpoints" / "7"), code=code, **kw)


def _mlp(**config) -> dict:
    return {"entrypoint": "train_mlp.py:train_loop", "working_dir": str(EXAMPLES),
            "config": {"lr": 0.05, "samples": 256, "hidden": 16, **config}}


def _stop_at(step: int):
    """Asked to stop once the run has reported ``step``."""
    return lambda: session.current().step >= step


def _weights(tmp_path) -> dict:
    folder, _ = store.newest(tmp_path / "checkpoints" / "7")
    return torch.load(folder / "state.pt", weights_only=True)["model"]


def test_a_commit_keeps_the_previous_checkpoint_until_the_new_one_is_complete(tmp_path, monkeypatch):
    job = tmp_path / "job"
    for step in (1, 2):
        src = tmp_path / f"src{step}"
        src.mkdir()
        (src / "w").write_text(str(step))
        store.commit(job, src, step)
    assert [(p.name, s) for p, s in store.checkpoints(job)] == [("latest", 2), ("previous", 1)]
    src = tmp_path / "src3"
    src.mkdir()
    (src / "w").write_text("3")
    real_replace = os.replace

    def crash_when_latest_moves_in(a, b):
        if Path(b).name == "latest":
            raise OSError("disk full")
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", crash_when_latest_moves_in)
    with pytest.raises(OSError):
        store.commit(job, src, 3)
    monkeypatch.undo()
    folder, step = store.newest(job)
    assert step == 2 and (folder / "w").read_text() == "2"  # the commit that failed cost nothing
    assert store.remove_leftovers(job) and not list(job.glob(".incoming-*"))


def test_a_stop_ends_the_run_inside_the_report_that_carries_a_checkpoint(tmp_path):
    asked = []
    s = session.Session(session.TrainContext(total_steps=10), str(tmp_path / "c"), lambda: bool(asked))
    s.report({}, step=1)
    assert not s.should_checkpoint()
    asked.append(1)
    assert s.should_checkpoint() and s.should_checkpoint()  # stays agreed
    s.report({"loss": 1.0}, step=2)  # no checkpoint: the run goes on (until its grace runs out)
    folder = tmp_path / "mine"
    folder.mkdir()
    with pytest.raises(session.RunStopped) as stopped:
        s.report({}, step=3, checkpoint=str(folder))
    assert stopped.value.step == 3 and store.newest(tmp_path / "c")[1] == 3
    assert not issubclass(session.RunStopped, Exception)  # a loop's ``except Exception`` cannot swallow it


def test_a_ray_train_checkpoint_call_works_on_the_returned_path(tmp_path):
    path = train.Checkpoint.from_directory(tmp_path)
    with path.as_directory() as d:
        assert d == str(tmp_path) == path.path and isinstance(path, str)


def test_outside_a_run_the_local_stand_in_answers():
    session.install(None)
    ctx = train.get_context()
    assert (ctx.world_size, ctx.world_rank, ctx.job_id) == (1, 0, None)
    assert train.get_checkpoint() is None and not train.should_checkpoint()
    train.report({"x": 1}, step=5)
    assert session.current().history[-1]["step"] == 5
    session.install(None)


def test_stopped_twice_and_resumed_the_user_loop_ends_bitwise_identical(tmp_path):
    whole = run_rank(_request(tmp_path / "a", _mlp()), lambda: False, 0, 1, None, {})
    assert whole.status == "finished" and whole.step == 12 and whole.notes == ()
    starts = []
    for n in (4, 8):  # the loop checkpoints at its next should_checkpoint(): one step later
        part = run_rank(_request(tmp_path / "b", _mlp()), _stop_at(n), 0, 1, None, {})
        assert part.status == "preempted"
        starts.append((part.start_step, part.step))
    last = run_rank(_request(tmp_path / "b", _mlp()), lambda: False, 0, 1, None, {})
    assert starts == [(0, 5), (5, 9)] and (last.start_step, last.step, last.status) == (9, 12, "finished")
    whole_w, parts_w = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert set(whole_w) == set(parts_w) and all(torch.equal(whole_w[k], parts_w[k]) for k in whole_w)


def _write(tmp_path, source: str) -> dict:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "loop.py").write_text(textwrap.dedent(source))
    return {"entrypoint": "loop.py:loop", "working_dir": str(tmp_path / "code"), "config": {"k": 3}}


def test_a_loop_that_raises_fails_with_its_own_traceback_and_is_not_retried(tmp_path):
    code = _write(tmp_path, """
        import pcs_ray.train as train
        def loop(config):
            train.report({}, step=1)
            helper(config["k"])
        def helper(k):
            raise RuntimeError(f"my bug {k}")
    """)
    out = run_rank(_request(tmp_path, code), lambda: False, 0, 1, None, {})
    assert out.status == "failed" and out.fatal
    assert out.error.splitlines()[-1] == "RuntimeError: my bug 3" and "in helper" in out.error
    assert "user_run.py" not in out.error  # our frames are cut


def test_a_loop_that_returns_early_finishes_at_its_last_report_and_says_so(tmp_path):
    code = _write(tmp_path, """
        import pcs_ray.train as train
        def loop(config):
            for step in range(1, 5):
                train.report({"k": config["k"]}, step=step)
    """)
    out = run_rank(_request(tmp_path, code, steps=10), lambda: False, 0, 1, None, {})
    assert (out.status, out.step) == ("finished", 4) and out.notes == ("returned early: at step 4 of 10",)


def test_a_function_sent_by_value_runs_with_its_config(tmp_path):
    import cloudpickle

    def loop(config):
        Path(config["out"]).write_text(str(config["k"]))
        train.report({}, step=3)

    out_file = tmp_path / "seen"
    code = {"function": base64.b64encode(cloudpickle.dumps(loop)).decode(), "config": {"k": 9, "out": str(out_file)}}
    out = run_rank(_request(tmp_path, code, steps=3), lambda: False, 0, 1, None, {})
    assert (out.status, out.step, out_file.read_text()) == ("finished", 3, "9")


def test_progress_goes_to_the_coordinator_in_the_jobs_own_units(tmp_path):
    class Target:
        def __init__(self):
            self.calls = []
            self.report_progress = self

        def remote(self, job_id, step, step_time, **kw):
            self.calls.append((step, step_time))

    target = Target()
    out = run_rank(_request(tmp_path, _mlp(), steps=5, reporter=target, report_interval_s=0.0),
                        lambda: False, 0, 1, None, {})
    assert out.status == "finished" and target.calls[0] == (0, None)  # its ranks began (hangs count from here)
    assert [s for s, _ in target.calls[1:]] == [1, 2, 3, 4, 5] and all(t for _, t in target.calls[1:])


def test_logs_are_read_per_attempt_and_rank_from_the_offsets_given():
    import tempfile

    from pcs_ray.contract import UnknownJobError
    from pcs_ray.coordinator.logs import read_logs

    root = Path(tempfile.mkdtemp())
    for attempt, ranks in ((1, 1), (2, 2)):
        folder = root / "5" / f"attempt-{attempt}"
        folder.mkdir(parents=True)
        for r in range(ranks):
            (folder / f"rank-{r}.log").write_text(f"a{attempt} r{r} line1\n")
    first = read_logs(root, 5)
    assert first["attempt"] == 2 and first["attempts"] == [1, 2] and set(first["ranks"]) == {"0", "1"}
    (root / "5" / "attempt-2" / "rank-1.log").open("a").write("more\n")
    offsets = {r: p["offset"] for r, p in first["ranks"].items()}
    again = read_logs(root, 5, 2, offsets)
    assert again["ranks"]["1"]["text"] == "more\n" and again["ranks"]["0"]["text"] == ""
    assert read_logs(root, 5, 1)["ranks"]["0"]["text"] == "a1 r0 line1\n"
    tail = read_logs(root, 5, 2, limit=4)["ranks"]["1"]
    assert tail["text"] == "ore\n"
    assert tail["skipped"] == tail["size"] - 4
    with pytest.raises(UnknownJobError, match="attempts with logs: 1, 2"):
        read_logs(root, 5, 9)
    assert read_logs(root, 6)["attempt"] is None


def test_a_trainer_names_a_files_function_as_an_entrypoint_and_sends_others_by_value(monkeypatch):
    import sys

    from pcs_ray.jobs.jobfile import parse_job
    from pcs_ray.train.trainer import Trainer

    monkeypatch.syspath_prepend(str(EXAMPLES))
    from train_mlp import train_loop

    spec = Trainer(train_loop, config={"lr": 0.1}, steps=50, gpus=2, client=object()).spec()
    assert spec["entrypoint"] == "train_mlp.py:train_loop" and spec["working_dir"] == str(EXAMPLES)
    assert parse_job(spec).workload.startswith("user:train_mlp.py:train_loop@")
    other = {**spec, "working_dir": str(EXAMPLES.parent)}  # another folder's train_mlp.py is other code
    assert parse_job(other, check_files=False).workload != parse_job(spec).workload

    def local_loop(config):
        train.report({}, step=1)

    by_value = Trainer(local_loop, steps=1, client=object()).spec()
    assert "entrypoint" not in by_value and by_value["name"] == "local_loop"
    assert parse_job(by_value).workload.startswith("user:fn-")
    sys.modules.pop("train_mlp", None)


def test_a_ray_train_loop_ported_by_its_imports_stops_and_resumes_where_it_left_off(tmp_path):
    code = {"entrypoint": "ray_train_port.py:train_func", "working_dir": str(EXAMPLES),
            "config": {"lr": 0.01, "batch_size": 64, "epochs": 6}}
    first = run_rank(_request(tmp_path, code, steps=6), _stop_at(2), 0, 1, None, {})
    assert (first.status, first.step) == ("preempted", 2)  # it never asks: its report with a checkpoint ends it
    rest = run_rank(_request(tmp_path, code, steps=6), lambda: False, 0, 1, None, {})
    assert (rest.status, rest.start_step, rest.step) == ("finished", 2, 6) and rest.metrics["epoch"] == 5


def test_the_coordinator_counts_steps_redone_fails_user_errors_at_once_and_keeps_a_finished_jobs_metrics(tmp_path):
    from pcs_ray.coordinator import StartRun
    from builders import Clock, coordinator

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "loop.py").write_text("def loop(config):\n    pass\n")
    journal = tmp_path / "journal.sqlite"
    core = coordinator(gpus=2, policy="srsf", journal=journal, checkpoint_root=tmp_path / "checkpoints", clock=Clock(),
                       workloads=None)
    user = {"entrypoint": "loop.py:loop", "working_dir": str(tmp_path / "code"), "gpus": 2, "step_time": 0.1}
    long_id, actions = core.submit({**user, "steps": 10_000, "config": {"k": 1}})
    request = next(a.request for a in actions if isinstance(a, StartRun))
    assert request.code["entrypoint"] == "loop.py:loop" and request.code["config"] == {"k": 1}
    assert request.log_dir.endswith(f"logs/{long_id}/attempt-1")
    core.progress(long_id, 130, 0.1)
    core.submit({**user, "steps": 10})  # shorter: srsf preempts the long job
    # Its loop ignored the stop; killed after the grace, it resumes from its checkpoint at step 100.
    core.run_ended(long_id, 1, "failed", step=100, error="runner rank 0 died (killed or crashed): ActorDiedError")
    assert core.job_view(long_id)["lost_steps"] == 30 and core.jobs[long_id].state == "queued"

    reopened = coordinator(gpus=2, policy="srsf", journal=journal, checkpoint_root=tmp_path / "checkpoints", clock=Clock(),
                           workloads=None)
    assert reopened.job_view(long_id)["lost_steps"] == 30  # journaled: a restart keeps the count

    core = coordinator(gpus=2, checkpoint_root=tmp_path / "c2", clock=Clock(), workloads=None)
    bad_id, actions = core.submit({**user, "steps": 5})
    assert any(isinstance(a, StartRun) for a in actions)
    core.run_ended(bad_id, 1, "failed", step=0, error="RuntimeError: my bug", fatal=True)
    view = core.job_view(bad_id)
    assert (view["state"], view["error"], view["attempts"]) == ("failed", "RuntimeError: my bug", 1)  # not retried
    good_id, _ = core.submit({**user, "steps": 5})
    (tmp_path / "c2" / str(good_id) / "latest").mkdir(parents=True)
    (tmp_path / "c2" / str(good_id) / "latest" / ".pcs-ray-checkpoint.json").write_text('{"step": 5}')
    core.run_ended(good_id, 1, "finished", step=5, metrics={"loss": 0.5})
    view = core.job_view(good_id)
    assert view["metrics"] == {"loss": 0.5} and view["checkpoint"] == str(tmp_path / "c2" / str(good_id) / "latest")


def test_a_rank_silent_past_its_report_timeout_dumps_its_stacks_and_one_that_reports_does_not(tmp_path, capfd):
    code = _write(tmp_path, """
        import time
        import pcs_ray.train as train
        def loop(config):
            for step in range(1, 6):  # reports every 0.1 s: each report re-arms the dump
                time.sleep(0.1)
                train.report({}, step=step)
            stuck_in_a_dead_loader()
        def stuck_in_a_dead_loader():
            time.sleep(1.2)
    """)
    out = run_rank(_request(tmp_path, code, steps=5, report_timeout_s=0.5), lambda: False, 0, 1, None, {})
    err = capfd.readouterr().err
    assert out.status == "finished"
    assert err.count("Timeout (0:00:00.500000)!") == 1  # once, while it was stuck, not while it reported
    assert "in stuck_in_a_dead_loader" in err and "in loop" in err


def test_the_stack_dump_is_disarmed_when_the_run_ends(tmp_path, capfd):
    import time

    code = _write(tmp_path, """
        import pcs_ray.train as train
        def loop(config):
            train.report({}, step=1)
    """)
    out = run_rank(_request(tmp_path, code, steps=1, report_timeout_s=0.3), lambda: False, 0, 1, None, {})
    time.sleep(0.6)  # past the timeout armed at its report
    assert out.status == "finished" and "Timeout" not in capfd.readouterr().err
