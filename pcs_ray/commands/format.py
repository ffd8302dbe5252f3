"""How the live commands show times and jobs: the status table and its helpers (used by the demo too)."""

from __future__ import annotations

from datetime import datetime

from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from pcs_ray.contract import BOUND_MEANING, TERMINAL, JobStatus, past_bound


def clock(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t).strftime("%H:%M:%S")


def when(t: float | None, now: float) -> str:
    """An absolute time with how far it is from ``now``."""
    if t is None:
        return "-"
    d = t - now
    return f"{clock(t)} (in {d:.0f} s)" if d >= 0 else f"{clock(t)} ({-d:.0f} s ago)"


def last_line(text: str | None) -> str:
    """The line of an error that says what happened (a traceback ends with it)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "-"


def gpu_list(names: list[str]) -> str:
    """GPU names, runs on one node folded: ``node0:0-3,node1:1``."""
    out: list[str] = []
    for name in names:
        node, _, idx = name.rpartition(":")
        prev = out[-1] if out else ""
        pnode, _, pidx = prev.rpartition(":")
        lo, _, hi = pidx.partition("-")
        if node and pnode == node and idx.isdigit() and (hi or lo).isdigit() and int(idx) == int(hi or lo) + 1:
            out[-1] = f"{node}:{lo}-{idx}"
        else:
            out.append(name)
    return ",".join(out) or "-"


#: The states whose job view carries an error worth showing.
ENDED_WITH_ERROR = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT})

# Columns a narrow terminal loses first (the reasons and errors stay whole under the table)
DROPPABLE = ("class", "bound", "step s", "preempt", "skips", "error", "tenant")


class StatusTable:
    """The live table: job, its tenant (where tenants are declared), state, GPUs, progress, predicted finish,
    why a failed job failed, how often and why a job's start was skipped (RUSH), and why a queued or
    stopping job waits: its code in the table, its line of text under it. Where the terminal is too narrow
    for every column, the ones in ``DROPPABLE`` go first, so what is left stays readable."""

    def __init__(self, status: dict, title: str = "pcs-ray jobs") -> None:
        self.status, self.title = status, title

    def columns(self) -> list[str]:
        jobs = self.status["jobs"]
        return (["id", "job"] + (["tenant"] if any(j.get("tenant") for j in jobs) else [])
                + ["class", "state", "GPUs", "progress", "step s", "predicted finish", "bound", "preempt"]
                + (["skips"] if any(j.get("skips") for j in jobs) else [])
                + (["why waiting"] if any(j.get("waiting") for j in jobs) else [])
                + (["error"] if any(j["state"] in ENDED_WITH_ERROR for j in jobs) else []))

    def cells(self, job: dict) -> dict[str, str]:
        now = self.status["now"]
        done = job["state"] in TERMINAL
        pct = 100.0 * job["steps"] / job["total_steps"] if job["total_steps"] else None
        why = job.get("waiting")
        return {
            "id": str(job["id"]), "job": job["name"], "tenant": job.get("tenant") or "-", "class": job["class"],
            "state": job["state"], "GPUs": gpu_list(job["gpus"]),
            "progress": f"{job['steps']}/{job['total_steps']} {pct:3.0f}%" if pct is not None else f"{job['steps']}/?",
            "step s": "-" if job["step_time"] is None else f"{job['step_time']:.3f}" + ("*" if job["emulated"] else ""),
            "predicted finish": clock(job["finish"]) if done else when(job["predicted_completion"], now),
            "bound": "-" if done else clock(job["bound"]) + (" missed" if past_bound(job) else ""),
            "preempt": str(job["preemptions"]),
            "skips": f"{job['skips']}: {job['skip_reason']}" if job.get("skips") else "",
            "why waiting": why["code"] if why else "",
            "error": last_line(job["error"]) if job["state"] in ENDED_WITH_ERROR else "",
        }

    def table(self, columns: list[str], rows: list[dict[str, str]]) -> Table:
        """The table of ``columns``; ``rows``: every job's :meth:`cells`."""
        table = Table(title=self.title, title_justify="left")
        for col in columns:
            table.add_column(col, justify="right" if col in ("id", "progress", "step s", "preempt") else "left")
        for cells in rows:
            table.add_row(*(cells[col] for col in columns))
        overruns = sum(job.get("emulation_overruns") or 0 for job in self.status["jobs"])
        table.caption = "* emulated device (logical GPUs): each step takes the device model's time"
        if overruns:
            table.caption += (f"; {overruns} step(s) left their run over a step behind its emulated device "
                              "(the machine is too small for what it emulates)")
        return table

    def notes(self, dropped: list[str]) -> list[str]:
        """Lines under the table: every waiting job's reason, and errors and skips whose column was dropped."""
        lines = []
        storage = self.status.get("storage") or {}
        if storage.get("problem"):
            lines.append(f"storage: {storage['problem']}")
        missed = [job for job in self.status["jobs"] if past_bound(job)]
        for job in missed:
            lines.append(f"job {job['id']} is predicted to finish at {clock(job['predicted_completion'])}, past its "
                         f"bound {clock(job['bound'])}")
        if missed:
            lines.append(BOUND_MEANING)
        for job in self.status["jobs"]:
            if job.get("waiting"):
                lines.append(f"job {job['id']} waits: {job['waiting']['code']}: {job['waiting']['text']}")
            if "error" in dropped and job["state"] in ENDED_WITH_ERROR:
                lines.append(f"job {job['id']} {job['state'].replace('_', ' ')}: {last_line(job['error'])}")
            if "skips" in dropped and job.get("skips"):
                lines.append(f"job {job['id']} skipped {job['skips']} time(s): {job['skip_reason']}")
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        columns = self.columns()
        rows = [self.cells(job) for job in self.status["jobs"]]  # once, whatever columns are dropped
        dropped: list[str] = []
        table = self.table(columns, rows)
        natural = options.update_width(1 << 16)  # each column's unwrapped width
        for col in DROPPABLE:
            if Measurement.get(console, natural, table).maximum <= options.max_width:
                break
            if col in columns:
                columns.remove(col)
                dropped.append(col)
                table = self.table(columns, rows)
        yield table
        lines = self.notes(dropped)
        if lines:
            yield Text("\n".join(lines))


def status_table(status: dict, title: str = "pcs-ray jobs") -> StatusTable:
    return StatusTable(status, title)


def explanation_table(why: dict) -> Table:
    """``Placement.explain`` as a table: one row per score (factor, weight, share), rejections below."""
    title = f"job {why['job_id']}: {why['placement']} chose {' '.join(why['gpus'])} ({why['candidates']} candidates)"
    caption = ("rejected: " + ", ".join(f"{r} x{n}" for r, n in sorted(why["rejections"].items()))
               if why["rejections"] else "no candidate rejected")
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for header in ("score", "factor (1 = no penalty)", "weight", "share"):
        table.add_column(header, justify="left" if header == "score" else "right")
    for s in why["scores"]:
        table.add_row(s["plugin"], f"{s['value']:.3f}", f"{s['weight']:g}", f"{100 * s['share']:.0f}%")
    table.add_row("total", f"{why['total']:.3f}", "", "")
    return table
