"""``pcs-ray data``: what reference data ships with pcs-ray, by the names the other commands accept."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from pcs_ray.commands.views import print_json, stdout_console
from pcs_ray.data import catalog, data_dir


def data_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print the catalog as one JSON object.")] = False,
) -> None:
    """List the bundled traces, workloads, PCS configurations, variability profiles and topologies.

    Every option that takes one of these names (`--trace`, `--workload`,
    `--pcs-config`, `--profile`, `--topology`) also takes a file path.
    """
    entries = catalog()
    if as_json:
        print_json(entries)  # {kind: {"about": ..., "names": [...]}}
        return
    table = Table(title=f"pcs-ray data in {data_dir()}", title_justify="left")
    for col in ("kind", "names", "what"):
        table.add_column(col)
    for kind, entry in entries.items():
        table.add_row(kind, ", ".join(entry["names"]), entry["about"])
    stdout_console().print(table)


def register(app: typer.Typer) -> None:
    app.command("data")(data_cmd)
