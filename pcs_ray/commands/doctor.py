"""``pcs-ray doctor``: the GPU preflight on this node, on demand; and the warning lines registration prints.

The checks (:mod:`pcs_ray.cluster.preflight`) ask a fresh process pinned to each GPU, as pcs-ray pins a
run, what it sees (:mod:`pcs_ray.executors.preflight`). Registering a node's GPUs (``pcs-ray node-resources``,
``pcs-ray up --local``) runs them too and prints one warning line per failed check, then registers the
node all the same: refusing it would idle its healthy GPUs as well, and an operator who wants a refusal
has it in ``pcs-ray doctor``'s exit status. A node without NVIDIA GPUs (logical GPUs from a cluster
spec) has nothing to check.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.table import Table

from pcs_ray.commands.target import JSON_OUT
from pcs_ray.commands.views import print_json, stdout_console

NO_GPU = "no NVIDIA GPU found through NVML on this node: nothing to check"


def node_verdicts(node, timeout: float | None = None) -> list:
    """Every check of every GPU of ``node`` (a :class:`~pcs_ray.cluster.discovery.NodeInventory`)."""
    from pcs_ray.executors.preflight import PROBE_TIMEOUT_S, check_node

    return check_node([(g.index, g.uuid) for g in node.gpus], timeout or PROBE_TIMEOUT_S)


def warn_failed_checks(node) -> None:
    """At registration: one line on stderr for each check a GPU of ``node`` failed (nothing for logical GPUs)."""
    if node.source != "nvml" or not node.gpus:
        return
    for verdict in node_verdicts(node):
        if not verdict.passed:
            print(f"warning: {verdict.line()} (`pcs-ray doctor` lists every check)", file=sys.stderr, flush=True)


def doctor_cmd(
    as_json: Annotated[bool, JSON_OUT] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each GPU's pinned process gets to report.")] = 120.0,
) -> None:
    """Check that each of this node's GPUs is the device a run pinned to it gets.

    For each GPU NVML lists, a fresh process pinned to it as pcs-ray pins a
    run (CUDA_VISIBLE_DEVICES=index, CUDA_DEVICE_ORDER=PCI_BUS_ID) must see
    exactly one CUDA device (pinning) whose UUID is NVML's for that index
    (uuid). Exit status 1 when any check fails; 0 when all pass, or on a node
    without NVIDIA GPUs, where there is nothing to check.
    """
    from pcs_ray.cluster.discovery import nvml_inventory

    node = nvml_inventory()
    if node is None:
        if as_json:
            print_json({"node": None, "checked": False, "passed": None, "gpus": 0, "checks": [], "note": NO_GPU})
        else:
            print(NO_GPU)
        return
    verdicts = node_verdicts(node, timeout)
    passed = all(v.passed for v in verdicts)
    if as_json:
        print_json({"node": node.name, "checked": True, "passed": passed, "gpus": len(node.gpus),
                    "checks": [v.to_dict() for v in verdicts], "note": None})
    else:
        stdout_console().print(verdict_table(node.name, verdicts))
    if not passed:
        raise typer.Exit(1)


def verdict_table(node_name: str, verdicts: list) -> Table:
    """One row per check of each GPU: what it found wrong, or ``ok``."""
    failed = sum(not v.passed for v in verdicts)
    table = Table(title=f"GPU preflight on {node_name}: {len(verdicts) - failed} passed, {failed} failed",
                  title_justify="left")
    for col in ("gpu", "uuid", "check", "result"):
        table.add_column(col, justify="right" if col == "gpu" else "left")
    for v in verdicts:
        table.add_row(str(v.index), v.uuid, v.check, "ok" if v.passed else "FAIL: " + "; ".join(v.problems))
    return table


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)
