"""Retention of ended jobs: forgotten after their age or past a count, their journal events, memory,
checkpoints and logs with them; ids never reused; jobs that have not ended never touched; a bad setting refused."""

from __future__ import annotations

import pytest
import typer
from builders import Clock, coordinator, submission

from pcs_ray.commands.limits import parse_limits
from pcs_ray.contract import ConfigError
from pcs_ray.coordinator import Journal, StartRun
from pcs_ray.coordinator.config import CoordinatorConfig
from pcs_ray.coordinator.retention import CHECK_EVERY_S, Retention


def make(tmp_path, retain: Retention, gpus: int = 2, **options):
    clock = Clock()
    core = coordinator(journal=tmp_path / "journal.sqlite", clock=clock, gpus=gpus, retain=retain,
                       checkpoint_root=tmp_path / "checkpoints", **options)
    return core, clock


def run_to_end(core, clock, jid: int, seconds: float = 10.0) -> None:
    """Start (if it is not running) and finish ``jid``, with a checkpoint and a log on disk as a run leaves them."""
    job = core.jobs[jid]
    assert job.state == "running", job.state
    (core.checkpoint_root / str(jid) / "step-100").mkdir(parents=True)
    logs = core.checkpoint_root.parent / "logs" / str(jid) / "attempt-1"
    logs.mkdir(parents=True)
    (logs / "rank-0.log").write_text("hello\n")
    clock.t += seconds
    core.run_ended(jid, job.attempt, "finished", step=100)


def on_disk(core, jid: int) -> bool:
    return (core.checkpoint_root / str(jid)).exists() or (core.checkpoint_root.parent / "logs" / str(jid)).exists()


def journaled_jobs(path) -> set[int]:
    j = Journal(path)
    try:
        return {e.job_id for e in j.events() if e.job_id is not None}
    finally:
        j.close()


def test_an_ended_job_is_forgotten_after_its_age_with_its_events_checkpoints_and_logs(tmp_path):
    core, clock = make(tmp_path, Retention(ended_job_s=3600, ended_jobs_kept=None))
    a, _ = core.submit(submission(name="a"), submission_id="sub-a")
    b, _ = core.submit(submission(name="b"))
    run_to_end(core, clock, a)
    core.tick()
    assert a in core.jobs and on_disk(core, a)  # ended, but not long enough ago
    assert core.model.placement.explain(a) is not None
    clock.t += 3600 + CHECK_EVERY_S
    core.tick()
    assert a not in core.jobs and not on_disk(core, a) and core.model.placement.explain(a) is None
    assert b in core.jobs and core.jobs[b].state == "running"  # a job that has not ended stays, whatever its age
    assert a not in journaled_jobs(tmp_path / "journal.sqlite") and b in journaled_jobs(tmp_path / "journal.sqlite")
    assert a not in {j["id"] for j in core.status()["jobs"]}
    # The same submission id again is a new job (its first answer was given long ago), with a new id.
    again, _ = core.submit(submission(name="a"), submission_id="sub-a")
    assert again > b


def test_past_the_count_the_oldest_ended_jobs_are_forgotten_first(tmp_path):
    core, clock = make(tmp_path, Retention(ended_job_s=None, ended_jobs_kept=2), gpus=4)
    ids = [core.submit(submission())[0] for _ in range(4)]
    for jid in ids:
        run_to_end(core, clock, jid, seconds=5)
    assert core.forget_ended() == ids[:2]
    assert sorted(core.jobs) == ids[2:] and not any(on_disk(core, j) for j in ids[:2])
    assert all(on_disk(core, j) for j in ids[2:])


def test_a_restarted_coordinator_keeps_what_was_forgotten_forgotten_and_never_reuses_an_id(tmp_path):
    retain = Retention(ended_job_s=60, ended_jobs_kept=None)
    core, clock = make(tmp_path, retain)
    first = [core.submit(submission())[0] for _ in range(2)]
    for jid in first:
        run_to_end(core, clock, jid)
    clock.t += 60 + CHECK_EVERY_S
    assert core.forget_ended() == first
    core.journal.close()
    again = coordinator(journal=tmp_path / "journal.sqlite", clock=clock, gpus=2, retain=retain,
                        checkpoint_root=tmp_path / "checkpoints")
    assert again.jobs == {} and again.forgotten == 2
    new, actions = again.submit(submission())
    assert new == max(first) + 1 and any(isinstance(a, StartRun) for a in actions)


