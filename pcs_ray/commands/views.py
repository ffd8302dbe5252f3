"""Views more than one command prints: the policy comparison table, the per-job CSV, JSON on stdout."""

from __future__ import annotations

import csv
import sys
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pcs_ray.api.strict_json import dumps

# One row per job and policy; the writer below is the only place that knows the columns. The last
# three say why a placement chose the job's GPUs (blank without --placement): the GPUs of its latest
# placement, each score's factor and share (``Placement.explain``), and what filters rejected.
PER_JOB_COLUMNS = (
    "policy", "job_id", "submit", "service", "max_gpus", "start", "finish", "jct",
    "first_pred", "last_pred", "refreshes", "bound", "preemptions",
    "gpus", "placement_scores", "placement_rejections",
)


def _cell(value) -> str | int | float:
    return "" if value is None else value


def explanation_cells(why: dict | None) -> list[str]:
    """``gpus``, ``placement_scores`` and ``placement_rejections`` of one ``Placement.explain`` result:
    ``"0 1"``, ``"variability=1.083 (62%); locality=1.000 (0%)"``, ``"too-few-free=3"``."""
    if why is None:
        return ["", "", ""]
    scores = "; ".join(f"{s['plugin']}={s['value']:.3f} ({100 * s['share']:.0f}%)" for s in why["scores"])
    rejected = "; ".join(f"{reason}={count}" for reason, count in sorted(why["rejections"].items()))
    return [" ".join(map(str, why["gpus"])), scores, rejected]


def per_job_row(label: str, record, why: dict | None = None) -> list:
    """One job's CSV row (times in seconds, blanks where a value does not exist); ``why`` is its
    placement's explanation, if any."""
    r = record
    jct = r.finish - r.submit if r.finish is not None else None
    return [
        label, r.job_id, r.submit, r.service, r.max_gpus, _cell(r.start), _cell(r.finish), _cell(jct),
        _cell(r.first_pred), _cell(r.last_pred), r.refreshes, _cell(r.bound), r.preemptions,
        *explanation_cells(why),
    ]


def write_per_job(path: Path, runs: list[tuple[str, object, Mapping[int, dict | None] | None]]) -> None:
    """``runs``: (label, simulation result, its placement's explanation by job id or None) triples, in order."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(PER_JOB_COLUMNS)
        for label, result, explained in runs:
            for record in result.records:
                why = explained.get(record.job_id) if explained is not None else None
                out.writerow(per_job_row(label, record, why))


def strict_json(payload, **options) -> str:
    """``payload`` as strict JSON: a missing figure is null, never ``NaN`` (``pcs_ray.api.strict_json``)."""
    return dumps(payload, **options)


def print_json(payload) -> None:
    """Exactly one JSON document on stdout (NaN as null), so ``--json > out.json`` stays parseable."""
    sys.stdout.write(strict_json(payload) + "\n")
    sys.stdout.flush()


def stdout_console(width: int = 160) -> Console:
    """A console for tables on stdout; a pipe gets a fixed width so names are not truncated."""
    out = Console()
    return out if out.is_terminal else Console(width=width)


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def comparison_table(summaries: list[dict], title: str) -> Table:
    """One row per policy run, average JCT also normalised to the first row."""
    table = Table(title=title, title_justify="left", caption="JCT in hours; errors, unfairness and utilisation in %",
                  caption_justify="left")
    table.add_column("policy", style="bold")
    placed = any("placement" in s for s in summaries)
    if placed:  # which GPUs each run took: --placement, or the placement the policy's paper pairs it with
        table.add_column("placement")
    for header in ("avg JCT (norm.)", "avg JCT h", "p99 JCT h", "avg pred err %", "p99 pred err %",
                   "avg unfair %", "p99 unfair %", "util %", "wall s"):
        table.add_column(header, justify="right")
    base = summaries[0]["avg_jct"] if summaries else None
    for s in summaries:
        norm = "-" if not base or s["avg_jct"] is None else f"{s['avg_jct'] / base:.3f}"
        where = [s["placement"]["placement"] if "placement" in s else "-"] if placed else []
        table.add_row(
            s["policy"], *where, norm, _hours(s["avg_jct"]), _hours(s["p99_jct"]), _pct(s["avg_pred_err"]),
            _pct(s["p99_pred_err"]), _pct(s["avg_unfairness"]), _pct(s["p99_unfairness"]),
            _pct(None if s["utilization"] is None else 100 * s["utilization"]), f"{s['wall_s']:.2f}",
        )
    return table
