"""``pcs-ray``: the command line.

Every user error (a bad trace, config, cluster spec or option) ends the
program with one ``error: <message>`` line on stderr and exit status 2, never
a traceback. Results go to stdout; progress goes to stderr, so
``pcs-ray simulate --json > out.json`` stays clean.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import math
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pcs_ray.cluster import ClusterSpec, ClusterSpecError, load_cluster_spec
from pcs_ray.data import pcs_config
from pcs_ray.policies import POLICIES, ConfigError, SchedulingPolicy, WFQConfig, WFQPolicy, create_policy
from workloads.errors import WorkloadError

DEFAULT_WORKLOAD = "themis1"
DEFAULT_NUM_APPS = 500
DEFAULT_LOAD = 0.9
DEFAULT_SEED = 4567
# PCS's three themis1 configurations (paper Fig. 6): best JCT, balanced, best predictability.
BUNDLED_PCS = ("jct", "bal", "pred")

PER_JOB_COLUMNS = (
    "policy", "job_id", "submit", "service", "max_gpus", "start", "finish", "jct",
    "first_pred", "last_pred", "refreshes", "bound", "preemptions",
)

# Errors a user can fix; anything else is a bug and keeps its traceback.
USER_ERRORS = (WorkloadError, ConfigError, ClusterSpecError, ValueError, FileNotFoundError, OSError)


# Recent Typer vendors click (``typer.TyperException`` is its ClickException's base); older
# versions raise click's own classes. Catch whichever exist.
try:
    import click as _click
except ImportError:  # pragma: no cover - typer without click
    _click = None
_EXIT = tuple({typer.Exit} | ({_click.exceptions.Exit} if _click else set()))
_ABORT = tuple({typer.Abort} | ({_click.exceptions.Abort} if _click else set()))
_CLICK_ERRORS = tuple(
    {t for t in (getattr(typer, "TyperException", None), _click.ClickException if _click else None) if t is not None}
)


class UsageError(ValueError):
    """Inconsistent or out-of-range options."""


class Speedup(str, Enum):
    linear = "linear"
    model = "model"


app = typer.Typer(
    name="pcs-ray",
    help=(
        "pcs-ray: predictable, variability- and topology-aware GPU cluster scheduling.\n\n"
        "Run `pcs-ray COMMAND --help` for a command's options. Errors are reported as one "
        "'error: ...' line on stderr with exit status 2."
    ),
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


@app.callback()
def _root() -> None:
    """pcs-ray: predictable, variability- and topology-aware GPU cluster scheduling."""


# -- policies -----------------------------------------------------------------


@dataclass
class PolicyRun:
    label: str
    policy: SchedulingPolicy


def _pcs_runs(pcs_configs: list[Path]) -> list[PolicyRun]:
    if not pcs_configs:
        return [
            PolicyRun(f"pcs-{k}", WFQPolicy(WFQConfig.load(pcs_config("themis1", k))))
            for k in BUNDLED_PCS
        ]
    stems = [p.stem for p in pcs_configs]
    runs = []
    for path, stem in zip(pcs_configs, stems):
        label = f"pcs:{stem}" if stems.count(stem) == 1 else f"pcs:{path}"
        runs.append(PolicyRun(label, WFQPolicy(WFQConfig.load(path))))
    return runs


def resolve_policies(names: list[str], pcs_configs: list[Path]) -> list[PolicyRun]:
    """Expand ``--policy`` values (repeatable, comma-separated, ``all``) into labelled runs."""
    tokens = [t.strip().lower() for value in names for t in value.split(",") if t.strip()]
    if not tokens:
        raise UsageError("--policy is empty; give a policy name or 'all'")
    expanded: list[str] = []
    for t in tokens:
        expanded.extend(POLICIES if t == "all" else [t])
    if pcs_configs and "pcs" not in expanded:
        raise UsageError("--pcs-config needs the pcs policy (--policy pcs or all)")
    runs: list[PolicyRun] = []
    for name in dict.fromkeys(expanded):  # keep order, drop repeats
        if name == "pcs":
            runs.extend(_pcs_runs(pcs_configs))
        elif name.startswith("pcs-") and name[4:] in BUNDLED_PCS:
            key = name[4:]
            runs.append(PolicyRun(name, WFQPolicy(WFQConfig.load(pcs_config("themis1", key)))))
        else:
            runs.append(PolicyRun(name, create_policy(name)))
    seen: set[str] = set()
    unique = []
    for run in runs:
        if run.label not in seen:
            seen.add(run.label)
            unique.append(run)
    return unique


# -- output helpers -------------------------------------------------------------


def _finite(value):
    """JSON-safe: NaN and infinities become null, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(summaries: list[dict], title: str) -> Table:
    table = Table(title=title, title_justify="left", caption="JCT in hours; errors, unfairness and utilisation in %",
                  caption_justify="left")
    table.add_column("policy", style="bold")
    for header in ("avg JCT (norm.)", "avg JCT h", "p99 JCT h", "avg pred err %", "p99 pred err %",
                   "avg unfair %", "p99 unfair %", "util %", "wall s"):
        table.add_column(header, justify="right")
    base = summaries[0]["avg_jct"] if summaries else None
    for s in summaries:
        norm = "-" if not base or s["avg_jct"] is None else f"{s['avg_jct'] / base:.3f}"
        table.add_row(
            s["policy"], norm, _hours(s["avg_jct"]), _hours(s["p99_jct"]), _pct(s["avg_pred_err"]),
            _pct(s["p99_pred_err"]), _pct(s["avg_unfairness"]), _pct(s["p99_unfairness"]),
            _pct(None if s["utilization"] is None else 100 * s["utilization"]), f"{s['wall_s']:.2f}",
        )
    return table


