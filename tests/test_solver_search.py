"""The solver end to end on small workloads: determinism, cache, resume after a kill, CLI, preference API."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
from pathlib import Path
import sys

import pytest

from pcs_ray.data import pcs_config
from pcs_ray.policies import WFQConfig
from pcs_ray.solver.evaluate import Evaluator
from pcs_ray.workloads.history import HistoryRecord, append_history
from pcs_ray.solver.objectives import parse_objectives
from pcs_ray.solver.preference import PreferenceError, PreferenceSolver, choose, default_config_path
from pcs_ray.solver.search import Problem, Search
from pcs_ray.solver.space import config_key
from pcs_ray.solver.workload import WorkloadSource, bootstrap
from builders import invoke

REPO_ROOT = Path(__file__).resolve().parent.parent

OBJ = parse_objectives("jct:avg,pred_err:avg")
SMALL = ["solve", "--workload", "themis1", "--num-jobs", "30", "--gpus", "8", "--population", "6",
         "--samples", "2", "--test-samples", "1", "--serial", "--seed", "3"]


def small_problem(**kw) -> Problem:
    args = dict(source=WorkloadSource.generated("themis1", 30), gpus=8, objectives=OBJ, samples=2, test_samples=1,
                population=6, seed=3)
    args.update(kw)
    return Problem(**args)


def test_search_is_deterministic_and_never_simulates_twice():
    runs = []
    for _ in range(2):
        search = Search(small_problem())
        state = search.run(3)
        front = search.front()
        runs.append((state.to_json(), [(p.spec, p.train, p.test) for p in front]))
        distinct = len(search.evaluator.cache.specs("train"))
        assert search.evaluator.simulations == distinct * 2 + len(front)  # 2 train samples, 1 test sample
        assert state.evaluations == 6 * 4 > distinct  # repeated candidates came from the cache
    assert runs[0] == runs[1]
    other = Search(small_problem(seed=4))
    other.run(3)
    assert other.front()[0].train != runs[0][1][0][1] or len(other.front()) != len(runs[0][1])


def test_front_is_non_dominated_and_test_samples_differ_from_train():
    search = Search(small_problem())
    search.run(2)
    points = search.front()
    for p in points:
        assert not any(all(a <= b for a, b in zip(q.train, p.train)) and q.train != p.train for q in points)
    assert all(p.test is not None and all(math.isfinite(v) for v in p.test) for p in points)
    train_ids = {(j.submit_time, j.service) for s in search.train for j in s}
    assert not train_ids & {(j.submit_time, j.service) for s in search.test for j in s}
    refs = search.references([("mine", points[0].config)])
    assert [r.label for r in refs] == ["fifo", "srsf", "themis", "afs", "mine"]
    assert refs[-1].test == points[0].test  # the same configuration: the same cached numbers


def test_ray_fan_out_gives_identical_results_to_serial(ray_local):
    from pcs_ray.solver.evaluate import RayBackend

    serial = Search(small_problem())
    serial_state = serial.run(2)
    distributed = Search(small_problem(), backend=RayBackend())
    ray_state = distributed.run(2)
    assert ray_state.to_json() == serial_state.to_json()
    assert [(p.spec, p.train, p.test) for p in distributed.front()] == [(p.spec, p.train, p.test) for p in serial.front()]
    assert distributed.evaluator.simulations == serial.evaluator.simulations


def test_evaluator_means_over_samples():
    search = Search(small_problem(samples=3))
    spec = "fifo"
    mean = search.evaluator.evaluate([spec], "train")[0]
    rows = search.evaluator.per_sample(spec, "train")
    assert len(rows) == 3 and mean == pytest.approx(tuple(sum(c) / 3 for c in zip(*rows)))
    assert mean[1] == pytest.approx(0.0, abs=1e-6)  # FIFO predicts exactly


def _solve_cmd(out, generations):
    return [sys.executable, "-m", "pcs_ray.cli", *SMALL, "--generations", str(generations), "--out", str(out)]


#: ``pcs-ray solve`` that kills itself (SIGKILL, as a machine dies) right after its checkpoint hook has saved
#: generation ``KILL_AT``: the kill lands at the same point in every run, not wherever a poll catches it.
KILL_AT = 3
DIES_AFTER_SAVING = f"""
import os, signal, sys
from pcs_ray.solver.checkpoint import Checkpoint
from pcs_ray.cli import main
save = Checkpoint.save
def save_then_die(self, state):
    save(self, state)
    if state.generation == {KILL_AT}:
        os.kill(os.getpid(), signal.SIGKILL)
