"""``pcs-ray simulate``: options -> plan (``simulate_plan``) -> runs (``simulate_run``) -> table or JSON."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperCommand

from pcs_ray.commands.simulate_grid import combinations
from pcs_ray.commands.simulate_options import (
    DEFAULT_LOAD, DEFAULT_NUM_JOBS, DEFAULT_SEED, DEFAULT_WORKLOAD, Semantics, Speedup,
)
from pcs_ray.commands.inputs import renamed_option
from pcs_ray.commands.views import comparison_table, print_json, stdout_console, write_per_job
from pcs_ray.data import names


SUMMARY = "Replay a workload through one or more scheduling policies and compare them."


def simulate_help() -> str:
    """The full help, listing every registered policy and placement."""
    from pcs_ray.commands.catalog import placement_list, policy_list, semantics_list
    from pcs_ray.sim.semantics import ordered_policies

    return f"""
{SUMMARY}

The workload is a trace (**--trace**: a bundled name such as `philly/0e4a51` or `sia-philly/workload-1`,
or a PCS/Philly, PCS testbed or Sia-Philly CSV) or jobs drawn from a named workload's CDFs
(**--workload**, default `{DEFAULT_WORKLOAD}`) at offered load **--load** on the simulated cluster. Each
policy runs on the same jobs; the cluster is **--gpus** identical GPUs, or the spec given with
**--cluster**. `pcs-ray data` lists the bundled traces, workloads, configurations, profiles and topologies.

Times are in seconds (JCT = finish - submit); the table shows them in hours. With prediction on
(default), every arrival plays the cluster forward with no further arrivals and records each job's
predicted finish; the prediction error is `100 |JCT - predicted JCT| / predicted JCT` of the
first prediction, in percent. Unfairness is `max(0, JCT / fair JCT - 1)` in percent, where the
fair JCT is the job's runtime at an equal share of the cluster.

Policies (`--policy`, repeatable or comma-separated; default `all`, which runs `pcs` as its three
bundled configurations unless **--pcs-config** is given; with **--pcs-config FILE|NAME** `pcs` makes one
run per value, labelled `pcs:<file stem>`):

{policy_list()}

Placement (**--placement**, for every policy; without it every GPU is equal and nothing pays a locality
penalty, except that vahrm and the *-fcfs policies each run on the placement their paper pairs them with;
the table's `placement` column and each run's `placement.chosen_by` say which one a run used):

{placement_list()}

Semantics (**--semantics**), the same policies and placements run two ways:

{semantics_list()}

Under `blox` only policies that are a priority order run ({', '.join(ordered_policies())}; `all` means
these); elastic jobs take their full demand. PAL's published results come from `blox`: on Sia-Philly
workload-1 with `--profile pal-sim64 --locality-penalty 1.7 --gpus-per-node 4 -p fifo` it reproduces
the authors' simulator: Packed-Sticky and PAL average JCT within 0.1 % of theirs
(`bench/placement_experiments.py pal`). `pal-sim64` is that simulator's 64-GPU cluster, not a sample.

Non-sticky placements may move running jobs; each move costs **--overhead** seconds. **--profile**
samples measured per-class GPU scores onto the cluster (**--profile-seed**); a job runs at its
slowest GPU's score, times **--locality-penalty** when spread over nodes, times a topology slowdown
(bandwidth-sensitive jobs on poorly linked GPUs) when **--topology** gives the nodes' links
(a bundled name such as `dgx1-v100`, or `nvidia-smi topo -m` output; nodes then default to its size).

Energy: **--power** samples a power profile onto the GPUs (true and model-predicted watts per class; a GPU
with a variability score takes the measured GPU nearest its speed). Placements decide on the predicted
watts (`lowest-power`, `lowest-energy`, `energy`); vahrm and the *-fcfs policies predict with them and
admit jobs under **--power-budget-kw** or **--pcr** (x the summed TDP), counting a workload's first run at TDP
and idle GPUs at the profile's idle draw; vahrm costs the very GPUs it then takes.

