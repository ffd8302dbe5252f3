"""One job played as a sequence of runs on given world sizes, each stopped mid-epoch as a preemption or a
resize stops it, and the sample ids each epoch trained on, read back from what the loop recorded.

A loop under test appends one JSON line per batch it trained on to ``<ids_dir>/rank-<r>.jsonl``:
``{"epoch": e, "run": attempt, "ids": [...]}``, written after the step, before any checkpoint it reports.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from builders import wait_until
from pcs_ray.contract import GPUSlot, RunRequest

#: 3 preemptions (a run stopped and resumed on as many GPUs) and 2 resizes (resumed on another number).
WORLDS = (2, 2, 1, 1, 3, 3)
SLOTS = [("node0", 0), ("node0", 1), ("node1", 0), ("node1", 1)]


def request(job: str, root: Path, code_dir: Path, world: int, attempt: int, config: dict, reporter) -> RunRequest:
    """Run ``attempt`` of the job on ``world`` GPUs (a different set each run: resumes happen elsewhere)."""
    gpus = tuple(GPUSlot(n, i) for n, i in (SLOTS[attempt % 4:] + SLOTS[:attempt % 4])[:world])
    return RunRequest(job, "user:loop.py:loop", None, gpus, str(root / "checkpoints" / job),
                      code={"entrypoint": "loop.py:loop", "working_dir": str(code_dir), "config": config},
                      log_dir=str(root / "logs" / job / f"attempt-{attempt + 1}"), report_interval_s=0.0,
                      reporter=reporter, attempt=attempt)


def play(ray, launch, recorder, job: str, root: Path, code_dir: Path, config: dict, steps_per_run: int = 4,
         worlds=WORLDS, timeout: float = 180.0) -> list:
    """Every run but the last is stopped once it has trained ``steps_per_run`` steps past where it began;
    the last runs to its end. Returns each run's outcome."""
    outcomes = []
    for attempt, world in enumerate(worlds):
        handle = launch(request(job, root, code_dir, world, attempt, config, recorder))
        if attempt < len(worlds) - 1:
            begun = outcomes[-1].step if outcomes else 0
            wait_until(lambda: ray.get(recorder.top.remote(job)) >= begun + steps_per_run or finished(ray, handle),
                       timeout=timeout, what=f"run {attempt + 1} to train {steps_per_run} steps")
            handle.request_stop()
        outcomes.append(handle.outcome(timeout=timeout))
    return outcomes


def finished(ray, handle) -> bool:
    ready, _ = ray.wait([handle.done], timeout=0)
    return bool(ready)


def epochs_seen(ids_dir: Path) -> tuple[dict[int, list[int]], dict[int, set]]:
    """Every id each epoch trained on, over all ranks and runs, and which runs trained in each epoch (a line's
    ``run``, where the loop records it)."""
    seen, runs = defaultdict(list), defaultdict(set)
    for path in sorted(Path(ids_dir).glob("rank-*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            seen[row["epoch"]].extend(row["ids"])
            runs[row["epoch"]].add(row.get("run"))
    return dict(seen), dict(runs)


def recorder_actor(ray):
    """A stand-in for the coordinator's progress sink: the top step each job reported."""

    @ray.remote(num_cpus=0)
    class Recorder:
        def __init__(self):
            self.top_step = {}

        def report_progress(self, job_id, step, step_time_s, **extra):
            self.top_step[job_id] = max(step, self.top_step.get(job_id, 0))

        def top(self, job_id):
            return self.top_step.get(job_id, 0)

    return Recorder.remote()
