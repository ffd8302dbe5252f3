"""``pcs-ray start | submit | status | predict | cancel | stop | node-resources``: the live system.

All but ``node-resources`` talk to a coordinator on an existing
Ray cluster (``--address``, else ``RAY_ADDRESS``, else the local one), so
they also work as ``ray job submit -- pcs-ray submit job.yaml --wait``.
The calls a user polls (submit, status, predict, cancel) are here and import
no scheduler code, so they start fast; ``start``, ``stop`` and
``node-resources`` are in :mod:`.start`, imported when the whole app is built.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pcs_ray.commands.format import clock, explanation_table, status_table, when
from pcs_ray.commands.target import (ADDRESS, API_HOST, CLIENT_STATE_DIR, JSON_OUT, cluster_address,
                                     coordinator_client)
from pcs_ray.contract import JobStatus
from pcs_ray.commands.views import print_json

__all__ = ["ADDRESS", "API_HOST", "JSON_OUT", "cluster_address", "coordinator_client"]  # shared with the other command groups


def submit_cmd(
    job_file: Annotated[Path, typer.Argument(help="Job spec (YAML): workload, steps, gpus, class, params ...")],
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Block until the job ends; print predicted vs actual completion.")] = False,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Submit a training job; prints its id, predicted completion and worst-case bound at once."""
    from pcs_ray.jobs.jobfile import load_job

    load_job(job_file)  # a bad file fails before connecting
    client = coordinator_client(address, state_dir)
    handle = client.submit(job_file)
    now = time.time()
    reply = {"id": handle.id, "predicted_completion": handle.predicted_completion, "bound": handle.bound}
    if as_json and not wait:
        print_json(reply)
    elif not as_json:
        print(f"job {handle.id} submitted: predicted completion {when(handle.predicted_completion, now)}, "
              f"bound {clock(handle.bound)}")
    if wait:
        final = client.wait(handle.id)
        if as_json:
            print_json({**reply, "final": final})
        else:
            err = ""
            if final["finish"] and handle.predicted_completion:
                jct = final["finish"] - final["submit"]
                pred = handle.predicted_completion - final["submit"]
                err = f", JCT {jct:.1f} s vs predicted {pred:.1f} s ({100 * abs(jct - pred) / pred:.0f}% off)"
            print(f"job {handle.id} {final['state']} at {clock(final['finish'])}{err}; "
                  f"{final['preemptions']} preemption(s)")
        if final["state"] != JobStatus.FINISHED:
            raise typer.Exit(1)


def status_cmd(
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
    watch: Annotated[float, typer.Option("--watch", help="Refresh every N seconds until interrupted (0: once).")] = 0.0,
    as_json: Annotated[bool, JSON_OUT] = False,
    explain: Annotated[int | None, typer.Option(
        "--explain", metavar="ID", help="Why placement gave job ID its GPUs: each score's factor and share, "
        "and what filters rejected.", show_default=False)] = None,
) -> None:
    """The live table: every job, its state, GPUs, progress and predicted finish (and why a failed job failed)."""
    client = coordinator_client(address, state_dir)
    if explain is not None:
        why = client.predict(explain)["placement"]
        if as_json:
            print_json(why)
        elif why is None:
            print(f"job {explain} has not been placed")
        else:
            Console().print(explanation_table(why))
        return
    if as_json:
        print_json(client.status())
        return
    console = Console()
    if not watch:
        console.print(status_table(client.status()))
        return
    from rich.live import Live

    with Live(status_table(client.status()), console=console, refresh_per_second=2) as live:
        while True:
            time.sleep(watch)
            live.update(status_table(client.status()))


def predict_cmd(
    job_id: Annotated[int, typer.Argument(help="Job id from `pcs-ray submit`.")],
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """A job's current predicted completion, its p10-p90 range and worst-case bound (refreshed on every
    cluster event), and which of the forecast's inputs are still estimates rather than measurements."""
    reply = coordinator_client(address, state_dir).predict(job_id)
    if as_json:
        print_json(reply)
    else:
        line = (f"job {job_id} ({reply['state']}): predicted completion {when(reply['predicted_completion'], time.time())}, "
                f"bound {clock(reply['bound'])}")
        if reply.get("range"):
            line += f", p10-p90 {clock(reply['range'][0])} to {clock(reply['range'][1])}"
        if reply.get("estimates"):
            sources = reply.get("estimated_from") or {}
            named = [f"{name} ({sources[name]})" if name in sources else name for name in reply["estimates"]]
            line += f" (still estimated: {', '.join(named)})"
        if reply.get("waiting"):
            line += f"; waiting: {reply['waiting']['code']}: {reply['waiting']['text']}"
        if reply.get("basis") == "branch":
            line += f"; at submission: branched from a refresh {reply['refresh_age_s']:.1f} s old"
        elif reply.get("basis") == "fresh":
            line += "; at submission: a fresh play"
        if reply.get("note"):
            line += f"; {reply['note']}"
        print(line)


def cancel_cmd(
    job_id: Annotated[int, typer.Argument(help="Job id to cancel.")],
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
) -> None:
    """Cancel a job (a running one is stopped at its next step boundary)."""
    view = coordinator_client(address, state_dir).cancel(job_id)
    print(f"job {job_id}: {view['state']}" + (" (cancel requested)" if JobStatus(view["state"]).holds_gpus else ""))


CLIENT_COMMANDS = {"submit": submit_cmd, "status": status_cmd, "predict": predict_cmd, "cancel": cancel_cmd}


def register_calls(app: typer.Typer) -> None:
    """Only the calls to a running coordinator (``pcs_ray.cli`` builds an app of them for a fast start)."""
    for name, command in CLIENT_COMMANDS.items():
        app.command(name)(command)


def register(app: typer.Typer) -> None:
    from pcs_ray.commands import start

    app.command("start")(start.start_cmd)
    for name, command in CLIENT_COMMANDS.items():
        app.command(name)(command)
    app.command("stop")(start.stop_cmd)
    app.command("node-resources")(start.node_resources_cmd)


def register_group(app: typer.Typer, name: str, help_text: str, **commands) -> None:
    """A command group (``pcs-ray config``, ``pcs-ray tenants``) whose bare name prints its help, not an error."""
    group = typer.Typer(name=name, help=help_text, rich_markup_mode="markdown")

    @group.callback(invoke_without_command=True)
    def bare(ctx: typer.Context) -> None:
        if ctx.invoked_subcommand is None:
            print(ctx.get_help())
            raise typer.Exit(0)

    for verb, command in commands.items():
        group.command(verb)(command)
    app.add_typer(group, name=name)
