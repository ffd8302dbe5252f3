"""``--limit NAME=VALUE`` of ``pcs-ray start`` and ``up``: the coordinator's guards (``pcs_ray.coordinator.guards``)
and its retention of ended jobs (``pcs_ray.coordinator.retention``)."""

from __future__ import annotations

import math

import typer

#: The coordinator's settings ``--limit`` sets (``CoordinatorConfig`` fields), and what each is.
LIMITS = {
    "external_lease_s": "seconds an external executor (a Tune sweep's driver) may be silent before its job's GPUs go back",
    "max_runtime_s": "a job's time limit (seconds holding GPUs) unless it sets its own",
    "max_runtime_bound_s": "the longest time limit a job may set",
    "report_timeout_s": "seconds a run may report nothing before it is taken for hung",
    "report_timeout_bound_s": "the longest report timeout a job may set",
    "log_bytes_per_rank": "bytes past which a user rank's log is rotated",
    "ended_job_retention_s": "seconds after its end a job is forgotten: its journal events, checkpoints and logs deleted",
    "ended_jobs_kept": "ended jobs kept at most; past it the oldest are forgotten",
    "history_bytes": "bytes past which the job history (history.jsonl) is rotated",
}

#: The limits that count things (whole numbers).
COUNTS = ("log_bytes_per_rank", "ended_jobs_kept", "history_bytes")

LIMIT = typer.Option("--limit", metavar="NAME=VALUE", help="A guard of the coordinator (repeatable; `none`: no limit): "
                     + "; ".join(f"{k}: {v}" for k, v in LIMITS.items()) + ". Defaults in the README.")


def parse_limits(items: list[str] | None) -> dict:
    """``["max_runtime_s=3600", "report_timeout_s=none"]`` as ``CoordinatorConfig`` keyword arguments."""
    out: dict = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in LIMITS:
            raise typer.BadParameter(f"{item!r}: give NAME=VALUE, NAME one of {', '.join(LIMITS)}", param_hint="--limit")
        if value.strip().lower() == "none":
            if name == "external_lease_s":
                raise typer.BadParameter("external_lease_s cannot be none: a dead driver would keep its GPUs",
                                         param_hint="--limit")
            out[name] = None
            continue
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (number > 0 and math.isfinite(number)):
            raise typer.BadParameter(f"{item!r}: the value must be a number > 0 or none", param_hint="--limit")
        out[name] = int(number) if name in COUNTS else number
    return out
