"""RUSH: the slow-run dataset and model selection, run-to-run replay, the start function, the slow-run filter, errors."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from pcs_ray import cli
from pcs_ray.cluster import ClusterSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.variability.longhorn import Run
from pcs_ray.placement import create_placement
from pcs_ray.policies import build_policy
from pcs_ray.policies.rush import RushPolicy
from pcs_ray.variability.run_replay import DeviceRuns, ReplayedPlacement, RunReplay
from pcs_ray.sim.run import simulate
from pcs_ray.variability.slow_runs import build_dataset, fit, read_csv


def invoke(capsys, *args):
    code = cli.run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def spec(jid, n=1, runtime=100.0, submit=0.0):
    return JobSpec(jid, submit, runtime * n, n, linear_speedup(n), min_gpus=n)


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
    alone = simulate([spec(1, 2, submit=5.0)], 4, policy, predict=False)
    assert alone.records[0].start == pytest.approx(5.0 + 10.0 * threshold)
    assert [jid for _, jid, _ in policy.table.log] == [1] * threshold
    jobs = [spec(1, 2, submit=5.0), spec(2, 4, submit=6.0), spec(3, 4, runtime=50.0, submit=7.0),
            spec(4, 1, submit=7.5)]
    result = simulate(jobs, 4, policy, predict=False)
    assert all(r.finish is not None for r in result.records)
    skips = [jid for _, jid, _ in policy.table.log]
    assert sorted(skips) == sorted([1, 2, 3, 4] * threshold)  # each exactly its threshold, never more


def test_rush_without_predictor_is_fcfs_easy():
    jobs = [spec(1, 2), spec(2, 4, submit=1.0), spec(3, 2, runtime=50.0, submit=2.0), spec(4, 1, submit=3.0)]
    a = simulate(jobs, 4, build_policy("rush"), predict=False)
    b = simulate(jobs, 4, build_policy("fcfs-easy"), predict=False)
    assert [(r.start, r.finish) for r in a.records] == [(r.start, r.finish) for r in b.records]


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_threshold_must_be_a_non_negative_integer(bad):
    with pytest.raises(ValueError, match="skip threshold"):
        build_policy("rush", skip_threshold=bad)


# -- run-to-run replay and the slow-run filter ------------------------------------------------------


def devices(k, slow_gpu=None):
    """``k`` recorded devices of nominal runs; ``slow_gpu``'s records are all slow, 3x, and predicted so."""
    out = []
    for i in range(k):
        bad = i == slow_gpu
        out.append(DeviceRuns(f"d{i}", np.full(3, 3.0 if bad else 1.0), np.full(3, bad), np.full(3, bad)))
    return out


def replayed(name, recorded, seed=0):
    cluster = ClusterSpec.homogeneous(len(recorded), 4)
    replay = RunReplay(recorded, len(recorded), seed=seed)
    return ReplayedPlacement(create_placement(name, cluster), replay)


def test_replay_slows_runs_and_counts_them():
    placed = replayed("packed-sticky", devices(4))
    placed.replay.devices[2] = DeviceRuns("s", np.full(3, 3.0), np.full(3, True), np.full(3, True))
    result = simulate([spec(1, 4)], 4, build_policy("fcfs-easy"), predict=False, placement=placed)
    assert result.records[0].finish == pytest.approx(300.0)  # the slowest GPU sets the pace
    assert placed.replay.summary() == {"runs": 1, "slow_runs": 1, "predicted_slow_runs": 1, "predicted_and_slow": 1}


def test_replay_draws_from_the_jobs_own_application():
    """Per-application pools: a class A job replays the A application's records, a class C job C's; a
    prediction is for the job's application, and a cluster larger than a pool draws it again."""
    slow = [DeviceRuns(f"a{i}", np.full(3, 2.0), np.full(3, True), np.full(3, True)) for i in range(2)]
    fast = [DeviceRuns(f"c{i}", np.full(3, 1.0), np.full(3, False), np.full(3, False)) for i in range(2)]
    replay = RunReplay({"resnet": slow, "pagerank": fast}, 4, seed=0, classes={"A": "resnet", "C": "pagerank"})
    a = simulate([JobSpec(1, 0.0, 100.0, 1, linear_speedup(1), min_gpus=1, job_class="A")], 4,
                 build_policy("fcfs-easy"), predict=False,
                 placement=ReplayedPlacement(create_placement("packed-sticky", ClusterSpec.homogeneous(4, 4)), replay))
    assert a.records[0].finish == pytest.approx(200.0) and replay.slow_runs == 1
    c_job = JobSpec(2, 0.0, 100.0, 1, linear_speedup(1), min_gpus=1, job_class="C")
    assert replay.draw([0, 1, 2, 3], 0.0, type("J", (), {"spec": c_job})()) == (1.0, False, False)
    assert replay.predicted_slow(type("J", (), {"spec": c_job})(), 0.0).tolist() == [False] * 4


