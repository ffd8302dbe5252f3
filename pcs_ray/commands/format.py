"""How the live commands show times and jobs: the status table and its helpers (used by the demo too)."""

from __future__ import annotations

from datetime import datetime

from rich.table import Table

from pcs_ray.contract import TERMINAL, JobStatus


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


def status_table(status: dict, title: str = "pcs-ray jobs") -> Table:
    """The live table: job, state, GPUs, progress, predicted finish, why a failed job failed, how often
    and why a job's start was skipped (RUSH), and why a queued job waits (its reason code and text)."""
    now = status["now"]
    failed = any(job["state"] == JobStatus.FAILED for job in status["jobs"])
    skipped = any(job.get("skips") for job in status["jobs"])
    waits = any(job.get("waiting") for job in status["jobs"])
    table = Table(title=title, title_justify="left")
    columns = ["id", "job", "class", "state", "GPUs", "progress", "step s", "predicted finish", "bound", "preempt"]
    for col in columns + (["skips"] if skipped else []) + (["why waiting"] if waits else []) + (["error"] if failed else []):
        table.add_column(col, justify="right" if col in ("id", "progress", "step s", "preempt") else "left")
    for job in status["jobs"]:
        done = job["state"] in TERMINAL
        pct = 100.0 * job["steps"] / job["total_steps"] if job["total_steps"] else 0.0
        step = "-" if job["step_time"] is None else f"{job['step_time']:.3f}" + ("*" if job["emulated"] else "")
        finish = clock(job["finish"]) if done else when(job["predicted_completion"], now)
        row = [
            str(job["id"]), job["name"], job["class"], job["state"], ",".join(job["gpus"]) or "-",
            f"{job['steps']}/{job['total_steps']} {pct:3.0f}%", step, finish,
            "-" if done else clock(job["bound"]), str(job["preemptions"]),
        ]
        if skipped:
            row.append(f"{job['skips']}: {job['skip_reason']}" if job.get("skips") else "")
        if waits:
            why = job.get("waiting")
            row.append(f"{why['code']}: {why['text']}" if why else "")
        if failed:
            row.append(last_line(job["error"]) if job["state"] == JobStatus.FAILED else "")
        table.add_row(*row)
    overruns = sum(job.get("emulation_overruns") or 0 for job in status["jobs"])
    table.caption = "* emulated device (logical GPUs): each step takes the device model's time"
    if overruns:
        table.caption += (f"; {overruns} step(s) left their run over a step behind its emulated device "
                          "(the machine is too small for what it emulates)")
    return table


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
