"""``pcs-ray logs``: what a user run's ranks printed (stdout and stderr), now or as it comes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from pcs_ray.commands.target import ADDRESS, CLIENT_STATE_DIR, coordinator_client
from pcs_ray.contract import TERMINAL

FOLLOW_POLL_S = 1.0


def _print(reply: dict, rank: int | None, many: bool) -> None:
    for r, part in reply["ranks"].items():
        if rank is not None and int(r) != rank:
            continue
        if part.get("skipped"):
            print(f"[rank {r}] ... {part['skipped']} earlier bytes not shown (--attempt and --follow show more)")
        text = part["text"]
        if not text:
            continue
        lines = text.splitlines(keepends=True)
        sys.stdout.write("".join(f"[rank {r}] {line}" for line in lines) if many else text)
    sys.stdout.flush()


def logs_cmd(
    job_id: Annotated[int, typer.Argument(help="Job id (a job running your own code).")],
    attempt: Annotated[int | None, typer.Option("--attempt", help="Which run of the job (default: the newest).")] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="Only this rank's output.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as the run writes, until the job ends.")] = False,
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
) -> None:
    """Print what a job's training function wrote to stdout and stderr, rank by rank.

    Each run (attempt) of the job has its own logs, kept under the coordinator's state dir
    (`logs/<job>/attempt-<k>/rank-<r>.log`). With several ranks each line is prefixed `[rank r]`.
    """
    client = coordinator_client(address, state_dir)
    reply = client.logs(job_id, attempt)
    if reply["attempt"] is None:
        job = client.job(job_id)
        if not follow:
            print(f"job {job_id} ({job['state']}) has no logs yet" + (
                "" if job["workload"].startswith("user:") else ": built-in workloads log to Ray's worker logs"))
            return
    many = len(reply["ranks"]) > 1
    _print(reply, rank, many)
    if not follow:
        return
    offsets = {r: p["offset"] for r, p in reply["ranks"].items()}
    current = reply["attempt"]
    while True:
        time.sleep(FOLLOW_POLL_S)
        latest = client.logs(job_id, None, None)
        if latest["attempt"] is not None and latest["attempt"] != current:  # the job moved to a new run
            current, offsets = latest["attempt"], {}
            print(f"--- attempt {current} ---", flush=True)
        if current is None:
            if client.job(job_id)["state"] in TERMINAL:
                return
            continue
        reply = client.logs(job_id, current, offsets)
        _print(reply, rank, len(reply["ranks"]) > 1)
        offsets = {r: p["offset"] for r, p in reply["ranks"].items()}
        if client.job(job_id)["state"] in TERMINAL and all(p["offset"] >= p["size"] for p in reply["ranks"].values()):
            return


def register(app: typer.Typer) -> None:
    app.command("logs")(logs_cmd)