def test_slow_run_filter_avoids_predicted_slow_gpus_with_a_reason():
    recorded = devices(8)
    placed = replayed("packed-sticky-slow-run", recorded)
    slow = [0, 1]  # predicted (and really) slow
    for g in slow:
        placed.replay.devices[g] = DeviceRuns("s", np.full(3, 2.0), np.full(3, True), np.full(3, True))
    result = simulate([spec(1, 2)], 8, build_policy("fcfs-easy"), predict=False, placement=placed)
    assert placed.replay.slow_runs == 0 and result.records[0].finish == pytest.approx(100.0)
    assert not set(placed.assignment().get(1, ())) & set(slow)
    why = placed.explain(1)
    assert why["rejections"].get("predicted-slow", 0) >= 1
    # Without the filter the same job lands on the lowest ids, the slow ones.
    plain = replayed("packed-sticky", recorded)
    for g in slow:
        plain.replay.devices[g] = placed.replay.devices[g]
    simulate([spec(1, 2)], 8, build_policy("fcfs-easy"), predict=False, placement=plain)
    assert plain.replay.slow_runs == 1


def test_slow_run_filter_steps_aside_when_it_must():
    """When fewer GPUs than the job needs are predicted fast, the job still runs."""
    placed = replayed("combined-slow-run", devices(4, slow_gpu=0))
    result = simulate([spec(1, 4)], 4, build_policy("fcfs-easy"), predict=False, placement=placed)
    assert result.records[0].finish == pytest.approx(300.0)


def test_rush_waits_for_fast_gpus():
    """RUSH with the replay's predictions: the second job would land on the slow GPU, so it waits for
    the first to end and then gets a fast GPU; FCFS+EASY starts it at once and runs it 3x slower."""
    def run(policy_name):
        placed = replayed("packed-sticky-slow-run", devices(4))
        placed.replay.devices[3] = DeviceRuns("s", np.full(3, 3.0), np.full(3, True), np.full(3, True))
        policy = build_policy(policy_name)
        if isinstance(policy, RushPolicy):
            policy.predictor = placed.replay
        jobs = [spec(1, 3, runtime=100.0), spec(2, 1, runtime=100.0, submit=1.0)]
        return simulate(jobs, 4, policy, predict=False, placement=placed), placed.replay

    easy, easy_replay = run("fcfs-easy")
    rush, rush_replay = run("rush")
    assert easy_replay.slow_runs == 1 and rush_replay.slow_runs == 0
    assert rush.records[1].start >= 100.0 and rush.records[1].finish < easy.records[1].finish


# -- the dataset and model selection --------------------------------------------------------------------


def synthetic_runs(n_devices=16, per_device=50, seed=1):
    """Runs of one app on ``n_devices`` GPUs every hour; half the devices go through slow spells (each
    run stays in its predecessor's state with probability 0.9): a planted signal that the device's last
    run reveals and its mean does not."""
    rng = np.random.default_rng(seed)
    runs = []
    state = [False] * n_devices
    for k in range(per_device):
        for d in range(n_devices):
            if d % 2 == 0 and rng.random() < 0.1:
                state[d] = not state[d]
            bad = state[d]
            runtime = (1.6 if bad else 1.0) + rng.normal(0, 0.03)
            runs.append(Run("app", f"c1-{d // 4}-{d % 4}", f"c1-{d // 4}-{d % 4}", "c1", d // 4, d % 4,
                            1_600_000_000 + 3600 * k + d, runtime, runtime, 250.0, 250.0, 1530.0, 877.0, 60.0))
    return runs


def test_features_never_read_the_runs_own_measurements():
    runs = synthetic_runs(6, 6)
    ds = build_dataset(runs)
    i = len(ds.runs) // 2
    target = ds.runs[i]
    changed = [Run(**{**r.__dict__, "runtime": 50.0, "temperature": 99.0, "power": 1.0}) if r is target else r
               for r in runs]
    ds2 = build_dataset(changed)
    assert np.array_equal(ds.X[i], ds2.X[i])  # its own row is the same
    assert ds2.y[i] == 1 and not np.array_equal(ds.X[i + 1:], ds2.X[i + 1:])  # later rows see it


