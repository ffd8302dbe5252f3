"""``pcs-ray solve``: search WFQ configurations for a workload and pick one from the front."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import typer

from pcs_ray.api.ray_token import prefer_token
from pcs_ray.commands.inputs import renamed_option
from pcs_ray.data import locate
from pcs_ray.commands.views import stdout_console
from pcs_ray.policies import BUNDLED, WFQConfig

SOLVE_HELP = """
Search PCS's WFQ configurations for a workload and show the Pareto front of the chosen objectives
(PCS §3.2-3.3): SPEA2 over WFQ configurations, every candidate simulated (predictions on) on
**--samples** train samples of the workload, its objectives averaged; the front is then evaluated on
**--test-samples** separate samples, and FIFO, SRSF, Themis, AFS and reference configurations are
evaluated on the same samples for comparison.

Workload: **--workload NAME** (CDF workload, default `themis1`, **--num-jobs** jobs per sample at
**--load**), **--trace NAME|FILE** (a bundled trace such as `philly/0e4a51`, or a PCS/Philly, testbed or
Sia-Philly CSV) or **--history STATE_DIR|FILE** (the jobs a coordinator has run: its state folder, whose
`history.jsonl` it appends each finished job to, or such a file); traces and histories are
bootstrap-resampled. `pcs-ray data` lists the bundled names.

