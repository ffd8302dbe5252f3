"""Ray Train's driver names under pcs_ray.train: configs, refusals, TorchTrainer's job spec, Result,
retries under ``max_failures`` and jobs that give no total steps. Ray-free: the coordinator's core and a
rank's run (``run_rank``) are called in this process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pcs_ray.train as train
from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator import Coordinator, Journal, StartRun
from pcs_ray.coordinator.logs import read_logs
from pcs_ray.jobs.jobfile import JobSpecError, parse_job
from pcs_ray.policies import build_policy
from pcs_ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, UnsupportedOptionError
from pcs_ray.train.result import Result
from pcs_ray.train.session import CheckpointPath
from pcs_ray.train.torch import TorchTrainer
from pcs_ray.train.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent


def loop(config):
    """A top-level function of this file: it travels as an entrypoint."""


def test_train_torch_is_an_attribute_and_importing_the_contract_imports_neither_torch_nor_the_client():
    probe = ("import sys, pcs_ray.train as train; t = train.torch; t.prepare_data_loader; t.prepare_model; "
             "from pcs_ray.train import RunConfig, ScalingConfig, Checkpoint; "
             "print(sorted(m for m in ('torch', 'ray', 'pcs_ray.client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
    assert train.torch.TorchTrainer is TorchTrainer
    with pytest.raises(AttributeError):
        getattr(train, "no_such_name")


@pytest.mark.parametrize("module, name", [("pcs_ray.train", "SyncConfig"), ("pcs_ray.train", "Callback")])
def test_a_ray_train_name_without_meaning_here_says_so_when_imported(module, name):
    with pytest.raises(UnsupportedOptionError) as info:
        exec(f"from {module} import {name}", {})
    assert name in str(info.value) and "\n" not in str(info.value) and ";" in str(info.value)


def test_the_torch_helpers_answer_for_this_rank():
    import torch

    assert train.torch.get_device() == torch.device("cpu") and train.torch.get_devices() == [torch.device("cpu")]
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    assert train.torch.prepare_optimizer(optimizer) is optimizer


def test_a_worker_count_is_a_rigid_job_and_a_range_an_elastic_one():
    assert ScalingConfig(num_workers=3).gpu_range() == (3, 3)
    assert ScalingConfig(num_workers=(1, 4)).gpu_range() == (1, 4)
    rigid = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2, use_gpu=True), steps=5, client=object())
    elastic = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=(1, 4), use_gpu=True), steps=5, client=object())
    assert (rigid.spec()["gpus"], rigid.spec()["min_gpus"]) == (2, 2)
    assert (elastic.spec()["gpus"], elastic.spec()["min_gpus"]) == (4, 1)
    for bad in (0, (3, 2), (1, 2, 3), "2", True):
        with pytest.raises(UnsupportedOptionError, match="num_workers"):
            ScalingConfig(num_workers=bad)


def test_a_torch_trainer_submits_the_job_a_trainer_of_the_same_fields_makes():
    torch_trainer = TorchTrainer(
        loop, train_loop_config={"lr": 0.1}, steps=40, job_class="B", tenant="vision", client=object(),
        scaling_config=ScalingConfig(num_workers=(2, 4), use_gpu=True, resources_per_worker={"GPU": 1}),
        run_config=RunConfig(name="mlp", failure_config=FailureConfig(max_failures=2),
                             checkpoint_config=CheckpointConfig(num_to_keep=2), worker_runtime_env={"env_vars": {"A": "1"}}))
    plain = Trainer(loop, config={"lr": 0.1}, steps=40, gpus=4, min_gpus=2, name="mlp", job_class="B", tenant="vision",
                    runtime_env={"env_vars": {"A": "1"}}, max_failures=2, client=object())
    assert torch_trainer.spec() == plain.spec()
    assert torch_trainer.spec()["entrypoint"] == "test_train_api.py:loop" and torch_trainer.spec()["max_failures"] == 2
    parse_job(torch_trainer.spec(), check_files=False)  # a valid job file
    assert "steps" not in TorchTrainer(loop, scaling_config=ScalingConfig(use_gpu=True), client=object()).spec()


def test_both_trainers_carry_the_guards_a_job_file_sets():
    guarded = TorchTrainer(loop, scaling_config=ScalingConfig(use_gpu=True), steps=5, client=object(),
                           max_runtime_s=3600, report_timeout_s=120).spec()
    assert guarded == Trainer(loop, steps=5, min_gpus=1, max_runtime_s=3600, report_timeout_s=120, client=object()).spec()
    assert (guarded["max_runtime_s"], guarded["report_timeout_s"]) == (3600, 120)
    parse_job(guarded, check_files=False)


def test_use_gpu_false_is_said_not_dropped():
    with pytest.warns(UserWarning, match="holds one GPU"):
        TorchTrainer(loop, client=object())


@pytest.mark.parametrize("make, option", [
    (lambda: ScalingConfig(resources_per_worker={"CPU": 4}), "resources_per_worker"),
    (lambda: ScalingConfig(resources_per_worker={"GPU": 2}), "resources_per_worker"),
    (lambda: ScalingConfig(placement_strategy="SPREAD"), "placement_strategy"),
    (lambda: ScalingConfig(accelerator_type="A100"), "accelerator_type"),
    (lambda: ScalingConfig(trainer_resources={"CPU": 1}), "trainer_resources"),
    (lambda: FailureConfig(max_failures=-1), "max_failures"),
    (lambda: FailureConfig(max_failures=101), "max_failures"),
    (lambda: FailureConfig(fail_fast=True), "fail_fast"),
    (lambda: CheckpointConfig(num_to_keep=101), "num_to_keep"),
    (lambda: CheckpointConfig(checkpoint_score_attribute="loss"), "checkpoint_score_attribute"),
    (lambda: CheckpointConfig(checkpoint_frequency=2), "checkpoint_frequency"),
    (lambda: RunConfig(storage_path="nosuchscheme://bucket/runs"), "storage_path"),  # a URI nothing opens
    (lambda: RunConfig(storage_path="s3:///runs"), "storage_path"),  # no bucket
    (lambda: RunConfig(storage_path="bucket/runs", storage_filesystem=object()), "storage_filesystem"),
    (lambda: RunConfig(callbacks=[object()]), "callbacks"),
    (lambda: RunConfig(stop={"training_iteration": 3}), "stop"),
    (lambda: RunConfig(sync_config=object()), "sync_config"),
    (lambda: RunConfig(log_to_file=True), "log_to_file"),
    (lambda: TorchTrainer(loop, torch_config=object(), client=object()), "torch_config"),
    (lambda: TorchTrainer(loop, datasets={"train": object()}, client=object()), "datasets"),
    (lambda: TorchTrainer(loop, resume_from_checkpoint="/tmp/x", client=object()), "resume_from_checkpoint"),
    (lambda: TorchTrainer(loop, metadata={"a": 1}, client=object()), "metadata"),
])
def test_a_ray_option_without_meaning_here_is_refused_in_one_line_saying_what_to_do(make, option):
    with pytest.raises(UnsupportedOptionError) as info:
        make()
    text = str(info.value)
    assert option in text and "\n" not in text and ";" in text  # what is wrong; what to do instead
    assert isinstance(info.value, ValueError)


def test_a_result_answers_ray_trains_calls_and_keeps_itself_in_storage_path(tmp_path):
    folder = tmp_path / "latest"
    folder.mkdir()
    (folder / "model.pt").write_text("weights")
    rows = [{"step": 1, "attempt": 1, "loss": 3.0}, {"step": 2, "attempt": 1, "loss": 2.0},
            {"step": 2, "attempt": 2, "loss": 1.5}, {"step": 3, "attempt": 2, "loss": 1.0}]
    result = Result({"loss": 1.0}, CheckpointPath(folder), path=str(tmp_path), job_id=7, history=lambda: rows)
    with result.checkpoint.as_directory() as d:
        assert (Path(d) / "model.pt").read_text() == "weights"
    frame = result.metrics_dataframe
    assert list(frame["step"]) == [1, 2, 3] and list(frame["loss"]) == [3.0, 1.5, 1.0]  # step 2 redone: newest row
    assert result.error is None and result.best_checkpoints == [(result.checkpoint, {"loss": 1.0})]
    assert CheckpointPath.from_directory(folder).to_directory(tmp_path / "copy") == str(tmp_path / "copy")
    kept = result.keep_in(tmp_path / "runs" / "mlp")
    assert kept.path == str(tmp_path / "runs" / "mlp") and (Path(kept.checkpoint) / "model.pt").read_text() == "weights"
    lines = [json.loads(line) for line in (tmp_path / "runs" / "mlp" / "result.json").read_text().splitlines()]
    assert lines == [{**row, "job_id": 7} for row in rows]  # Ray's result.json: a line per report, oldest first


def test_job_files_take_max_failures_for_own_code_and_need_steps_only_for_built_in_workloads():
    user = {"entrypoint": "train.py:loop", "working_dir": "/tmp"}
    assert parse_job({**user, "max_failures": 3}, check_files=False).max_failures == 3
    assert parse_job({**user, "steps": 5}, check_files=False).max_failures == 0  # as before: no retry
    assert not parse_job(user, check_files=False).total_known
    for raw, field in (({"workload": "mlp", "steps": 5, "max_failures": 1}, "max_failures"),
                       ({"workload": "mlp"}, "steps"), ({**user, "max_failures": 101}, "max_failures")):
        with pytest.raises(JobSpecError, match=field):
            parse_job(raw, check_files=False)


CRASHING_LOOP = """
    import os
    import pcs_ray.train as train

    def loop(config):
        ckpt = train.get_checkpoint()
        start = int(open(os.path.join(ckpt, "epoch")).read()) if ckpt else 0
        for epoch in range(start, config["epochs"]):
            folder = train.checkpoint_dir()
            with open(os.path.join(folder, "epoch"), "w") as f:
                f.write(str(epoch + 1))
            train.report({"epoch": epoch, "start": start}, checkpoint=folder)
            if epoch + 1 in config["crash_after"][train.get_context().attempt - 1:][:1]:
                raise RuntimeError(f"crash after epoch {epoch + 1}")
