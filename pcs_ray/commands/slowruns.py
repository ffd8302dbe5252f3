"""``pcs-ray slow-runs``: fit and score the slow-run model RUSH's start function and the slow-run filter use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pcs_ray.commands.inputs import UsageError
from pcs_ray.commands.views import print_json, stdout_console, strict_json

SLOW_RUNS_HELP = """
Predict, before a run starts, whether it will be slow (RUSH): more than 1.5 standard deviations
above its application's mean run time.
"""

FIT_HELP = """
Build a dataset from per-run records, select a classifier as RUSH does and score it on later runs.

**--data** is `longhorn` (the bundled per-run records of TACC Longhorn's V100s: ResNet, BERT,
PageRank, SGEMM) or a CSV with one row per run and the columns `app`, `device`, `ts` (Unix seconds
at the run's start) and `runtime` (required), and `cabinet`, `node`, `power`, `sm_clock`, `mem_clock`,
`temperature` (optional; empty = unknown): what the live system's job history and telemetry record.

Features are known before a run starts (the device's, node's and cabinet's earlier runs: mean and
decayed slowdown, last slowdown, temperature, power and clock, time since the device's last run,
earlier slow runs; cabinet, node, slot, time of day, application, runs started on the node in the
previous 15 minutes). Per application, the first **--train** fraction of runs in time is the
training split: recursive feature elimination keeps at most 20 features, AdaBoost, random forest,
ExtraTrees and k-nearest-neighbours are compared by stratified **--folds**-fold F1 there, and every
model is scored (F1) on the later runs. The naive baseline predicts slow when the device's past mean
slowdown exceeds a threshold fitted on the training split.

**--out** writes the selection (chosen model, its features, every F1, the baseline) as JSON.
"""


def fit_cmd(
    data: Annotated[str, typer.Option("--data", metavar="longhorn|FILE.csv", help="Per-run records.")] = "longhorn",
    out: Annotated[Path | None, typer.Option("--out", metavar="FILE.json", help="Write the model selection here.",
                                             show_default=False)] = None,
    train: Annotated[float, typer.Option("--train", metavar="X", help="Training fraction of each application's runs, in time order.")] = 0.7,
    folds: Annotated[int, typer.Option("--folds", metavar="K", help="Stratified k-fold cross-validation folds (>= 2).")] = 5,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the models and the folds.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
) -> None:
    from pcs_ray.variability.slow_runs import build_dataset, fit, load_records

    if folds < 2:
        raise UsageError(f"--folds must be >= 2, got {folds}")
    if not 0 < train < 1:
        raise UsageError(f"--train must be in (0, 1), got {train}")
    if out is not None and not out.parent.is_dir():
        raise UsageError(f"--out: folder {out.parent} does not exist")
    result = fit(build_dataset(load_records(data)), data=data, train=train, folds=folds, seed=seed)
    report = result.to_json()
    if out is not None:
        out.write_text(strict_json(report, indent=1) + "\n")
    if as_json:
        print_json(report)
        return
    table = Table(title=f"slow-run models on {data}: {report['train_runs']} training runs, {report['test_runs']} "
                        f"later runs, {100 * report['slow_fraction']:.1f} % slow", title_justify="left")
    for col in ("model", "cv F1", "grouped cv F1", "F1 later runs"):
        table.add_column(col)
    for name, f1 in report["test_f1"].items():
        mark = " (chosen)" if name == report["chosen"] else ""
        table.add_row(name + mark, f"{report['cv_f1'][name]:.3f}", f"{report['grouped_cv_f1'][name]:.3f}", f"{f1:.3f}")
    table.add_row("naive baseline", "", "", f"{report['baseline']['test_f1']:.3f}")
    console = stdout_console()
    console.print(table)
    console.print(f"features ({len(report['features'])}): {', '.join(report['features'])}")
    console.print("chosen model per application (later runs): " + "; ".join(
        f"{app} F1 {'-' if a['f1'] is None else format(a['f1'], '.3f')} ({a['predicted_and_slow']} of {a['slow']} "
        f"slow runs predicted, {a['predicted']} predicted)" for app, a in report["chosen_by_app"].items()))


def register(app: typer.Typer) -> None:
    group = typer.Typer(name="slow-runs", help=SLOW_RUNS_HELP, rich_markup_mode="markdown", no_args_is_help=True)
    group.command("fit", help=FIT_HELP)(fit_cmd)
    app.add_typer(group, name="slow-runs")
