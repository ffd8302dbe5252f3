"""Every JSON the CLI prints or writes is strict: a missing figure is null, never NaN or Infinity, which
``jq``, browsers and strict parsers refuse. Each ``--json`` command that runs without a cluster runs here
in-process, and its output and the JSON files it writes go through a parser that refuses both."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer

from pcs_ray.cli import app, run
from builders import Clock, coordinator

#: ``--json`` commands that need a running cluster or coordinator (their no-cluster errors are tested elsewhere)
NEED_A_CLUSTER = {"up", "down", "submit", "status", "predict", "calibrate", "replay", "config show", "config set", "tenants show",
                  "tenants apply"}


def strict(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def json_commands() -> set[str]:
    """Every command with a ``--json`` option, read from the CLI itself."""
    root = typer.main.get_command(app)
    context = type(root).context_class

    def walk(cmd, path):
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(context(cmd)):
                yield from walk(cmd.get_command(context(cmd), name), [*path, name])
        elif "--json" in [o for p in cmd.get_params(context(cmd)) for o in getattr(p, "opts", [])]:
            yield " ".join(path)

    return set(walk(root, []))


def test_the_strict_parser_refuses_nan_and_infinity():
    for text in ('{"x": NaN}', '[Infinity]', '{"x": -Infinity}'):
        with pytest.raises(ValueError, match="not strict JSON"):
            strict(text)
    assert strict('{"x": null}') == {"x": None}


def power_csv(path: Path) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["app", "device", "power_w"])
        for d in range(6):
            for a, base in (("resnet", 180.0), ("bert", 150.0)):
                for k in range(4):
                    w.writerow([a, f"g{d}", base + 3 * d + 0.1 * k])
    return path


def finished_run_without_midlife_prediction(folder: Path) -> Path:
    """A journal whose only job finished without a mid-life prediction: its error figure is missing."""
    clock = Clock()
    core = coordinator(gpus=4, per_node=2, journal=folder / "journal.sqlite", clock=clock)
    jid, _ = core.submit({"workload": "tiny", "steps": 10, "gpus": 2, "step_time": 0.1})
    clock.t += 4
    core.run_ended(jid, 1, "finished", 10)
    core.journal.close()
    return folder


def cases(tmp: Path) -> dict[str, tuple[list[str], list[Path]]]:
    """Command -> (its arguments, the JSON files it writes)."""
    spec = tmp / "cluster.yaml"
    spec.write_text("nodes:\n  - {name: gpu-a, gpus: 2}\n")
    state = finished_run_without_midlife_prediction(tmp / "state")
    return {
        "simulate": (["simulate", "--num-jobs", "12", "--gpus", "8", "--gpus-per-node", "4", "-p", "vahrm,vu-fcfs-b,fifo",
                      "--power", "longhorn", "--pcr", "0.8", "--no-predict", "--json"], []),
        "data": (["data", "--json"], []),
        "doctor": (["doctor", "--json"], []),  # on a machine without GPUs: nothing to check, still one document
        "node-resources": (["node-resources", "--cluster-spec", str(spec), "--node-name", "gpu-a", "--json"], []),
        "report": (["report", str(state), "--out", str(tmp / "r"), "--json"], [tmp / "r" / "report.json"]),
        "power fit": (["power", "fit", "--data", str(power_csv(tmp / "power.csv")), "--out", str(tmp / "m.json"),
                       "--predictions", str(tmp / "p.csv"), "--json"], [tmp / "m.json"]),
    }


def test_every_json_command_prints_and_writes_strict_json(tmp_path, capsys):
    runs = cases(tmp_path)
    slow = {"slow-runs fit"}  # its classifier search: the slow test below
    assert json_commands() == set(runs) | NEED_A_CLUSTER | slow, "classify the new --json command here"
    for name, (argv, written) in runs.items():
        assert run(argv) == 0, (name, capsys.readouterr().err)
        strict(capsys.readouterr().out)
        for path in written:
            strict(path.read_text())
    report = strict((tmp_path / "r" / "report.json").read_text())
    assert report["summary"]["mean_abs_error_midlife_pct"] is None


@pytest.mark.slow
def test_slow_runs_fit_prints_and_writes_strict_json(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["app", "device", "ts", "runtime"])
        t = 1_600_000_000
        for i in range(120):
            for d in range(4):
                t += 600
                w.writerow(["a", f"g{d}", t, 1.5 if (7 * i + d) % 11 == 0 else 1.0 + 0.01 * ((i + d) % 5)])
    assert run(["slow-runs", "fit", "--data", str(path), "--out", str(tmp_path / "s.json"), "--json"]) == 0
    strict(capsys.readouterr().out)
    strict((tmp_path / "s.json").read_text())