def _cell(value) -> str | int | float:
    return "" if value is None else value


def write_per_job(path: Path, runs: list[tuple[str, object]]) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(PER_JOB_COLUMNS)
        for label, result in runs:
            for r in result.records:
                jct = r.finish - r.submit if r.finish is not None else None
                out.writerow([
                    label, r.job_id, r.submit, r.service, r.max_gpus, _cell(r.start), _cell(r.finish), _cell(jct),
                    _cell(r.first_pred), _cell(r.last_pred), r.refreshes, _cell(r.bound), r.preemptions,
                ])


# -- simulate -------------------------------------------------------------------

SIMULATE_HELP = """
Replay a workload through one or more scheduling policies and compare them.

The workload is a trace file (**--trace**: PCS/Philly, PCS testbed or Sia-Philly CSV) or apps drawn
from a named workload's CDFs (**--workload**, default `themis1`) at offered load **--load** on the
simulated cluster. Each policy runs on the same jobs; the cluster is **--gpus** identical GPUs, or
the spec given with **--cluster**.

Times are in seconds (JCT = finish - submit); the table shows them in hours. With prediction on
(default), every arrival plays the cluster forward with no further arrivals and records each app's
predicted finish; the prediction error is `100 |JCT - predicted JCT| / predicted JCT` of the
first prediction, in percent. Unfairness is `max(0, JCT / fair JCT - 1)` in percent, where the
fair JCT is the app's runtime at an equal share of the cluster.

Policies (`--policy`, repeatable or comma-separated; default `all`):

* `fifo`: arrival order, each app as many GPUs as it can use
* `srsf`: shortest remaining service (GPU-seconds) first (Tiresias-G)
* `las`: two-level least attained service (Tiresias-L)
* `srtf`: shortest remaining time at the app's best allocation first
* `themis`: finish-time fairness with 600 s leases
* `afs`: AFS-L, GPU by GPU to the app that gains most
* `fair`: max-min fair share in whole GPUs
* `pcs`: PCS weighted fair queueing; without **--pcs-config** it runs the three bundled themis1
  configurations `pcs-jct` (best JCT), `pcs-bal` (balanced) and `pcs-pred` (best
  predictability), each of which can also be named on its own; with **--pcs-config FILE** one run
  per file, labelled `pcs:<file stem>`

Placement (**--placement**; without it every GPU is equal and nothing pays a locality penalty):

* `packed-sticky` (Tiresias), `packed-nonsticky` (Gandiva): fewest nodes per app
* `random-sticky`, `random-nonsticky`: random free GPUs
* `pm-first`: variability-sensitive classes (A first) get the GPUs with the best binned scores
* `pal`: PM-First's scores traded against locality through PAL's L x V matrix
* `mapa-baseline`, `mapa-topo`, `mapa-greedy`, `mapa-preserve`: MAPA on each node's NVLink topology
* `combined`: the lowest variability x locality x topology slowdown per app

Non-sticky placements may move running apps; each move costs **--overhead** seconds. **--profile**
samples measured per-class GPU scores onto the cluster (**--profile-seed**); an app runs at its
slowest GPU's score, times **--locality-penalty** when spread over nodes, times a topology slowdown
(bandwidth-sensitive apps on poorly linked GPUs) when **--topology** gives the nodes' links
(`nvidia-smi topo -m` output; nodes then default to its size).

Output: a comparison table on stdout (average JCT also normalised to the first policy), or with
**--json** exactly one JSON object: for one policy, its metrics (`policy`, `jobs`, `gpus`,
`avg_jct`, `p50_jct`, `p99_jct`, `makespan`, `avg_pred_err`, `p99_pred_err`, `avg_unfairness`,
`p99_unfairness`, `utilization` (0..1), `wall_s`, ...) plus `workload` (what ran) and `config`
(the policy's parameters), and with **--placement** a `placement` object (its name and settings,
`migrations`, `jobs_across_nodes`, and on nodes with a topology `sensitive_effbw_gbps`: min, p25,
p50, p75, max and mean of the time-weighted effective bandwidth of bandwidth-sensitive multi-GPU
apps); for several policies `{"runs": [one such object per policy], "workload": {...}}`. Prediction errors are null with **--no-predict**. Progress is shown on stderr
when it is a terminal.
"""