def test_runs_that_start_together_do_not_see_each_other():
    """The GPUs of one multi-GPU run start at the same second: none may read another's outcome (Longhorn's
    slow runs are whole nodes at once, so a leak would predict three of every four)."""
    runs = [Run(**{**r.__dict__, "ts": 1_600_000_000 + 3600 * ((r.ts - 1_600_000_000) // 3600)}) for r in
            synthetic_runs(8, 6)]  # the four GPUs of each node start together
    ds = build_dataset(runs)
    ts = np.array([r.ts for r in ds.runs])
    i = int(np.flatnonzero(ts == ts[len(ts) // 2])[0])  # the first GPU of a run in the middle
    target = ds.runs[i]
    changed = [Run(**{**r.__dict__, "runtime": 50.0}) if r is target else r for r in runs]
    ds2 = build_dataset(changed)
    same, later = ts == target.ts, ts > target.ts
    assert same.sum() >= 4 and np.array_equal(ds.X[same], ds2.X[same])  # its run-mates see nothing of it
    assert not np.array_equal(ds.X[later], ds2.X[later])  # runs that start after it do


def test_replay_lays_whole_recorded_nodes_on_one_clock():
    """A simulated node replays one recorded node's GPUs, all on one clock: a recorded node-wide slow
    moment is slow on all four simulated GPUs at once, and on the other node at no time."""
    def node(name, slow_at):
        return [DeviceRuns(f"{name}-{k}", np.array([1.0, 3.0 if slow_at else 1.0, 1.0]),
                           np.array([False, slow_at, False]), np.array([False, slow_at, False]),
                           np.array([0.0, 3600.0, 7200.0])) for k in range(4)]

    replay = RunReplay(node("c1-1", False) + node("c1-2", True), 8, seed=3, node_of=[0] * 4 + [1] * 4)
    nodes = [{d.device.rsplit("-", 1)[0] for d in replay.devices[i:i + 4]} for i in (0, 4)]
    assert all(len(n) == 1 for n in nodes) and nodes[0] != nodes[1]
    slow_node = 0 if nodes[0] == {"c1-2"} else 1
    moments = [replay.predicted_slow(None, t).tolist() for t in np.arange(0.0, 3 * 3600.0 + 1, 900.0)]
    assert any(any(m) for m in moments)
    for m in moments:
        slow, other = m[4 * slow_node:4 * slow_node + 4], m[4 - 4 * slow_node:8 - 4 * slow_node]
        assert slow in ([True] * 4, [False] * 4) and not any(other)


def test_fit_reports_every_model_and_the_baseline():
    result = fit(build_dataset(synthetic_runs()), folds=3)
    report = result.to_json()
    assert (set(report["cv_f1"]) == set(report["grouped_cv_f1"]) == set(report["test_f1"])
            == {"adaboost", "random-forest", "extra-trees", "knn"})
    assert report["chosen"] == max(report["cv_f1"], key=report["cv_f1"].get)
    assert 0 < len(report["features"]) <= 20
    assert report["chosen_test_f1"] > report["baseline"]["test_f1"]  # the planted signal is learnable


# -- one-line errors ---------------------------------------------------------------------------------


def test_unknown_data_set(capsys):
    code, out, err = invoke(capsys, "slow-runs", "fit", "--data", "quartz")
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "unknown data set 'quartz'" in err


def test_malformed_csv_names_the_line(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["app", "device", "ts", "runtime"])
        w.writerow(["a", "g0", 1000, 1.0])
        w.writerow(["a", "g1", 1001, "fast"])
    code, out, err = invoke(capsys, "slow-runs", "fit", "--data", path)
    assert code == 2 and err.strip().count("\n") == 0
    assert f"{path}:3: column 'runtime' is not a number" in err
    path.write_text("app,device,ts\na,g0,1\n")
    code, _, err = invoke(capsys, "slow-runs", "fit", "--data", path)
    assert code == 2 and ":1: missing column(s) runtime" in err
    path.write_text("app,device,ts,runtime\na,g0,1,1.0\na,g1,2\n")
    with pytest.raises(ValueError, match=r":3: expected 4 fields"):
        read_csv(path)


def test_negative_threshold_and_bad_variability_are_one_line_errors(capsys):
    base = ["simulate", "--workload", "themis1", "--num-apps", "5", "--gpus", "8", "--no-predict", "--json"]
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
    from pcs_ray.coordinator import Coordinator, Journal, StartRun

    class Clock:
        t = 1000.0

        def __call__(self):
            return self.t

    clock = Clock()

    def core():
        policy = RushPolicy(skip_threshold=2, retry=10.0, predictor=AlwaysSlow())
        return Coordinator(ClusterSpec.homogeneous(4, 4), policy, Journal(tmp_path / "journal.sqlite"),
                           checkpoint_root=tmp_path / "ckpt", clock=clock, workloads=("tiny",))

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
