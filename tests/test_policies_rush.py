"""RUSH (``pcs_ray.policies.rush``): the start function and its skip threshold, waiting for GPUs predicted
fast, its one-line option errors, and skips journaled and shown by a live coordinator."""

from __future__ import annotations

from functools import partial

import pytest

from pcs_ray import cli
from pcs_ray.policies import build_policy
from pcs_ray.policies.rush import RushPolicy
from pcs_ray.sim.run import simulate
from builders import Clock, coordinator, invoke, job_spec, recorded_devices, replayed, slow_device

#: A rigid job of ``max_gpus`` GPUs that runs ``runtime`` seconds on them.
spec = partial(job_spec, rigid=True, runtime=100.0)


# -- the start function and its skip threshold -------------------------------------------------


class AlwaysSlow:
    """Predicts every run slow."""

    def __init__(self):
        self.asked = 0

    def would_be_slow(self, job, n, free, now):
        self.asked += 1
        return True


class Recording(RushPolicy):
    """Keeps the engine's skip table so the test can read it."""

    def make_index(self, jobs):
        self.table = super().make_index(jobs)
        return self.table


@pytest.mark.parametrize("threshold", [0, 1, 3])
def test_skip_threshold_is_honoured(threshold):
    """A job predicted slow every time is skipped exactly ``threshold`` times (every scheduling pass
    counts: arrivals, completions and the retries ``retry`` seconds apart), then launched."""
    policy = Recording(skip_threshold=threshold, retry=10.0)
    policy.predictor = AlwaysSlow()
    alone = simulate([spec(1, max_gpus=2, submit=5.0)], 4, policy, predict=False)
    assert alone.records[0].start == pytest.approx(5.0 + 10.0 * threshold)
    assert [jid for _, jid, _ in policy.table.log] == [1] * threshold
    jobs = [spec(1, max_gpus=2, submit=5.0), spec(2, max_gpus=4, submit=6.0),
            spec(3, max_gpus=4, runtime=50.0, submit=7.0), spec(4, max_gpus=1, submit=7.5)]
    result = simulate(jobs, 4, policy, predict=False)
    assert all(r.finish is not None for r in result.records)
    skips = [jid for _, jid, _ in policy.table.log]
    assert sorted(skips) == sorted([1, 2, 3, 4] * threshold)  # each exactly its threshold, never more


def test_rush_without_predictor_is_fcfs_easy():
    jobs = [spec(1, max_gpus=2), spec(2, max_gpus=4, submit=1.0), spec(3, max_gpus=2, runtime=50.0, submit=2.0),
            spec(4, max_gpus=1, submit=3.0)]
    a = simulate(jobs, 4, build_policy("rush"), predict=False)
    b = simulate(jobs, 4, build_policy("fcfs-easy"), predict=False)
    assert [(r.start, r.finish) for r in a.records] == [(r.start, r.finish) for r in b.records]


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_threshold_must_be_a_non_negative_integer(bad):
    with pytest.raises(ValueError, match="skip threshold"):
        build_policy("rush", skip_threshold=bad)


def test_rush_waits_for_fast_gpus():
    """RUSH with the replay's predictions: the second job would land on the slow GPU, so it waits for
    the first to end and then gets a fast GPU; FCFS+EASY starts it at once and runs it 3x slower."""
    def run(policy_name):
        placed = replayed("packed-sticky-slow-run", recorded_devices(4))
        placed.replay.devices[3] = slow_device(3.0)
        policy = build_policy(policy_name)
        if isinstance(policy, RushPolicy):
            policy.predictor = placed.replay
        jobs = [spec(1, max_gpus=3, runtime=100.0), spec(2, max_gpus=1, runtime=100.0, submit=1.0)]
        return simulate(jobs, 4, policy, predict=False, placement=placed), placed.replay

    easy, easy_replay = run("fcfs-easy")
    rush, rush_replay = run("rush")
    assert easy_replay.slow_runs == 1 and rush_replay.slow_runs == 0
    assert rush.records[1].start >= 100.0 and rush.records[1].finish < easy.records[1].finish


def test_negative_threshold_and_bad_variability_are_one_line_errors(capsys):
    base = ["simulate", "--workload", "themis1", "--num-jobs", "5", "--gpus", "8", "--no-predict", "--json"]
    code, out, err = invoke(capsys, *base, "-p", "rush", "--skip-threshold", "-1")
    assert code == 2 and out == "" and "--skip-threshold must be >= 0, got -1" in err and err.count("\n") == 1
    code, _, err = invoke(capsys, *base, "-p", "rush", "--placement", "packed-sticky", "--run-variability", "quartz")
    assert code == 2 and "unknown --run-variability 'quartz'" in err
    code, _, err = invoke(capsys, *base, "-p", "rush", "--run-variability", "longhorn")
    assert code == 2 and "--run-variability needs --placement" in err


# -- live: skips are journaled and shown ------------------------------------------------------------


def test_live_skips_show_in_status_and_report_and_survive_a_restart(tmp_path):
    from pcs_ray.commands.format import status_table
    from pcs_ray.commands.report import journal_status
    from pcs_ray.coordinator import StartRun

    clock = Clock()

    def core():
        policy = RushPolicy(skip_threshold=2, retry=10.0, predictor=AlwaysSlow())
        return coordinator(policy=policy, journal=tmp_path / "journal.sqlite", checkpoint_root=tmp_path / "ckpt",
                           clock=clock)

    live = core()
    jid, actions = live.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1})
    assert actions == []  # skipped once, held back
    view = next(j for j in live.status()["jobs"] if j["id"] == jid)
    assert view["skips"] == 1 and "predicted slow" in view["skip_reason"] and view["state"] == "queued"
    status = live.status()
    assert "skips" in status_table(status).columns()
    live.journal.close()

    clock.t += 10.0
    again = core()  # a restart: the count comes back from the journal, so one more skip, then the start
    assert again.jobs[jid].skips == 1
    assert again.decide() == [] and again.jobs[jid].skips == 2  # what a restarted actor does first
    clock.t += 10.0
    assert [a.job_id for a in again.tick() if isinstance(a, StartRun)] == [jid]
    clock.t += 1.0
    again.run_ended(jid, 1, "finished", 10)
    again.journal.close()

    rebuilt, _ = journal_status(tmp_path)
    job = next(j for j in rebuilt["jobs"] if j["id"] == jid)
    assert job["skips"] == 2 and "skip 2 of 2" in job["skip_reason"]
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.run(["report", str(tmp_path), "--out", str(tmp_path / "r"), "--json"]) == 0
    assert json.loads(out.getvalue())["skips"] == 2
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["skips"] == [{"id": jid, "name": f"tiny-{jid}", "skips": 2, "last_reason": job["skip_reason"]}]