**--run-variability longhorn** makes runs vary over time as well: per application (ResNet-50 for
class A, BERT for B, PageRank for C and D), each simulated GPU is one of Longhorn's V100s (drawn with
**--profile-seed**) and a run of a job takes that GPU's recorded run of the job's application at that
time (a job runs at its slowest GPU's recorded slowdown); a run is slow when a record is more than
1.5 sigma above its application's mean. The slow-run model (`pcs-ray slow-runs fit`, fitted first on
those applications' earlier runs) predicts each GPU's run: `rush` skips a job predicted to run slow
up to **--skip-threshold** times, and `-slow-run` placements keep starts off GPUs predicted slow.
The output then gains `slow_runs` and `runs` per policy.

Output: a comparison table on stdout (average JCT also normalised to the first policy), or with
**--json** exactly one JSON object: for one policy, its metrics (`policy`, `jobs`, `gpus`,
`avg_jct`, `p50_jct`, `p99_jct`, `makespan`, `avg_pred_err`, `p99_pred_err`, `avg_unfairness`,
`p99_unfairness`, `utilization` (0..1), `wall_s`, ...) plus `workload` (what ran) and `config`
(the policy's parameters), and with **--placement** a `placement` object (its name and settings,
`migrations`, `jobs_across_nodes`, and on nodes with a topology `sensitive_effbw_gbps`: min, p25,
p50, p75, max and mean of the time-weighted effective bandwidth of bandwidth-sensitive multi-GPU
jobs); with **--power** an `energy` object (`kwh`, `jobs_per_kwh`, `avg_kw`, `peak_kw`: busy GPUs draw their
job's power for its class on those GPUs, idle GPUs the profile's idle power, from the first event to the
last); for several policies `{{"runs": [one such object per policy], "workload": {{...}}}}`; with several placements or
seeds `{{"runs": [...]}}` where each run carries its own `workload`. Prediction errors are null with **--no-predict**.
Progress is shown on stderr when it is a terminal: each run's jobs, and a line as each run finishes.

Several at once: **--placement**, **--seed** and **--profile-seed** each take several values (repeatable or
comma-separated); every policy runs on every combination of them, and the table shows one comparison per
placement x seed. With **--address ADDR** (or `RAY_ADDRESS`) naming a Ray cluster (`pcs-ray up --local`
prints one), each run is a Ray task on it, one CPU each; without, they run one after another in this process.
The results are the same either way (only `wall_s` differs).
"""


def simulate_cmd(
    trace: Annotated[str | None, typer.Option(
        "--trace", metavar="NAME|PATH", help="Job trace to replay: a bundled name or a CSV (exclusive with "
        "--workload).", show_default=False)] = None,
    workload: Annotated[str | None, typer.Option(
        "--workload", metavar="NAME", help=f"Generate jobs from this workload's CDFs  [default: {DEFAULT_WORKLOAD}]",
        show_default=False)] = None,
    num_jobs: Annotated[int | None, typer.Option(
        "--num-jobs", metavar="N", help=f"Jobs to generate  [default: {DEFAULT_NUM_JOBS}]", show_default=False)] = None,
    num_apps: Annotated[int | None, typer.Option("--num-apps", hidden=True)] = None,
    load: Annotated[float | None, typer.Option(
        "--load", metavar="X", help=f"Offered load of generated jobs, > 0 (1.0 keeps every GPU busy on average)  "
        f"[default: {DEFAULT_LOAD}]", show_default=False)] = None,
    seed: Annotated[list[str] | None, typer.Option(
        "--seed", metavar="S", help=f"Random seed of the generator; repeatable or comma-separated, one workload "
        f"each  [default: {DEFAULT_SEED}]", show_default=False)] = None,
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
    pcs_config: Annotated[list[str] | None, typer.Option(
        "--pcs-config", metavar="FILE|NAME", help="PCS WFQ config for the pcs policy: a JSON file or a bundled "
        "name (e.g. themis1-jct); repeatable.", show_default=False)] = None,
    speedup: Annotated[Speedup | None, typer.Option(
        "--speedup", help="Speedup curves of a PCS/Philly trace's jobs: measured per model (as the PCS artifact "
        "replays traces), or linear  [default: model]", show_default=False, case_sensitive=False)] = None,
    overhead: Annotated[float, typer.Option(
        "--overhead", metavar="SECONDS", help="Stall each time a running job's GPUs change (checkpoint/restore).")] = 0.0,
    predict: Annotated[bool, typer.Option(
        "--predict/--no-predict", help="Predict each job's finish at every arrival.")] = True,
    per_job: Annotated[Path | None, typer.Option(
        "--per-job", metavar="FILE.csv", help="Write one CSV row per job and policy (times in seconds; with --placement also each job's GPUs and why: each score's factor and share, filter rejections).",
        show_default=False)] = None,
    placement: Annotated[list[str] | None, typer.Option(
        "--placement", metavar="NAME", help="Which GPUs each job gets, for every policy (see below); repeatable or "
        "comma-separated, every policy on each  [default: none: all GPUs equal; the VAHRM family on its paper placement]",
        show_default=False)] = None,
    profile: Annotated[str | None, typer.Option(
        "--profile", metavar="NAME|FILE", help=f"GPU variability profile: {', '.join(names('profile'))} or a CSV.",
        show_default=False)] = None,
    profile_seed: Annotated[list[str] | None, typer.Option(
        "--profile-seed", metavar="N", help="Seed for sampling the profile onto the cluster's GPUs; repeatable or "
        "comma-separated  [default: 0]", show_default=False)] = None,
    topology: Annotated[str | None, typer.Option(
        "--topology", metavar="NAME|FILE", help="`nvidia-smi topo -m` output applied to every node: a bundled "
        "name (e.g. dgx1-v100) or a file.", show_default=False)] = None,
    locality_penalty: Annotated[float | None, typer.Option(
        "--locality-penalty", metavar="X", help="Slowdown (>= 1) of a job spread over nodes  [default: the "
        "cluster spec's, else 1.0]", show_default=False)] = None,
    semantics: Annotated[Semantics | None, typer.Option(
        "--semantics", help="How decisions become a schedule: continuous (work-conserving, a decision at every "
        "event) or blox (PAL's evaluation: strict priority, no backfilling, 360 s rounds; see below)  "
        "[default: continuous]", show_default=False, case_sensitive=False)] = None,
    workers: Annotated[int, typer.Option(
        "--workers", metavar="N", help="Processes for the forward plays (predictions) of each run; the "
        "results are identical, long traces finish sooner. Progress then shows only at the end.")] = 1,
    run_variability: Annotated[str | None, typer.Option(
        "--run-variability", metavar="longhorn", help="Replay run-to-run variability: each run on a GPU takes "
        "that GPU's recorded run of the job's application then (seeded by --profile-seed); needs --placement.", show_default=False)] = None,
    skip_threshold: Annotated[int | None, typer.Option(
        "--skip-threshold", metavar="N", help="rush: most times a job predicted to run slow is skipped (>= 0)  "
        "[default: 5]", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of the table.")] = False,
    power: Annotated[str | None, typer.Option(
        "--power", metavar="NAME|FILE", help="Power profile: 'longhorn' or a CSV (class,power_w[,device,predicted_w,"
        "runtime]); sampled per GPU with --profile-seed; adds an 'energy' object to the results.",
        show_default=False)] = None,
    power_budget_kw: Annotated[float | None, typer.Option(
        "--power-budget-kw", metavar="KW", help="System power budget (kW, > 0) that vahrm and the *-fcfs policies "
        "admit jobs under (system-wide; the instantaneous draw may exceed it).", show_default=False)] = None,
    pcr: Annotated[float | None, typer.Option(
        "--pcr", metavar="X", help="Power budget as a fraction of the GPUs' summed TDP (the VAHRM paper's PCR).",
        show_default=False)] = None,
    energy_unit: Annotated[str | None, typer.Option(
        "--energy-unit", metavar="J|kWh", help="vahrm: the unit of predicted energy E in its priority "
        "beta E + (1 - beta) W (W in seconds); the paper gives none, and only J lets its beta weigh both terms  "
        "[default: J]", show_default=False)] = None,
    tenants: Annotated[str | None, typer.Option(
        "--tenants", metavar="TRACE=QUOTA,...|FILE", help="Traces as tenants of one cluster of their summed quotas "
        "(or a tenants file naming traces): runs static, shared and flat side by side, one --policy inside each "
        "tenant  [default policy: pcs-bal]", show_default=False)] = None,
    address: Annotated[str | None, typer.Option(
        "--address", metavar="ADDR", help="Ray cluster to run each policy x placement x seed on, as Ray tasks  "
        "[default: $RAY_ADDRESS; without either, one after another in this process]", show_default=False)] = None,
) -> None:
    num_jobs = renamed_option("--num-apps", "--num-jobs", num_apps, num_jobs)
    del num_apps  # the options are read from locals() below
    if tenants is not None:
        _simulate_tenants(tenants, locals())
        return
    grid = combinations({k: v for k, v in locals().items() if k not in ("tenants", "address")})
    opts = grid[0].options
    # Imported here so `pcs-ray --help` stays fast (they pull in the simulator and the workload readers).
    from pcs_ray.commands.simulate_plan import make_plan
    from pcs_ray.commands.simulate_run import run_one, run_plans

    plans = [make_plan(c.options) for c in grid]
    labels = [[c.label(run.label) for run in plan.runs] for c, plan in zip(grid, plans)]
    fanout = _ray_fanout(run_one, address)
    outcomes = run_plans(plans, labels, predict=opts.predict, overhead=opts.overhead, workers=opts.workers,
                         explain=opts.per_job is not None, fanout=fanout)
    if opts.per_job is not None:
        write_per_job(opts.per_job, [(label, o.result, o.why) for names, runs in zip(labels, outcomes)
                                     for label, o in zip(names, runs)])
    if opts.as_json:
        if len(plans) > 1:  # each run as one alone prints itself: its metrics and what it ran on
            print_json({"runs": [{**o.summary, "workload": plan.about} for plan, runs in zip(plans, outcomes)
                                 for o in runs]})
        elif len(outcomes[0]) == 1:
            print_json({**outcomes[0][0].summary, "workload": plans[0].about})
        else:
            print_json({"runs": [o.summary for o in outcomes[0]], "workload": plans[0].about})
    else:
        console = stdout_console()
        for plan, runs in zip(plans, outcomes):
            console.print(comparison_table([o.summary for o in runs], plan.title))


def _ray_fanout(fn, address: str | None):
    """A fan-out of ``fn`` over the Ray cluster ``--address`` or ``$RAY_ADDRESS`` names (joined with its token),
    or None (this process) when neither does."""
    if not (address or os.environ.get("RAY_ADDRESS")):
        return None
    from pcs_ray.client import connect
    from pcs_ray.solver.fanout import RayFanOut

    connect(address)
    return RayFanOut(fn)


def _simulate_tenants(value: str, given: dict) -> None:
    """``--tenants``: only the options that mean something for it may be given."""
    from pcs_ray.commands.inputs import UsageError
    from pcs_ray.commands.simulate_tenants import run, setups_table

    allowed = {"tenants", "policy", "speedup", "predict", "overhead", "as_json", "value", "given"}
    defaults = {"gpus": 64, "workers": 1}
    extra = [k for k, v in given.items() if k not in allowed and v not in (None, False) and defaults.get(k) != v]
    if extra:
        raise UsageError(f"--tenants does not combine with --{extra[0].replace('_', '-')}")
    if not (given["overhead"] >= 0):
        raise UsageError(f"--overhead must be a number of seconds >= 0, got {given['overhead']}")
    out = run(value, given["policy"], speedup=given["speedup"].value if given["speedup"] else None,
              predict=given["predict"], overhead=given["overhead"])
    if given["as_json"]:
        print_json(out)
    else:
        stdout_console().print(setups_table(out))


class _SimulateCommand(TyperCommand):
    """Renders the help only when it is shown: listing the registries imports the placements, which the
    other commands (and ``pcs-ray --help``, which shows ``SUMMARY``) need not load."""

    help = property(lambda self: simulate_help(), lambda self, value: None)


def register(app: typer.Typer) -> None:
    app.command("simulate", cls=_SimulateCommand, short_help=SUMMARY, no_args_is_help=False)(simulate_cmd)
