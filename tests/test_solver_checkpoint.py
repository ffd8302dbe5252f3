"""Checkpoint folder and evaluation cache: torn writes, foreign problems, in-process resume."""

from __future__ import annotations

import math

import pytest

from pcs_ray.solver.cache import CacheError, EvaluationCache
from pcs_ray.solver.checkpoint import Checkpoint, CheckpointError
from pcs_ray.solver.objectives import parse_objectives
from pcs_ray.solver.search import Problem, Search
from pcs_ray.solver.workload import WorkloadSource


def problem(seed=3) -> Problem:
    return Problem(WorkloadSource.generated("themis1", 30), 8, parse_objectives("jct:avg,unfairness:p99"),
                   samples=2, test_samples=1, population=6, seed=seed)


def test_cache_survives_a_torn_last_line(tmp_path):
    path = tmp_path / "e.jsonl"
    cache = EvaluationCache(path, {"p": 1})
    cache.put(("fifo", "train", 0), (1.0, math.inf))
    cache.put(("srsf", "train", 0), (2.0, 3.0))
    cache.close()
    with path.open("a") as f:
        f.write('{"spec": "afs", "split": "tra')  # killed mid-write
    again = EvaluationCache(path, {"p": 1})
    assert again.get(("fifo", "train", 0)) == (1.0, math.inf) and len(again) == 2
    again.put(("afs", "train", 0), (4.0, 5.0))
    again.close()
    assert len(EvaluationCache(path, {"p": 1})) == 3


def test_cache_of_another_problem_is_refused(tmp_path):
    path = tmp_path / "e.jsonl"
    EvaluationCache(path, {"p": 1}).close()
    with pytest.raises(CacheError, match="different problem"):
        EvaluationCache(path, {"p": 2})
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    with pytest.raises(CacheError, match="not an evaluation cache"):
        EvaluationCache(bad, {})


def test_checkpoint_of_another_problem_is_refused(tmp_path):
    folder = tmp_path / "ckpt"
    search = Search(problem(), checkpoint=folder)
    search.run(1)
    search.close()
    with pytest.raises((CheckpointError, CacheError), match="different problem"):
        Search(problem(seed=4), checkpoint=folder)
    fresh = Search(problem(seed=4), checkpoint=folder, fresh=True)  # --fresh starts over
    assert fresh.checkpoint.load() is None
    fresh.close()
    (folder / "state.json").write_text("{")
    with pytest.raises(CheckpointError, match="not a search checkpoint"):
        Checkpoint(folder, problem(seed=4).fingerprint()).load()


def test_a_checkpoint_that_says_num_apps_resumes_with_a_warning(tmp_path, capsys):
    folder = tmp_path / "ckpt"
    search = Search(problem(), checkpoint=folder)
    search.run(1)
    search.close()
    for name in ("state.json", "evaluations.jsonl"):  # the key and label as such files spelled them
        path = folder / name
        path.write_text(path.read_text().replace('"num_jobs"', '"num_apps"').replace("(30 jobs,", "(30 apps,"))
    again = Search(problem(), checkpoint=folder)
    assert again.checkpoint.load() is not None and len(again.evaluator.cache) > 0
    again.close()
    err = capsys.readouterr().err
    assert f"warning: {folder / 'state.json'}: key 'num_apps' is deprecated; use 'num_jobs'" in err
    assert f"warning: {folder / 'evaluations.jsonl'}: key 'num_apps' is deprecated; use 'num_jobs'" in err


def test_resume_in_process_matches_an_uninterrupted_run(tmp_path):
    whole = Search(problem())
    whole_state = whole.run(4)

    class Killed(Exception):
        pass

    def kill_after_two(report):
        if report.generation == 2:
            raise Killed

    first = Search(problem(), checkpoint=tmp_path / "c")
    with pytest.raises(Killed):
        first.run(4, on_generation=kill_after_two)
    first.close()
    second = Search(problem(), checkpoint=tmp_path / "c")
    simulated_before = len(second.evaluator.cache)
    state = second.run(4)
    assert state.to_json()["archive"] == whole_state.to_json()["archive"]
    assert simulated_before + second.evaluator.simulations == whole.evaluator.simulations
    assert [(p.spec, p.train) for p in second.front()] == [(p.spec, p.train) for p in whole.front()]
    second.close()
