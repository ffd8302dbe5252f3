"""Run each policy of a ``simulate`` plan on its jobs, with a progress bar on stderr when it is a terminal."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pcs_ray.commands.simulate_plan import Plan
from pcs_ray.sim.metrics import summarize
from pcs_ray.sim.engine import SimResult
from pcs_ray.sim.run import simulate


@dataclass
class Outcome:
    label: str
    result: SimResult
    summary: dict  # metrics, the policy's parameters and, with a placement, its summary
    placement: object = None  # the run's placement, which can explain each job's GPUs


def run_plan(plan: Plan, *, predict: bool, overhead: float, workers: int) -> list[Outcome]:
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs"),
        TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal,
    )
    outcomes = []
    with progress:
        for run in plan.runs:
            task = progress.add_task(run.label, total=len(plan.jobs))
            setup = plan.setup_for(run)
            placed = setup.new() if setup is not None else None
            meter = None
            if plan.power is not None:
                from pcs_ray.power.meter import EnergyMeter

                meter = EnergyMeter(plan.power, plan.capacity)
            if plan.run_variability is not None:
                placed = _replayed(placed, run.policy, plan)
            result = simulate(
                plan.jobs, plan.capacity, run.policy, predict=predict, overhead=overhead, placement=placed,
                workers=workers, progress=lambda done, total, task=task: progress.update(task, completed=done),
                energy=meter,
            )
            progress.remove_task(task)
            summary = summarize(result)
            summary["policy"] = run.label
            summary["config"] = result.policy
            if meter is not None:
                summary["energy"] = result.extra["energy"]
            if placed is not None:
                summary["placement"] = {**placed.describe(), **placed.summary(), "chosen_by": plan.chosen_by(run)}
            if plan.run_variability is not None:
                summary.update(runs=placed.replay.runs, slow_runs=placed.replay.slow_runs)
            outcomes.append(Outcome(run.label, result, summary, placed))
    return outcomes


def _replayed(placed, policy, plan: Plan):
    """``placed`` with run-to-run variability replayed; RUSH's start function reads the same predictions."""
    from pcs_ray.policies.rush import RushPolicy
    from pcs_ray.variability.run_replay import ReplayedPlacement, longhorn_replay

    placed = ReplayedPlacement(placed, longhorn_replay(plan.capacity, plan.replay_seed))
    if isinstance(policy, RushPolicy):
        policy.predictor = placed.replay
    return placed