def test_the_journal_stays_bounded_under_a_stream_of_jobs(tmp_path):
    """Hundreds of jobs through a core that keeps ten ended ones: the journal holds about ten jobs' events."""
    core, clock = make(tmp_path, Retention(ended_job_s=None, ended_jobs_kept=10))
    for _ in range(200):
        jid, _ = core.submit(submission())
        clock.t += 1
        core.run_ended(jid, 1, "finished", step=100)
        clock.t += CHECK_EVERY_S / 10
        core.tick()
    assert len(core.jobs) <= 10 + 10  # the bound, plus those that ended since the last check
    kept = journaled_jobs(tmp_path / "journal.sqlite")
    assert kept == set(core.jobs) and len(core.journal) < 20 * 10
    [marker] = [e for e in core.journal.events() if e.kind == "compacted"]  # one, however many compactions
    assert marker.data["jobs"] == 200 - len(core.jobs) and min(core.jobs) < marker.data["next_id"] <= 201


def test_retention_is_an_operator_limit_and_a_bad_value_is_refused():
    assert parse_limits(["ended_job_retention_s=86400", "ended_jobs_kept=500"]) == {
        "ended_job_retention_s": 86400.0, "ended_jobs_kept": 500}
    assert parse_limits(["ended_jobs_kept=none"]) == {"ended_jobs_kept": None}
    with pytest.raises(typer.BadParameter):
        parse_limits(["ended_jobs_kept=-1"])
    config = CoordinatorConfig(cluster={}, state_dir="/tmp/x", ended_job_retention_s=600, ended_jobs_kept=None)
    assert config.retention() == Retention(ended_job_s=600, ended_jobs_kept=None)
    with pytest.raises(ConfigError):
        CoordinatorConfig(cluster={}, state_dir="/tmp/x", ended_jobs_kept=0).retention()


def test_the_speed_model_keeps_the_most_recently_measured_shapes(tmp_path):
    """A sweep gives every trial's config a shape of its own: past SHAPES_KEPT the least recently measured go."""
    from pcs_ray.coordinator.jobs import LiveJob
    from pcs_ray.coordinator.speed import SHAPES_KEPT, SpeedModel, spec_shape
    from pcs_ray.jobs.jobfile import JobFile

    speed = SpeedModel()

    def measure(width: int) -> str:
        spec = JobFile.model_validate({"entrypoint": "train.py:loop", "steps": 10, "config": {"width": width}})
        job = LiveJob(width, spec, 0.0, t1=speed.estimate(spec))
        job.launched(0.0, 1, (0,), 1.0, "start")
        speed.observe_step_time(job, 0.5)
        return spec_shape(spec)

    first = measure(0)
    shapes = [measure(w) for w in range(1, SHAPES_KEPT + 50)]
    assert len(speed.steps) == SHAPES_KEPT and first not in speed.steps
    measure(100)  # measured again: now the most recent, kept past the next ones
    for w in range(SHAPES_KEPT + 50, SHAPES_KEPT + 150):
        measure(w)
    assert shapes[99] in speed.steps and shapes[100] not in speed.steps
    speed.save(tmp_path / "speeds.json")
    again = SpeedModel()
    assert again.load(tmp_path / "speeds.json") and list(again.steps) == list(speed.steps)


def test_the_job_history_rotates_past_its_size_keeping_the_newest_records(tmp_path):
    from pcs_ray.workloads.history import HistoryRecord, append_history, read_history_records

    path = tmp_path / "history.jsonl"
    for i in range(1, 201):
        append_history(path, HistoryRecord(i, float(i), 1, 10.0), rotate_bytes=2000)
    newest = [r.job_id for r in read_history_records(path)]
    older = [r.job_id for r in read_history_records(tmp_path / "history.jsonl.1")]
    assert path.stat().st_size <= 2000 and (tmp_path / "history.jsonl.1").stat().st_size <= 2000
    assert newest[-1] == 200 and older[-1] == newest[0] - 1  # nothing lost at the seam
    assert len(list(tmp_path.iterdir())) == 2


def test_the_coordinator_rotates_its_job_history_at_the_operators_size(tmp_path):
    core, clock = make(tmp_path, Retention(history_bytes=600), gpus=4, history_path=tmp_path / "history.jsonl")
    for _ in range(12):
        jid, _ = core.submit(submission())
        run_to_end(core, clock, jid)
    assert (tmp_path / "history.jsonl.1").exists() and core.history_path.stat().st_size <= 600


