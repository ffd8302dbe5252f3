"""``pcs-ray power fit``: train and evaluate GPU power models (TSMVA and the single-stage baselines)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pcs_ray.commands.inputs import UsageError
from pcs_ray.commands.views import print_json, stdout_console, strict_json

POWER_HELP = "Train and evaluate per-GPU power models (VAHRM's TSMVA) on measured power records."


def fit_cmd(
    data: Annotated[str, typer.Option(
        "--data", metavar="longhorn|FILE.csv", help="Power records: 'longhorn' (PAL's Longhorn V100 runs) or a CSV "
        "with columns app,device,power_w[,ts,sm_clock_mhz,mem_clock_mhz,temperature_c,runtime] (the live "
        "telemetry history is written in it).", show_default=False)],
    out: Annotated[Path, typer.Option(
        "--out", metavar="MODEL.json", help="Where to write the model: evaluation, and TSMVA(RF+RF)'s predicted "
        "W per device and application (the app column), fitted on every record.", show_default=False)],
    predictions: Annotated[Path | None, typer.Option(
        "--predictions", metavar="FILE.csv", help="Also write held-out predictions as a power profile for "
        "simulate --power (each device and application predicted by a model that never saw that pair).",
        show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the splits and forests.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Fit LR, RF (one model per GPU, the paper's single-stage baseline), TSMVA(LR+RF) and TSMVA(RF+RF)
    (stage 1 on the fleet, stage 2 a forest on the residuals with each GPU's history), plus fleet-wide
    single-stage controls, and report their MAPE (mean over applications, %) on held-out runs and on held-out
    GPUs (a GPU's runs of one application held out; the model saw the GPU on other applications) beside the
    VAHRM paper's Table VI. Takes about a minute on the Longhorn records."""
    from pcs_ray.power.records import load
    from pcs_ray.power.tsmva import PAPER_MAPE, TSMVA, evaluate, held_out_predictions

    for path, what in ((out, "--out"), (predictions, "--predictions")):
        if path is not None and not path.parent.is_dir():
            raise UsageError(f"{what}: folder {path.parent} does not exist")
    rec = load(data)
    if len(set(rec.device.tolist())) < 2 or len(set(rec.app.tolist())) < 1:
        raise UsageError(f"{data}: power models need records of at least two devices")
    report = evaluate(rec, seed)
    model = TSMVA.fit(rec, "rf", seed)
    devices = sorted(set(rec.device.tolist()))
    apps = sorted(set(rec.app.tolist()))
    grid_d = [d for d in devices for _ in apps]
    grid_a = [a for _ in devices for a in apps]
    import numpy as np

    pred = model.predict(np.asarray(grid_a), np.asarray(grid_d))
    table: dict[str, dict[str, float]] = {}
    for d, a, w in zip(grid_d, grid_a, pred):
        table.setdefault(d, {})[a] = round(float(w), 3)
    baseline = dict(zip(apps, (round(float(w), 3) for w in model.baseline(np.asarray(apps)))))
    payload = {"data": str(data), "records": len(rec), "devices": len(devices), "apps": apps,
               "model": "TSMVA(RF+RF)", "evaluation": report, "paper_mape": PAPER_MAPE,
               "fleet_power_w": baseline, "device_power_w": table}
    out.write_text(strict_json(payload, indent=1) + "\n")
    summary = {"data": str(data), "records": len(rec), "devices": len(devices), "out": str(out),
               "mape": {split: {m: v["mean"] for m, v in res.items() if isinstance(v, dict) and "mean" in v}
                        for split, res in report.items()},
               "paper_mape": PAPER_MAPE}
    if predictions is not None:
        _write_predictions(predictions, data, rec, held_out_predictions(rec, seed))
        summary["predictions"] = str(predictions)
    if as_json:
        print_json(summary)
        return
    t = Table(title=f"power model MAPE (%), mean over applications: {data}, {len(rec)} runs on {len(devices)} GPUs",
              title_justify="left")
    t.add_column("model")
    for split in summary["mape"]:
        t.add_column(split.replace("_", " "), justify="right")
    for name, paper in PAPER_MAPE.items():
        t.add_column(f"paper {name.split(' ')[0]}", justify="right")
    for m in next(iter(summary["mape"].values())):
        row = [m] + [f"{summary['mape'][s].get(m, float('nan')):.2f}" for s in summary["mape"]]
        row += [f"{p[m]:.2f}" if m in p else "" for p in PAPER_MAPE.values()]
        t.add_row(*row)
    stdout_console().print(t)
    print(f"model written to {out}")


def _write_predictions(path: Path, data: str, rec, pred: dict) -> None:
    from pcs_ray.power.profile import longhorn_rows

    if str(data).lower() == "longhorn":
        rows = longhorn_rows(pred)
    else:
        sums: dict = {}
        for d, a, p, t in zip(rec.device, rec.app, rec.power, rec.runtime):
            s = sums.setdefault((d, a), [0.0, 0.0, 0])
            s[0] += p
            s[1] += t
            s[2] += 1
        rows = [{"class": a, "device": d, "power_w": round(p / k, 3), "predicted_w": round(pred[(d, a)], 3),
                 "runtime": round(t / k, 5)} for (d, a), (p, t, k) in sorted(sums.items())]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["class", "device", "power_w", "predicted_w", "runtime"])
        w.writeheader()
        w.writerows(rows)


def register(app: typer.Typer) -> None:
    group = typer.Typer(name="power", help=POWER_HELP, rich_markup_mode="markdown", no_args_is_help=True)
    group.command("fit")(fit_cmd)
    app.add_typer(group, name="power")