@app.command("simulate", help=SIMULATE_HELP, no_args_is_help=False)
def simulate_cmd(
    trace: Annotated[Path | None, typer.Option(
        "--trace", metavar="PATH", help="Job trace CSV to replay (exclusive with --workload).",
        show_default=False)] = None,
    workload: Annotated[str | None, typer.Option(
        "--workload", metavar="NAME", help=f"Generate apps from this workload's CDFs  [default: {DEFAULT_WORKLOAD}]",
        show_default=False)] = None,
    num_apps: Annotated[int | None, typer.Option(
        "--num-apps", metavar="N", help=f"Apps to generate  [default: {DEFAULT_NUM_APPS}]", show_default=False)] = None,
    load: Annotated[float | None, typer.Option(
        "--load", metavar="X", help=f"Offered load of generated apps, > 0 (1.0 keeps every GPU busy on average)  "
        f"[default: {DEFAULT_LOAD}]", show_default=False)] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", metavar="S", help=f"Random seed of the generator  [default: {DEFAULT_SEED}]",
        show_default=False)] = None,
    gpus: Annotated[int, typer.Option("--gpus", metavar="N", help="GPUs in the simulated cluster.")] = 64,
    gpus_per_node: Annotated[int | None, typer.Option(
        "--gpus-per-node", metavar="N", help="GPUs per node (the last node may be smaller)  [default: all on one node]",
        show_default=False)] = None,
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", metavar="FILE", help="Cluster spec (YAML or JSON); overrides --gpus and --gpus-per-node.",
        show_default=False)] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", "-p", metavar="NAME", help="Policy to run; repeatable or comma-separated, 'all' for every one  "
        "[default: all]", show_default=False)] = None,
    pcs_config: Annotated[list[Path] | None, typer.Option(
        "--pcs-config", metavar="FILE", help="PCS WFQ config JSON for the pcs policy; repeatable.",
        show_default=False)] = None,
    speedup: Annotated[Speedup | None, typer.Option(
        "--speedup", help="Speedup curves of a PCS/Philly trace's apps: linear, or measured per model  "
        "[default: linear]", show_default=False, case_sensitive=False)] = None,
    overhead: Annotated[float, typer.Option(
        "--overhead", metavar="SECONDS", help="Stall each time a running app's GPUs change (checkpoint/restore).")] = 0.0,
    predict: Annotated[bool, typer.Option(
        "--predict/--no-predict", help="Predict each app's finish at every arrival.")] = True,
    per_job: Annotated[Path | None, typer.Option(
        "--per-job", metavar="FILE.csv", help="Write one CSV row per job and policy (times in seconds).",
        show_default=False)] = None,
    placement: Annotated[str | None, typer.Option(
        "--placement", metavar="NAME", help="Which GPUs each app gets (see below)  [default: none: all GPUs equal]",
        show_default=False)] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", metavar="NAME|FILE", help="GPU variability profile: longhorn, frontera, ls6, 32gpu or a CSV.",
        show_default=False)] = None,
    profile_seed: Annotated[int, typer.Option(
        "--profile-seed", metavar="N", help="Seed for sampling the profile onto the cluster's GPUs.")] = 0,
    topology: Annotated[Path | None, typer.Option(
        "--topology", metavar="FILE", help="`nvidia-smi topo -m` output applied to every node.",
        show_default=False)] = None,
    locality_penalty: Annotated[float | None, typer.Option(
        "--locality-penalty", metavar="X", help="Slowdown (>= 1) of an app spread over nodes  [default: the "
        "cluster spec's, else 1.0]", show_default=False)] = None,
    workers: Annotated[int, typer.Option(
        "--workers", metavar="N", help="Processes for the forward plays (predictions) of each run; the "
        "results are identical, long traces finish sooner. Progress then shows only at the end.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of the table.")] = False,
) -> None:
    # Imported here so `pcs-ray --help` stays fast.
    from pcs_ray.metrics import summarize
    from pcs_ray.simulator import simulate
    from workloads.generator import generate_workload
    from workloads.traces import read_trace

    # -- options ---------------------------------------------------------------
    if trace is not None and workload is not None:
        raise UsageError("--trace and --workload are mutually exclusive")
    if trace is not None:
        given = [n for n, v in (("--num-apps", num_apps), ("--load", load), ("--seed", seed)) if v is not None]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise UsageError(f"{', '.join(given)} {verb} only to generated workloads, not to --trace")
    elif speedup is not None:
        raise UsageError("--speedup applies to --trace files; generated workloads scale linearly")
    num_apps = DEFAULT_NUM_APPS if num_apps is None else num_apps
    load = DEFAULT_LOAD if load is None else load
    seed = DEFAULT_SEED if seed is None else seed
    if num_apps < 1:
        raise UsageError(f"--num-apps must be >= 1, got {num_apps}")
    if not (load > 0 and math.isfinite(load)):
        raise UsageError(f"--load must be a number > 0, got {load}")
    if gpus < 1:
        raise UsageError(f"--gpus must be >= 1, got {gpus}")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise UsageError(f"--gpus-per-node must be >= 1, got {gpus_per_node}")
    if not (overhead >= 0 and math.isfinite(overhead)):
        raise UsageError(f"--overhead must be a number of seconds >= 0, got {overhead}")
    if per_job is not None and not per_job.parent.is_dir():
        raise UsageError(f"--per-job: folder {per_job.parent} does not exist")
    if per_job is not None and per_job.is_dir():
        raise UsageError(f"--per-job: {per_job} is a folder")

    if workers < 1:
        raise UsageError(f"--workers must be >= 1, got {workers}")
    if workers > 1 and placement is not None:
        # Each process would place on its own copy, and the placement summary is kept in this one.
        raise UsageError("--workers > 1 does not combine with --placement yet")
    runs = resolve_policies(policy or ["all"], list(pcs_config or []))
    if placement is None and (profile is not None or topology is not None or locality_penalty is not None):
        raise UsageError("--profile, --topology and --locality-penalty need --placement")
    if topology is not None and gpus_per_node is None and cluster is None:
        from pcs_ray.topology import read_topo

        gpus_per_node = read_topo(topology).size  # one topology per node: nodes of its size
    spec = load_cluster_spec(cluster) if cluster is not None else ClusterSpec.homogeneous(gpus, gpus_per_node)
    setup = None
    if placement is not None:
        from pcs_ray.placement.configure import configure_placement

        setup = configure_placement(
            spec, placement, profile=profile, profile_seed=profile_seed,
            topology=str(topology) if topology is not None else None, locality_penalty=locality_penalty,
        )
        spec = setup.cluster
    capacity = spec.num_gpus

    if trace is not None:
        jobs = read_trace(trace, speedup=(speedup or Speedup.linear).value)
        about = {"source": "trace", "trace": str(trace), "speedup": (speedup or Speedup.linear).value}
        title = f"{trace}"
    else:
        name = workload or DEFAULT_WORKLOAD
        jobs = generate_workload(name, num_apps, capacity, load=load, seed=seed)
        about = {"source": "generated", "workload": name, "num_apps": num_apps, "load": load, "seed": seed}
        title = f"{name}: {num_apps} apps at load {load:g}, seed {seed}"
    about.update({
        "jobs": len(jobs), "gpus": capacity, "nodes": len(spec.nodes), "gpus_per_node": spec.gpus_per_node,
        "cluster": str(cluster) if cluster is not None else None, "overhead": overhead, "predict": predict,
    })
    if setup is not None:
        about["placement"] = setup.about
        title += f", placement {setup.name}"
    title += f" on {capacity} GPUs ({len(spec.nodes)} node{'s' if len(spec.nodes) != 1 else ''})"

    # -- run -------------------------------------------------------------------
    err = Console(stderr=True)
    summaries: list[dict] = []
    results = []
    progress = Progress(
        TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs"),
        TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal,
    )
    with progress:
        for run in runs:
            task = progress.add_task(run.label, total=len(jobs))
            placed = setup.new() if setup is not None else None
            result = simulate(
                jobs, capacity, run.policy, predict=predict, overhead=overhead, placement=placed, workers=workers,
                progress=lambda done, total, task=task: progress.update(task, completed=done),
            )
            progress.remove_task(task)
            summary = summarize(result)
            summary["policy"] = run.label
            summary["config"] = result.policy
            if placed is not None:
                summary["placement"] = {**placed.describe(), **placed.summary()}
            summaries.append(summary)
            results.append((run.label, result))

    if per_job is not None:
        write_per_job(per_job, results)

    if as_json:
        if len(summaries) == 1:
            payload = {**summaries[0], "workload": about}
        else:
            payload = {"runs": summaries, "workload": about}
        sys.stdout.write(json.dumps(_finite(payload), allow_nan=False) + "\n")
        sys.stdout.flush()
    else:
        out = Console()
        if not out.is_terminal:
            out = Console(width=160)
        out.print(_table(summaries, title))