Search space (**--space**): `paper` (default) is the paper's WFQ(T, W, zeta_min, delta): queues cut where
the sizes' squared coefficient of variation would pass T, weights exp(-i W), allocations capped at
efficiency zeta_min, relaxed by delta. `cuts` searches the queue count (up to **--max-queues**, default 6)
and each threshold directly on a log scale instead of T, with the same W, zeta_min and delta, so every
threshold vector is reachable (T reaches only some; the artifact's pcs-bal for themis1 lies between two).

Objectives (**--objectives**, comma-separated METRIC:MEASURE, all minimised): metric `jct`,
`pred_err` or `unfairness`; measure `avg` or a percentile `pNN`, e.g. `jct:avg,pred_err:p99`.

Simulations run as Ray tasks on the connected cluster (**--address**, else `ray.init()` finds one through
RAY_ADDRESS or `ray start`, else starts a local instance), or in this process with **--serial**; the results are
identical. Every simulation is cached in the checkpoint folder (default `OUT.ckpt`) together with the
population after each generation: rerunning the same command resumes where it stopped.

Output: progress per generation on stderr (front size, hypervolume of the train front relative to the
first generation's worst values), a table of the front on stdout, **--out FILE.json** with every front
configuration (loadable WFQ config, parameters, train/test objectives) and the references, and
**--plot FILE.png**.

Choosing: **--pick N** or **--prefer** "min jct:avg where pred_err:p99 <= 20" with **--front
FILE.json** writes the chosen configuration to **--out** (a config `pcs-ray simulate --pcs-config`
loads) and/or, with **--set**, where the coordinator reads it ($PCS_RAY_WFQ_CONFIG, default
~/.pcs-ray/wfq_config.json).
"""


@dataclass(frozen=True)
class SolveOptions:
    """The search's options (``pcs-ray solve`` without --pick/--prefer/--front), as given."""

    workload: str | None
    trace: str | None
    history: Path | None
    num_jobs: int | None
    load: float | None
    speedup: str | None
    gpus: int
    objectives: str
    generations: int
    population: int
    samples: int
    test_samples: int
    seed: int
    front_size: int | None
    time_limit: float | None
    no_delta: bool
    space: str
    max_queues: int | None
    local_rate: float
    reference: list[str] | None
    out: Path | None
    plot: Path | None
    checkpoint: Path | None
    fresh: bool
    serial: bool
    ray_address: str | None


def _references(opts: SolveOptions) -> list[tuple[str, WFQConfig]]:
    """The configurations drawn beside the front: --reference-config, else the artifact's for the workload."""
    if opts.reference:
        return [(f"pcs:{Path(v).stem}", WFQConfig.load(locate("pcs-config", v))) for v in opts.reference]
    return [(f"{name} (artifact)", b.load()) for name, b in BUNDLED.items() if b.workload == opts.workload]


def _pick(front: Path | None, pick: int | None, prefer: str | None, out: Path | None, set_config: bool,
          split: str) -> None:
    from rich.console import Console

    from pcs_ray.solver.front import front_table, read_front
    from pcs_ray.solver.preference import choose, default_config_path, write_wfq_config

    if front is None:
        raise ValueError("--pick/--prefer need --front FILE.json (a front written by 'pcs-ray solve --out')")
    if pick is not None and prefer is not None:
        raise ValueError("--pick and --prefer are mutually exclusive")
    if out is None and not set_config:
        raise ValueError("say where the chosen configuration goes: --out FILE.json and/or --set")
    objectives, points = read_front(front)
    if pick is not None:
        if not 0 <= pick < len(points):
            raise ValueError(f"--pick {pick}: the front in {front} has configurations 0..{len(points) - 1}")
        index = pick
    else:
        index = choose(points, objectives, prefer, split)
    config = points[index].config
    err = Console(stderr=True)
    err.print(front_table([points[index]], objectives, title=f"configuration {index} of {front}"))
    if out is not None:
        write_wfq_config(config, out)
        err.print(f"wrote {out}")
    if set_config:
        path = write_wfq_config(config, default_config_path())
        err.print(f"set the coordinator's WFQ configuration: {path}")


def register(app: typer.Typer) -> None:
    @app.command("solve", help=SOLVE_HELP)
    def solve_cmd(
        workload: Annotated[str | None, typer.Option(
            "--workload", metavar="NAME", help="CDF workload to sample  [default: themis1]", show_default=False)] = None,
        trace: Annotated[str | None, typer.Option(
            "--trace", metavar="NAME|FILE", help="Trace to resample: a bundled name or a CSV.",
            show_default=False)] = None,
        history: Annotated[Path | None, typer.Option(
            "--history", metavar="STATE_DIR|FILE", help="A coordinator's state folder (its history.jsonl) or a "
            "job-history file to resample.", show_default=False)] = None,
        num_jobs: Annotated[int | None, typer.Option(
            "--num-jobs", metavar="N", help="Jobs per sample  [default: 500, or the trace's size]",
            show_default=False)] = None,
        num_apps: Annotated[int | None, typer.Option("--num-apps", hidden=True)] = None,
        load: Annotated[float | None, typer.Option(
            "--load", metavar="X", help="Offered load of generated samples  [default: 0.9]", show_default=False)] = None,
        speedup: Annotated[str | None, typer.Option(
            "--speedup", metavar="KIND", help="Speedup curves of a PCS/Philly trace's jobs: model (measured, as "
            "the PCS artifact replays traces) or linear  [default: model]", show_default=False)] = None,
        gpus: Annotated[int, typer.Option("--gpus", metavar="N", help="GPUs in the simulated cluster.")] = 64,
        objectives: Annotated[str, typer.Option(
            "--objectives", metavar="LIST", help="Comma-separated METRIC:MEASURE to minimise.")] = "jct:avg,pred_err:avg",
        generations: Annotated[int, typer.Option(
            "--generations", metavar="N", help="SPEA2 generations after the initial population.")] = 20,
        population: Annotated[int, typer.Option("--population", metavar="M", help="Population (and archive) size.")] = 40,
        samples: Annotated[int, typer.Option("--samples", metavar="K", help="Train samples per candidate.")] = 3,
        test_samples: Annotated[int, typer.Option(
            "--test-samples", metavar="L", help="Held-out samples the front is reported on.")] = 3,
        seed: Annotated[int, typer.Option("--seed", metavar="S", help="Seed of samples and search.")] = 0,
        front_size: Annotated[int | None, typer.Option(
            "--front-size", metavar="N", help="Report at most N configurations, thinned by SPEA2 truncation  "
            "[default: --population]", show_default=False)] = None,
        time_limit: Annotated[float | None, typer.Option(
            "--time-limit", metavar="SECONDS", help="Stop after the generation that passes this wall time.",
            show_default=False)] = None,
        no_delta: Annotated[bool, typer.Option(
            "--no-delta", help="Search without delta; leftovers relax zeta straight to 0.")] = False,
        space: Annotated[str, typer.Option(
            "--space", metavar="paper|cuts", help="paper: WFQ(T, W, zeta_min, delta); cuts: queue count and "
            "log-scale thresholds instead of T (any threshold vector).")] = "paper",
        max_queues: Annotated[int | None, typer.Option(
            "--max-queues", metavar="N", help="Most queues --space cuts tries  [default: 6]",
            show_default=False)] = None,
        local_rate: Annotated[float, typer.Option(
            "--local-rate", metavar="R", help="Share of each generation's offspring made by a small step from an "
            "archive member (a cut to a neighbouring job size, W by a few 0.01) instead of crossover and "
            "mutation: fills in the front between its points.")] = 0.0,
        reference: Annotated[list[str] | None, typer.Option(
            "--reference-config", metavar="FILE|NAME", help="WFQ config (JSON file or bundled name) to draw on the "
            "front; repeatable  "
            "[default: the artifact's three for themis1]", show_default=False)] = None,
        out: Annotated[Path | None, typer.Option(
            "--out", metavar="FILE.json", help="Write the front (or, with --pick/--prefer, the chosen config).",
            show_default=False)] = None,
        plot: Annotated[Path | None, typer.Option("--plot", metavar="FILE.png", help="Plot the front.",
                                                  show_default=False)] = None,
        checkpoint: Annotated[Path | None, typer.Option(
            "--checkpoint", metavar="DIR", help="Checkpoint folder  [default: OUT.ckpt with --out, else none]",
            show_default=False)] = None,
        fresh: Annotated[bool, typer.Option("--fresh", help="Ignore an existing checkpoint and start over.")] = False,
        serial: Annotated[bool, typer.Option("--serial", help="Simulate in this process instead of Ray tasks.")] = False,
        ray_address: Annotated[str | None, typer.Option(
            "--ray-address", "--address", metavar="ADDR", help="Ray cluster to use ('local' starts a new one)  "
            "[default: $RAY_ADDRESS, else auto]",
            show_default=False)] = None,
        front: Annotated[Path | None, typer.Option(
            "--front", metavar="FILE.json", help="Front file to pick from.", show_default=False)] = None,
        pick: Annotated[int | None, typer.Option(
            "--pick", metavar="N", help="Choose front configuration N.", show_default=False)] = None,
        prefer: Annotated[str | None, typer.Option(
            "--prefer", metavar="TEXT", help="Choose by preference, e.g. 'min jct:avg where pred_err:p99 <= 20'.",
            show_default=False)] = None,
        set_config: Annotated[bool, typer.Option(
            "--set", help="Write the chosen configuration where the coordinator reads it.")] = False,
        by_train: Annotated[bool, typer.Option(
            "--by-train", help="--prefer judges train values instead of test values.")] = False,
    ) -> None:
        num_jobs = renamed_option("--num-apps", "--num-jobs", num_apps, num_jobs)
        if pick is not None or prefer is not None or front is not None:
            return _pick(front, pick, prefer, out, set_config, "train" if by_train else "test")
        if set_config:
            raise ValueError("--set needs --pick or --prefer (and --front)")
        _solve(SolveOptions(
            workload=workload, trace=trace, history=history, num_jobs=num_jobs, load=load, speedup=speedup, gpus=gpus,
            objectives=objectives, generations=generations, population=population, samples=samples,
            test_samples=test_samples, seed=seed, front_size=front_size, time_limit=time_limit, no_delta=no_delta,
            space=space, max_queues=max_queues, local_rate=local_rate,
            reference=reference, out=out, plot=plot, checkpoint=checkpoint, fresh=fresh, serial=serial,
            ray_address=ray_address,
        ))


def _check(opts: SolveOptions) -> None:
    """``ValueError`` for values or combinations the search cannot use."""
    if opts.generations < 1:
        raise ValueError(f"--generations must be >= 1, got {opts.generations}")
    if opts.population < 2:
        raise ValueError(f"--population must be >= 2, got {opts.population}")
    if opts.samples < 1 or opts.test_samples < 1:
        raise ValueError("--samples and --test-samples must be >= 1")
    if opts.gpus < 1:
        raise ValueError(f"--gpus must be >= 1, got {opts.gpus}")
    if opts.load is not None and (opts.trace is not None or opts.history is not None):
        raise ValueError("--load applies only to generated workloads (--workload), not to --trace or --history")
    if opts.speedup is not None and opts.trace is None:
        raise ValueError("--speedup applies only to --trace files")
    if opts.load is not None and not (opts.load > 0 and math.isfinite(opts.load)):
        raise ValueError(f"--load must be a number > 0, got {opts.load}")
    if opts.front_size is not None and opts.front_size < 1:
        raise ValueError(f"--front-size must be >= 1, got {opts.front_size}")
    if opts.time_limit is not None and not opts.time_limit > 0:
        raise ValueError(f"--time-limit must be > 0 seconds, got {opts.time_limit}")
    from pcs_ray.solver.space import MAX_QUEUES_LIMIT, SPACES

    if opts.space not in SPACES:
        raise ValueError(f"--space must be {' or '.join(SPACES)}, got {opts.space!r}")
    if opts.max_queues is not None and opts.space != "cuts":
        raise ValueError("--max-queues applies only to --space cuts")
    if opts.max_queues is not None and not 2 <= opts.max_queues <= MAX_QUEUES_LIMIT:
        raise ValueError(f"--max-queues must be between 2 and {MAX_QUEUES_LIMIT}, got {opts.max_queues}")
    if not 0.0 <= opts.local_rate <= 1.0:
        raise ValueError(f"--local-rate must be between 0 and 1, got {opts.local_rate}")
    if opts.serial and opts.ray_address is not None:
        raise ValueError("--serial and --ray-address are mutually exclusive")
    for path, opt in ((opts.out, "--out"), (opts.plot, "--plot")):
        if path is not None and not path.parent.is_dir():
            raise ValueError(f"{opt}: folder {path.parent} does not exist")


def _problem(opts: SolveOptions):
    """The search problem: workload source, cluster size, objectives, samples."""
    from pcs_ray.solver.objectives import parse_objectives
    from pcs_ray.solver.preference import resolve_source
    from pcs_ray.solver.search import Problem
    from pcs_ray.solver.space import DEFAULT_MAX_QUEUES
    from pcs_ray.workloads.traces import default_speedup

    goals = parse_objectives(opts.objectives)
    trace = locate("trace", opts.trace) if opts.trace is not None else None
    source = resolve_source(opts.workload, trace, opts.history, None, opts.num_jobs,
                            0.9 if opts.load is None else opts.load,
                            opts.speedup or (default_speedup(trace) if trace is not None else "linear"))
    return Problem(source, opts.gpus, goals, opts.samples, opts.test_samples, opts.population, opts.seed,
                   search_delta=not opts.no_delta, space=opts.space,
                   max_queues=DEFAULT_MAX_QUEUES if opts.max_queues is None else opts.max_queues,
                   local_rate=opts.local_rate)


def _search(opts: SolveOptions, problem, refs, err) -> tuple[dict, list[dict], list, list]:
    """Run SPEA2 (progress per generation on stderr): (about the run, progress rows, front, references)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pcs_ray.solver.evaluate import RayBackend, SerialBackend
    from pcs_ray.solver.search import Search

    checkpoint = opts.checkpoint
    if checkpoint is None and opts.out is not None:
        checkpoint = Path(str(opts.out) + ".ckpt")
    if not opts.serial and opts.ray_address != "local" and (opts.ray_address or os.environ.get("RAY_ADDRESS")):
        from pcs_ray.client import connect

        connect(opts.ray_address)  # an existing cluster: with its token, and a one-line refusal
    else:
        prefer_token()  # an auto-found or new local cluster: Ray decides, seeing the token if there is one
    backend = SerialBackend() if opts.serial else RayBackend(opts.ray_address)
    started = time.perf_counter()
    search = Search(problem, backend, checkpoint, opts.fresh)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[status]}"), console=err, transient=False,
                        disable=not err.is_terminal)
    progress_rows = []
    try:
        with progress:
            task = progress.add_task("generations", total=opts.generations + 1, status="")

            def on_generation(r) -> None:
                progress_rows.append({"generation": r.generation, "evaluations": r.evaluations,
                                     "simulations": r.simulations, "front_size": r.front_size,
                                     "hypervolume": r.hypervolume, "wall_s": round(r.wall_s, 2)})
                status = f"front {r.front_size}  HV {r.hypervolume:.4f}  simulations {r.simulations}"
                progress.update(task, completed=r.generation + 1, status=status)
                if not err.is_terminal:
                    err.print(f"generation {r.generation}: {status}  {r.wall_s:.0f}s", highlight=False)

            state = search.run(opts.generations, on_generation, opts.time_limit)
            progress.update(task, description="test samples", status="")
            points = search.front(opts.front_size or opts.population)
            references = search.references(refs)
    finally:
        search.close()
    about = {
        "problem": search.describe(),
        "generations": state.generation,
        "evaluations": state.evaluations,
        "distinct_configurations": len(search.evaluator.cache.specs("train")),
        "non_dominated_configurations": len(search.train_front()),
        "simulations_this_run": search.evaluator.simulations,
        "backend": backend.name,
        "wall_s": round(time.perf_counter() - started, 2),
    }
    return about, progress_rows, points, references


def _solve(opts: SolveOptions) -> None:
    """Search, then the front: a table on stdout, hypervolume on stderr, --out JSON, --plot PNG."""
    from rich.console import Console

    from pcs_ray.solver.front import front_json, front_table, hypervolume, normalised_hypervolume, plot_front, reference_point

    _check(opts)
    if opts.workload is None and opts.trace is None and opts.history is None:
        opts = replace(opts, workload="themis1")
    problem = _problem(opts)
    refs = _references(opts)
    err = Console(stderr=True)
    about, progress_rows, points, references = _search(opts, problem, refs, err)

    goals = problem.objectives
    ref_point = reference_point([[r.test for r in references]])
    hv_front = hypervolume([p.test for p in points], ref_point)
    published = [r for r in references if r.spec.startswith("{")]
    about |= {
        "reference_point": {"test": dict(zip([o.label for o in goals], ref_point)),
                            "rule": "1.1 x the worst test value per objective among the reference policies"},
        "hypervolume": {
            "front_test": hv_front,
            "front_test_normalised": normalised_hypervolume([p.test for p in points], ref_point),
            "published_test": hypervolume([r.test for r in published], ref_point) if published else None,
        },
        "progress": progress_rows,
    }
    title = (f"Pareto front: {problem.source.label} on {opts.gpus} GPUs, {about['generations']} generations, "
             f"{about['evaluations']} evaluations")
    stdout_console(200).print(front_table(points, goals, references, title=title))
    hv_line = f"test hypervolume {hv_front:.6g} (reference point {', '.join(f'{v:.6g}' for v in ref_point)})"
    if published:
        hv_line += f"; published configurations {about['hypervolume']['published_test']:.6g}"
    err.print(hv_line, highlight=False)
    if opts.out is not None:
        payload = front_json(points, goals, references, about)
        opts.out.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n", encoding="utf-8")
        err.print(f"wrote {opts.out}")
    if opts.plot is not None:
        plot_front(opts.plot, points, goals, references, title=title)
        err.print(f"wrote {opts.plot}")
    sys.stdout.flush()
