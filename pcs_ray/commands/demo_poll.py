"""Driving a live run (the demo, ``pcs-ray replay``): submissions on schedule and a status poll every half second.

The poll keeps each job's prediction history with its reported steps (for the
errors at mid-life and at a tenth of its steps) and,
with ``live``, redraws the status table on stderr.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live

from pcs_ray.client import Client
from pcs_ray.commands.format import status_table
from pcs_ray.contract import TERMINAL

ENDED = tuple(sorted(TERMINAL))


def follow(client: Client, arrivals: list[tuple[float, dict]], began: float, deadline_s: float, live: bool,
           err: Console, title: str = "pcs-ray demo") -> tuple[dict, dict[int, dict]]:
    """Submit ``arrivals`` on schedule and poll until all have ended or the deadline passes.

    Returns the last status (only the demo's jobs) and, per job id, its spec,
    prediction and bound at submission and its prediction history.
    """
    submitted: dict[int, dict] = {}
    t0 = time.time()
    pending = list(arrivals)

    def step() -> dict:
        while pending and time.time() - t0 >= pending[0][0]:
            _, spec = pending.pop(0)
            handle = client.submit(spec)
            submitted[handle.id] = {"spec": spec, "predicted": handle.predicted_completion, "bound": handle.bound,
                                    "history": []}
        status = client.status()
        for j in status["jobs"]:
            if j["id"] in submitted and j["state"] not in ENDED and j["predicted_completion"] is not None:
                submitted[j["id"]]["history"].append((status["now"], j["predicted_completion"], j["steps"]))
        return status

    status = step()
    with Live(status_table(status, f"{title} (live)"), console=err, refresh_per_second=2,
              transient=False, auto_refresh=live) as view:
        while True:
            status = step()
            if live:
                view.update(status_table(status, f"{title} (live, {time.time() - t0:.0f} s)"))
            done = [j for j in status["jobs"] if j["state"] in ENDED]
            if not pending and len(done) == len(status["jobs"]):
                break
            if time.time() - began > deadline_s:
                err.print(f"[yellow]{title}: deadline of {deadline_s:.0f} s reached; reporting what finished[/]")
                break
            time.sleep(0.5)
    return {**status, "jobs": [j for j in status["jobs"] if j["id"] in submitted]}, submitted