# -- entry point ------------------------------------------------------------------


from pcs_ray.commands import register_all as _register_commands  # noqa: E402  (needs ``app``)

_register_commands(app)


def _one_line(message: str) -> str:
    return " ".join(message.split()) or "unknown error"


def _error(message: str) -> None:
    print(f"error: {_one_line(message)}", file=sys.stderr, flush=True)


def run(argv: list[str] | None = None) -> int:
    """Run the app on ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = app(args=args or ["--help"], prog_name="pcs-ray", standalone_mode=False)
    except _EXIT as e:
        return e.exit_code
    except _ABORT:
        _error("aborted")
        return 130
    except _CLICK_ERRORS as e:
        hint = ""
        ctx = getattr(e, "ctx", None)
        if ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
        _error(e.format_message() + hint)
        return 2
    except OSError as e:
        if e.errno == errno.EPIPE:  # stdout closed early (`pcs-ray ... | head`): not an error worth a line
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        if e.strerror and e.filename is not None:
            _error(f"{e.strerror}: {e.filename}")
        else:
            _error(str(e) or type(e).__name__)
        return 2
    except USER_ERRORS as e:
        _error(str(e) or type(e).__name__)
        return 2
    return rv if isinstance(rv, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``pcs-ray``)."""
    sys.exit(run(argv))


if __name__ == "__main__":
    main()