"""


def _crashing(tmp_path, **fields) -> tuple[Coordinator, int, list]:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "loop.py").write_text(textwrap.dedent(CRASHING_LOOP))
    core = Coordinator(ClusterSpec.homogeneous(1, 2), build_policy("fifo"), Journal(tmp_path / "journal.sqlite"),
                       checkpoint_root=tmp_path / "checkpoints", clock=lambda: 1000.0)
    jid, actions = core.submit({"entrypoint": "loop.py:loop", "working_dir": str(tmp_path / "code"),
                                "config": {"epochs": 6, "crash_after": [2, 4]}, **fields})
    return core, jid, actions


def _run_until_done(core, jid, actions) -> list:
    from pcs_ray.executors.user_run import run_rank

    outcomes = []
    while not core.jobs[jid].done:
        request = next(a.request for a in actions if isinstance(a, StartRun) and a.request.job_id == str(jid))
        out = run_rank(request, lambda: False, 0, 1, None, {})
        outcomes.append(out)
        actions = core.run_ended(jid, request.attempt, out.status, out.step, error=out.error, fatal=out.fatal,
                                 note=next((n for n in out.notes if n.startswith("returned early")), None),
                                 metrics=out.metrics)
    return outcomes


def test_a_loop_that_raises_twice_under_max_failures_2_finishes_from_its_checkpoints(tmp_path):
    core, jid, actions = _crashing(tmp_path, max_failures=2, steps=6)
    outcomes = _run_until_done(core, jid, actions)
    assert [(o.status, o.start_step, o.step) for o in outcomes] == [("failed", 0, 2), ("failed", 2, 4), ("finished", 4, 6)]
    view = core.job_view(jid)
    assert (view["state"], view["retries"], view["attempts"], view["metrics"]) == (
        "finished", 2, 3, {"epoch": 5, "start": 4})
    errors = [s.get("error", "").splitlines()[-1:] for s in view["segments"]]
    assert errors == [["RuntimeError: crash after epoch 2"], ["RuntimeError: crash after epoch 4"], []]
    reopened = Coordinator(ClusterSpec.homogeneous(1, 2), build_policy("fifo"), Journal(tmp_path / "journal.sqlite"),
                           checkpoint_root=tmp_path / "checkpoints", clock=lambda: 1000.0)
    again = reopened.job_view(jid)  # journaled: a restart keeps the count and each run's error
    assert again["retries"] == 2 and [s.get("error") for s in again["segments"]] == [s.get("error") for s in view["segments"]]
    rows = [row for a in (1, 2, 3) for row in read_logs(tmp_path / "logs", jid, a, metrics=True)["metrics"]]
    assert [(r["attempt"], r["step"]) for r in rows] == [(1, 1), (1, 2), (2, 3), (2, 4), (3, 5), (3, 6)]
    assert "metrics" not in read_logs(tmp_path / "logs", jid, 3)  # only when asked


def test_a_loop_that_raises_more_often_than_its_max_failures_fails_with_its_error(tmp_path):
    core, jid, actions = _crashing(tmp_path, max_failures=1, steps=6)
    outcomes = _run_until_done(core, jid, actions)
    view = core.job_view(jid)
    assert [o.status for o in outcomes] == ["failed", "failed"] and view["state"] == "failed"
    assert view["error"].splitlines()[-1] == "RuntimeError: crash after epoch 4" and view["retries"] == 1
    assert view["segments"][-1]["error"].endswith("RuntimeError: crash after epoch 4")


def test_a_job_without_steps_runs_to_its_return_and_its_prediction_says_it_has_no_total(tmp_path):
    core, jid, actions = _crashing(tmp_path, max_failures=2)
    prediction = core.prediction(jid)
    assert prediction["total_steps"] is None and "no total steps given" in prediction["note"]
    assert prediction["predicted_completion"] is not None and prediction["assumed_total_steps"] > 0
    first = next(a.request for a in actions if isinstance(a, StartRun))
    assert first.total_steps is None
    outcomes = _run_until_done(core, jid, actions)
    view = core.job_view(jid)
    assert (view["state"], view["steps"], view["note"]) == ("finished", 6, None)  # no "returned early": no total
    assert outcomes[-1].notes == () or not any("returned early" in n for n in outcomes[-1].notes)
    assert "note" not in core.prediction(jid)


def test_every_rank_may_report_a_checkpoint_its_files_are_merged_into_its_runs_checkpoint(tmp_path):
    import pcs_ray.train.store as store

    def folder(name: str, **files) -> Path:
        path = tmp_path / name
        path.mkdir()
        for file, text in files.items():
            (path / file).write_text(text)
        return path

    job = tmp_path / "job"
    store.commit(job, folder("old", **{"model.pt": "step 1"}), 1, run=1)
    store.commit(job, folder("r0", **{"model.pt": "step 2", "rank0": "a"}), 2, run=1)
    store.commit(job, folder("r1", **{"model.pt": "step 2", "rank1": "b"}), 2, run=1)  # the other rank, same step
    latest, step = store.newest(job)
    assert step == 2 and sorted(p.name for p in latest.iterdir() if p.name != store.MARKER) == ["model.pt", "rank0", "rank1"]
    assert store.checkpoints(job)[1][1] == 1  # the one before is still the previous step's
    store.commit(job, folder("next", **{"model.pt": "step 2 again"}), 2, run=2)  # a later run: a new checkpoint
    assert [s for _, s in store.checkpoints(job)] == [2, 2] and not (store.newest(job)[0] / "rank0").exists()


def test_status_shows_a_job_without_a_total_as_its_steps_over_a_question_mark(tmp_path):
    from pcs_ray.commands.format import StatusTable

    core, jid, _ = _crashing(tmp_path)
    core.progress(jid, 3, 1.0)
    [view] = core.status()["jobs"]
    assert StatusTable(core.status()).cells(view)["progress"] == "3/?"


def test_predict_says_in_words_that_a_job_has_no_total(tmp_path, monkeypatch, capsys):
    import pcs_ray.commands.live as live

    core, jid, _ = _crashing(tmp_path)
    monkeypatch.setattr(live, "coordinator_client", lambda *where: type("C", (), {"predict": lambda self, j: core.prediction(j)})())
    live.predict_cmd(jid)
    assert "no total steps given: predicted as if it took" in capsys.readouterr().out


def test_a_runs_metrics_log_is_opened_once_and_each_report_is_on_disk_as_it_is_made(tmp_path, monkeypatch):
    import builtins

    import pcs_ray.train.session as session_module

    opened = []

    def counting_open(*args, **kwargs):
        opened.append(args[0])
        return builtins.open(*args, **kwargs)

    monkeypatch.setattr(session_module, "open", counting_open, raising=False)
    log = tmp_path / "metrics.jsonl"
    session = session_module.Session(session_module.TrainContext(), str(tmp_path / "ckpt"), metrics_log=str(log))
    for step in range(1, 101):
        session.report({"loss": 1.0 / step}, step=step)
        if step in (1, 50):  # read back while the run goes on: nothing waits in a buffer
            assert json.loads(log.read_text().splitlines()[-1]) == {"step": step, "attempt": 0, "loss": 1.0 / step}
    assert opened == [str(log)]  # not once per report: that cost 120-140 us a report on a busy machine
    session.close()
    session.close()  # a second close is harmless
    assert len(log.read_text().splitlines()) == 100