Checkpoint.save = save_then_die
main(sys.argv[1:])
"""


@pytest.mark.slow  # three solves in subprocesses
def test_killed_solve_resumes_and_loses_no_evaluation(tmp_path):
    generations = 25
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed = tmp_path / "killed.json"
    state = tmp_path / "killed.json.ckpt" / "state.json"
    dying = subprocess.run([sys.executable, "-c", DIES_AFTER_SAVING, *_solve_cmd(killed, generations)[3:]],
                           cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert dying.returncode == -signal.SIGKILL, dying.stderr[-2000:]
    assert json.loads(state.read_text())["state"]["generation"] == KILL_AT
    cache = tmp_path / "killed.json.ckpt" / "evaluations.jsonl"
    before = len(cache.read_text().splitlines()) - 1
    resumed = subprocess.run(_solve_cmd(killed, generations), cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    after = len(cache.read_text().splitlines()) - 1
    resumed_front = json.loads(killed.read_text())
    assert resumed_front["simulations_this_run"] == after - before  # nothing simulated twice

    whole = tmp_path / "whole.json"
    full = subprocess.run(_solve_cmd(whole, generations), cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert full.returncode == 0, full.stderr
    whole_front = json.loads(whole.read_text())
    assert whole_front["front"] == resumed_front["front"]
    assert whole_front["simulations_this_run"] == after  # the same set of simulations, none lost


def test_cli_writes_front_plot_and_picks(capsys, tmp_path, monkeypatch):
    out, png = tmp_path / "front.json", tmp_path / "front.png"
    code, stdout, err = invoke(capsys, *SMALL, "--generations", "2", "--out", out, "--plot", png)
    assert code == 0, err
    assert "Pareto front" in stdout and "pcs-jct (artifact)" in stdout and "fifo" in stdout
    front = json.loads(out.read_text())
    assert front["objectives"] == ["jct:avg", "pred_err:avg"]
    assert {r["label"] for r in front["references"]} >= {"fifo", "srsf", "themis", "afs", "pcs-bal (artifact)"}
    assert front["hypervolume"]["front_test"] > 0 and png.stat().st_size > 1000
    n = len(front["front"])
    # pick by index: a config the simulator loads
    config = tmp_path / "chosen.json"
    code, _, err = invoke(capsys, "solve", "--front", out, "--pick", n - 1, "--out", config)
    assert code == 0, err
    assert json.loads(config.read_text()) == front["front"][n - 1]["config"]  # the numbers that were simulated
    code, sim_out, err = invoke(capsys, "simulate", "--num-jobs", "30", "--gpus", "8", "--policy", "pcs",
                                "--pcs-config", config, "--json")
    assert code == 0, err
    assert json.loads(sim_out)["policy"] == "pcs:chosen"
    # pick by preference, and set it where the coordinator reads it
    monkeypatch.setenv("PCS_RAY_WFQ_CONFIG", str(tmp_path / "live" / "wfq.json"))
    code, _, err = invoke(capsys, "solve", "--front", out, "--prefer", "min jct:avg where pred_err:avg <= 1000",
                          "--set")
    assert code == 0, err
    best = min(front["front"], key=lambda p: p["test"]["jct:avg"])
    assert json.loads(default_config_path().read_text()) == best["config"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--objectives", "jct:avg,speed:avg"], "unknown objective metric 'speed'"),
        (["--objectives", "jct:p200"], "unknown measure"),
        (["--generations", "0"], "--generations must be >= 1"),
        (["--generations", "-3"], "--generations must be >= 1"),
        (["--population", "1"], "--population must be >= 2"),
        (["--space", "grid"], "--space must be paper or cuts, got 'grid'"),
        (["--space", "cuts", "--max-queues", "1"], "--max-queues must be between 2 and 64, got 1"),
        (["--space", "cuts", "--max-queues", "x"], "--max-queues"),
        (["--max-queues", "4"], "--max-queues applies only to --space cuts"),
        (["--local-rate", "1.5"], "--local-rate must be between 0 and 1, got 1.5"),
        (["--local-rate", "nan"], "--local-rate must be between 0 and 1"),
    ],
)
def test_cli_bad_options_are_one_line_errors(capsys, args, message):
    code, out, err = invoke(capsys, *SMALL, *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_cli_bad_workloads_are_one_line_errors(capsys, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"v": 1, "job_id": 1}\n')
    single = tmp_path / "single.jsonl"
    append_history(single, HistoryRecord(1, 0.0, 2, 100.0))
    trace = tmp_path / "one.csv"
    trace.write_text("app_id,submit_time,service,num_jobs,sleep_time,model_name\n1,0,100,2,0,resnet\n")
    base = ["solve", "--gpus", "8", "--serial", "--generations", "1"]
    cases = [
        (["--history", empty], "the job history is empty"),
        (["--history", garbage], "missing"),
        (["--history", tmp_path / "nope.jsonl"], "no such job-history file"),
        (["--history", tmp_path], "history.jsonl is missing"),
        (["--history", single], "has 1 job"),
        (["--trace", trace], "has 1 job"),
        (["--workload", "themis1", "--num-jobs", "1"], "at least 2 jobs"),
        (["--workload", "nosuchworkload"], "unknown workload"),
    ]
    for extra, message in cases:
        code, out, err = invoke(capsys, *base, *extra)
        assert code == 2, (extra, err)
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, (extra, err)


def test_history_workload_is_bootstrapped(tmp_path):
    path = tmp_path / "h.jsonl"
    for i in range(12):
        append_history(path, HistoryRecord(i, 1000.0 + 50 * i, 1 + i % 4, 300.0 * (1 + i % 5), model="m"))
    solver = PreferenceSolver()
    solver.set_preference(("jct", "avg"), ("pred_err", "p99"))
    front = solver.update_pareto_front(history=path, gpus=4, num_jobs=20, samples=1, test_samples=1,
                                       generations=1, population=4)
    assert front and all(len(p.train) == 2 for p in front)
    written = solver.set_wfq_config(0, tmp_path / "cfg.json")
    assert WFQConfig.load(written) == front[0].config
    sample = bootstrap(solver.search.problem.source.jobs, 20, 1)
    assert [j.job_id for j in sample] == list(range(20)) and sample[0].submit_time == 0.0
    assert {j.service for j in sample} <= {300.0 * k for k in range(1, 6)}


def test_preference_errors(tmp_path):
    solver = PreferenceSolver()
    with pytest.raises(PreferenceError, match="set_preference"):
        solver.update_pareto_front("themis1")
    with pytest.raises(ValueError, match="unknown objective metric"):
        solver.set_preference(("latency", "avg"))
    solver.set_preference("jct:avg", "pred_err:p99")
    with pytest.raises(PreferenceError, match="exactly one"):
        solver.update_pareto_front("themis1", history=tmp_path / "h.jsonl")
    with pytest.raises(PreferenceError, match="num_apps and num_jobs are one argument"):
        solver.update_pareto_front("themis1", num_apps=5, num_jobs=5)
    with pytest.warns(FutureWarning, match="num_apps is deprecated; use num_jobs"):
        with pytest.raises(ValueError, match="unknown workload 'nope'"):
            solver.update_pareto_front("nope", num_apps=5)
    with pytest.raises(PreferenceError, match="no configuration 0"):
        solver.set_wfq_config(0)


def test_choose_by_preference():
    search = Search(small_problem())
    search.run(1)
    points = search.front()
    objectives = search.problem.objectives
    assert choose(points, objectives, "min pred_err:avg") == min(range(len(points)), key=lambda i: (points[i].test[1], i))
    tight = sorted(p.test[1] for p in points)[len(points) // 2]
    i = choose(points, objectives, f"min jct:avg where pred_err:avg <= {tight}")
    assert points[i].test[1] <= tight
    assert all(p.test[0] >= points[i].test[0] for p in points if p.test[1] <= tight)
    with pytest.raises(PreferenceError, match="no configuration"):
        choose(points, objectives, "min jct:avg where pred_err:avg <= -1")
    with pytest.raises(PreferenceError, match="not an objective"):
        choose(points, objectives, "min unfairness:p99")
    with pytest.raises(PreferenceError, match="must read"):
        choose(points, objectives, "fast please")


def test_evaluator_serial_unit():
    problem = small_problem()
    search = Search(problem)
    ev = Evaluator({"train": search.train}, problem.gpus, problem.objectives)
    a = ev.evaluate(["fifo", "srsf", "fifo"], "train")
    assert a[0] == a[2] and ev.simulations == 2 * 2


def test_on_generation_can_stop_the_search():
    search = Search(small_problem())
    state = search.run(10, on_generation=lambda report: report.generation == 1)
    assert state.generation == 1 and state.evaluations == 12


def test_cli_workload_option_conflicts(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("app_id,submit_time,service,num_jobs,sleep_time,model_name\n1,0,100,2,0,a\n2,0,50,1,5,b\n")
    for extra, message in (
        (["--trace", trace, "--load", "0.5"], "--load applies only to generated workloads"),
        (["--speedup", "model"], "--speedup applies only to --trace"),
        (["--workload", "themis1", "--trace", trace], "exactly one of workload, trace"),
        (["--serial", "--ray-address", "local"], "mutually exclusive"),
        (["--front", tmp_path / "none.json", "--pick", "0", "--out", tmp_path / "c.json"], "no such front file"),
    ):
        code, _, err = invoke(capsys, "solve", "--generations", "1", *extra)
        assert code == 2 and message in err and err.count("\n") == 1, (extra, err)


def test_reference_configurations_never_enter_the_front():

    search = Search(small_problem())
    published = WFQConfig.load(pcs_config("themis1", "pred"))
    spec = search.references([("pcs-pred", published)])[-1].spec  # evaluated through the same cache
    for i in range(len(search.train)):  # pretend it beats everything: it must still stay out
        search.evaluator.cache._values[(spec, "train", i)] = (0.0, 0.0)
    search.run(1)
    assert spec not in search.train_front()
    assert spec not in {p.spec for p in search.front()}


def test_solve_help_explains_the_spaces_and_the_state_folder(capsys):
    code, out, _ = invoke(capsys, "solve", "--help")
    assert code == 0
    text = " ".join(out.split())
    for phrase in ("--space", "paper", "cuts", "--max-queues", "STATE_DIR", "history.jsonl", "every threshold vector"):
        assert phrase in text, phrase


def test_cuts_space_search_runs_and_is_its_own_checkpoint():
    paper, cuts = small_problem(), small_problem(space="cuts", max_queues=3)
    assert paper.fingerprint() != cuts.fingerprint() != small_problem(space="cuts", max_queues=4).fingerprint()
    assert "space" not in paper.fingerprint()  # checkpoints of the paper's space from before the choice stay valid
    search = Search(cuts)
    search.run(2)
    front = search.front()
    assert front and all(len(p.config.thresholds) <= 3 for p in front)
    assert set(front[0].genes) == {"queues", "log10_cut1", "log10_cut2", "W", "zeta_min", "delta"}
    assert search.describe()["space"]["kind"] == "cuts"
    with pytest.raises(ValueError, match="unknown search space"):
        small_problem(space="grid")


def test_local_moves_are_part_of_the_problem_and_prefer_new_configurations():
    plain, local = small_problem(space="cuts"), small_problem(space="cuts", local_rate=0.5)
    assert "local_rate" not in plain.fingerprint() and local.fingerprint()["local_rate"] == 0.5
    with pytest.raises(ValueError, match="local-move rate"):
        small_problem(local_rate=2.0)
    runs = []
    for _ in range(2):
        search = Search(local)
        runs.append(search.run(2).to_json())
    assert runs[0] == runs[1]
    import random

    seen = search.genes_of
    parent = next(g for spec, g in seen.items() if json.loads(spec)["num_classes"] > 1)
    moved = search._local_move(parent, random.Random(1))
    assert moved != parent
    assert config_key(search.space.decode(moved)) not in seen