def test_the_journal_alone_replays_after_a_compaction_as_pcs_ray_report_reads_it(tmp_path):
    from pcs_ray.coordinator.journal_interpreter import JournalInterpreter

    core, clock = make(tmp_path, Retention(ended_job_s=None, ended_jobs_kept=1))
    ids = [core.submit(submission())[0] for _ in range(2)]
    for jid in ids:
        run_to_end(core, clock, jid)
    waiting, _ = core.submit(submission())
    assert core.forget_ended() == ids[:1]
    report = JournalInterpreter()
    for e in core.journal.events():
        report.apply(e.t, e.kind, e.job_id, e.data)
    assert sorted(report.jobs) == [ids[1], waiting] and report.forgotten == 1 and report.next_id == waiting + 1


def test_the_metrics_exporter_forgets_the_jobs_retention_forgot():
    """Each finished job's prediction error is observed once; the ids it remembers for that are those still
    kept (an id seen again after it was forgotten would count again: nothing of it was kept)."""
    from pcs_ray.coordinator.metrics_export import RayMetrics, Readings

    metrics = RayMetrics()
    observed: list[float] = []
    metrics.error = type("Recorder", (), {"observe": lambda self, v: observed.append(v)})()

    def publish(errors: dict[int, float]) -> None:
        metrics.publish(Readings({"finished": len(errors)}, {}, 0, 4, 0, errors, {}, {}))

    publish({1: 5.0, 2: 7.0})
    publish({1: 5.0, 2: 7.0, 3: 1.0})
    assert observed == [5.0, 7.0, 1.0]
    publish({3: 1.0})  # 1 and 2 forgotten
    publish({1: 5.0, 3: 1.0})
    assert observed == [5.0, 7.0, 1.0, 5.0]


def test_a_decision_reads_none_of_the_ended_jobs_retention_keeps(tmp_path):
    """The decision's cost follows the jobs in flight, not those ended and kept: with a few hundred ended
    jobs retained, a decision (submission, run end, cancel) reads no attribute of any of them, and walks
    what it walks with none retained (counted, not timed)."""
    from pcs_ray.coordinator.jobs import LiveJob

    reads = {"ended": 0}

    class Watched(LiveJob):  # an ended job: every attribute read of it is counted
        def __getattribute__(self, name):
            reads["ended"] += 1
            return object.__getattribute__(self, name)

    core, clock = make(tmp_path, Retention(ended_job_s=None, ended_jobs_kept=None))
    for _ in range(300):
        jid, _ = core.submit(submission())
        clock.t += 1
        core.run_ended(jid, 1, "finished", step=100)
    assert len(core.jobs) == 300 and not core.active
    core.tick()  # retention's own walk of the ended jobs, once a minute (CHECK_EVERY_S), is not a decision's
    for job in core.jobs.values():
        job.__class__ = Watched
    waiting = [core.submit(submission(gpus=2))[0] for _ in range(3)]  # one runs, two wait behind it
    clock.t += 1
    running = next(j for j in waiting if core.jobs[j].state == "running")
    core.run_ended(running, 1, "finished", step=100)
    core.cancel(waiting[-1])
    clock.t += 1
    core.tick()  # guards and the policy's review
    assert reads["ended"] == 0


def test_a_forgotten_jobs_staged_datasets_go_with_it_and_only_under_the_clusters_own_folder(tmp_path):
    core, clock = make(tmp_path, Retention(ended_job_s=60, ended_jobs_kept=None))
    code = tmp_path / "code"
    code.mkdir()
    (code / "loop.py").write_text("def loop(config):\n    pass\n")
    staged = core.checkpoint_root.parent / "datasets" / "0123456789abcdef"
    staged.mkdir(parents=True)
    (staged / "train.arrow").write_bytes(b"rows")
    elsewhere = tmp_path / "elsewhere" / "datasets" / "0123456789abcdef"  # a spec's root is never trusted
    elsewhere.mkdir(parents=True)
    datasets = {"root": str(tmp_path / "elsewhere"), "token": "0123456789abcdef",
                "datasets": {"train": {"key": "datasets/0123456789abcdef/train.arrow", "rows": 1, "split": True}}}
    jid, _ = core.submit({"entrypoint": "loop.py:loop", "working_dir": str(code), "steps": 10, "datasets": datasets})
    run_to_end(core, clock, jid)
    clock.t += 60 + CHECK_EVERY_S
    core.tick()
    assert jid not in core.jobs and not staged.exists() and elsewhere.exists()
