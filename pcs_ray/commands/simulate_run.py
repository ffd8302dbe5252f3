"""Run each policy of ``simulate``'s plans on their jobs, in this process or as Ray tasks; progress on stderr
when it is a terminal."""

from __future__ import annotations

from collections.abc import Callable
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
    why: dict[int, dict | None] | None = None  # with a placement and ``explain``: why each job got its GPUs


def run_one(plan: Plan, index: int, predict: bool, overhead: float, workers: int, explain: bool = False,
            progress: Callable[[int, int], None] | None = None) -> Outcome:
    """``plan.runs[index]`` on the plan's jobs: the unit of work, in this process or as a Ray task. With
    ``explain``, its placement's explanation of each job (the placement itself stays where it ran)."""
    run = plan.runs[index]
    setup = plan.setup_for(run)
    placed = setup.new() if setup is not None else None
    meter = None
    if plan.power is not None:
        from pcs_ray.power.meter import EnergyMeter

        meter = EnergyMeter(plan.power, plan.capacity)
    if plan.run_variability is not None:
        placed = _replayed(placed, run.policy, plan)
    result = simulate(plan.jobs, plan.capacity, run.policy, predict=predict, overhead=overhead, placement=placed,
                      workers=workers, progress=progress, energy=meter)
    summary = summarize(result)
    summary["policy"] = run.label
    summary["config"] = result.policy
    if meter is not None:
        summary["energy"] = result.extra["energy"]
    if placed is not None:
        summary["placement"] = {**placed.describe(), **placed.summary(), "chosen_by": plan.chosen_by(run)}
    if plan.run_variability is not None:
        summary.update(runs=placed.replay.runs, slow_runs=placed.replay.slow_runs)
    why = {r.job_id: placed.explain(r.job_id) for r in result.records} if explain and placed is not None else None
    return Outcome(run.label, result, summary, why)


def run_plans(plans: list[Plan], labels: list[list[str]], *, predict: bool, overhead: float, workers: int,
              explain: bool = False, fanout=None) -> list[list[Outcome]]:
    """Every run of every plan, one after another in this process, or with ``fanout`` (a
    ``pcs_ray.solver.fanout.RayFanOut`` of ``run_one``) as Ray tasks, each plan shipped once.

    ``labels[p][i]`` names run ``i`` of plan ``p`` in progress lines. On a terminal, stderr shows a bar of
    the current run's jobs (in this process) and a line for each run as it finishes (with several)."""
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
        TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal,
    )
    keys = [(p, i) for p, plan in enumerate(plans) for i in range(len(plan.runs))]
    found: dict[tuple[int, int], Outcome] = {}
    with progress:
        overall = progress.add_task("runs", total=len(keys), unit="runs") if len(keys) > 1 and err.is_terminal else None

        def finished(key: tuple[int, int], outcome: Outcome) -> None:
            found[key] = outcome
            if overall is not None:
                progress.update(overall, advance=1)
                progress.console.print(f"[{len(found)}/{len(keys)}] {labels[key[0]][key[1]]}: "
                                       f"{outcome.result.wall_s:.1f} s", highlight=False, markup=False)

        if fanout is not None:
            shipped = [fanout.put(plan) for plan in plans]
            fanout.run([((p, i), (shipped[p], i, predict, overhead, workers, explain)) for p, i in keys], finished)
        else:
            for p, i in keys:
                task = progress.add_task(plans[p].runs[i].label, total=len(plans[p].jobs), unit="jobs")
                outcome = run_one(plans[p], i, predict, overhead, workers, explain,
                                  lambda done, total, task=task: progress.update(task, completed=done))
                progress.remove_task(task)
                finished((p, i), outcome)
    return [[found[(p, i)] for i in range(len(plan.runs))] for p, plan in enumerate(plans)]


def _replayed(placed, policy, plan: Plan):
    """``placed`` with run-to-run variability replayed; RUSH's start function reads the same predictions."""
    from pcs_ray.policies.rush import RushPolicy
    from pcs_ray.variability.run_replay import ReplayedPlacement, longhorn_replay

    placed = ReplayedPlacement(placed, longhorn_replay(plan.capacity, plan.replay_seed))
    if isinstance(policy, RushPolicy):
        policy.predictor = placed.replay
    return placed
