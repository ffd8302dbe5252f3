"""``pcs-ray start | submit | status | predict | cancel | stop | node-resources``: the live system.

All but ``node-resources`` talk to a coordinator on an existing
Ray cluster (``--address``, else ``RAY_ADDRESS``, else the local one), so
they also work as ``ray job submit -- pcs-ray submit job.yaml --wait``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pcs_ray.commands.format import clock, explanation_table, status_table, when
from pcs_ray.contract import JobStatus
from pcs_ray.placement import PLACEMENTS
from pcs_ray.policies import policy_names

ADDRESS = typer.Option("--address", help="Ray cluster address (default: $RAY_ADDRESS, else the cluster `pcs-ray up --local` started with the default --state-dir, else the running local cluster).")
JSON_OUT = typer.Option("--json", help="Print JSON instead of a table.")


def cluster_address(address: str | None) -> str | None:
    """``--address``, else ``$RAY_ADDRESS``, else the cluster `pcs-ray up --local` recorded in ~/.pcs-ray, else
    ``None`` (Ray's own lookup of a local cluster)."""
    if address or os.environ.get("RAY_ADDRESS"):
        return address
    try:
        return json.loads((Path("~/.pcs-ray/cluster.json").expanduser()).read_text())["address"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def coordinator_client(address: str | None):
    from pcs_ray.client import Client

    return Client(cluster_address(address))


def start_cmd(
    address: Annotated[str | None, ADDRESS] = None,
    cluster_spec: Annotated[Path | None, typer.Option("--cluster-spec", help="Cluster spec (YAML/JSON): GPU scores, UUIDs, topology. Default: the per-GPU resources registered in Ray.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help=f"Scheduling policy: {', '.join(policy_names())} (pcs with --pcs-config). Default: the WFQ configuration `pcs-ray solve --set` wrote, else pcs-bal.", show_default=False)] = None,
    pcs_config: Annotated[Path | None, typer.Option("--pcs-config", help="WFQ configuration JSON for --policy pcs (e.g. from `pcs-ray solve --out`).")] = None,
    placement: Annotated[str, typer.Option("--placement", help=f"Placement: {', '.join(PLACEMENTS)} (`pcs-ray simulate --help` says what each does).")] = "packed-sticky",
    state_dir: Annotated[Path, typer.Option("--state-dir", help="Journal, checkpoints and job history (must be reachable from every node for checkpoints).")] = Path("~/.pcs-ray"),
    grace: Annotated[float, typer.Option("--grace", help="Seconds a runner gets to checkpoint and stop before it is killed.")] = 30.0,
) -> None:
    """Start the coordinator on a Ray cluster (or report the one already running).

    The coordinator is a detached, named Ray actor (namespace `pcs-ray`): it
    outlives this command, is restarted by Ray if it dies, and rebuilds its
    state from the journal in --state-dir.

    Without --policy or --pcs-config it runs the WFQ configuration that
    `pcs-ray solve --set` chose ($PCS_RAY_WFQ_CONFIG, default
    ~/.pcs-ray/wfq_config.json), else pcs-bal. A restart keeps a policy set
    with `pcs-ray config set` unless this command names a different one.
    """
    from pcs_ray.coordinator.actor import NAMESPACE

    config, info, running = launch_coordinator(address, cluster_spec, policy, pcs_config, placement, state_dir, grace)
    print(f"coordinator running (namespace {NAMESPACE}): {info['jobs']} job(s) in its journal, "
          f"policy {running['policy']['policy']} (see `pcs-ray config show`), state in {config.state_dir}")


def launch_coordinator(address, cluster_spec, policy, pcs_config, placement, state_dir, grace, pin_node=None):
    """Connect, read the cluster from Ray, and start the coordinator (or find the running one).

    ``pin_node`` (a Ray node id) places it on that node instead of this process's (``pcs-ray up``: the head).
    Returns the config, its ``ping`` and the configuration in force; progress goes to stderr.
    """
    import ray

    from pcs_ray.client import connect
    from pcs_ray.cluster import load_cluster_spec
    from pcs_ray.coordinator.actor import NAMESPACE, start_coordinator
    from pcs_ray.coordinator.config import CoordinatorConfig, choose_policy, cluster_dict
    from pcs_ray.discovery import cluster_from_ray_nodes
    from pcs_ray.placement import create_placement

    choice = choose_policy(policy, pcs_config)  # fail here, not inside the actor
    declared = load_cluster_spec(cluster_spec) if cluster_spec is not None else None
    if declared is not None:
        create_placement(placement, declared)
    connect(cluster_address(address), NAMESPACE)
    cluster = cluster_from_ray_nodes(ray.nodes(), declared)
    config = CoordinatorConfig(
        cluster=cluster_dict(cluster), state_dir=str(Path(state_dir).expanduser().resolve()), policy=choice.policy,
        wfq=choice.wfq, placement=placement, grace_s=grace,
    )
    print(f"starting coordinator: {cluster.num_gpus} GPUs on {len(cluster.nodes)} node(s), "
          f"policy {choice.policy} ({choice.source})", file=sys.stderr)
    actor = start_coordinator(config, pin_here=pin_node is None) if pin_node is None else _start_on(config, pin_node)
    info, running = ray.get([actor.ping.remote(), actor.config.remote()])  # one already running keeps its own
    return config, info, running


def _start_on(config, node_id: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pcs_ray.coordinator.actor import start_coordinator

    return start_coordinator(config, pin_here=False, strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


def submit_cmd(
    job_file: Annotated[Path, typer.Argument(help="Job spec (YAML): workload, steps, gpus, class, params ...")],
    address: Annotated[str | None, ADDRESS] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Block until the job ends; print predicted vs actual completion.")] = False,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Submit a training job; prints its id, predicted completion and worst-case bound at once."""
    from pcs_ray.jobfile import load_job

    load_job(job_file)  # a bad file fails before connecting
    client = coordinator_client(address)
    handle = client.submit(job_file)
    now = time.time()
    reply = {"id": handle.id, "predicted_completion": handle.predicted_completion, "bound": handle.bound}
    if as_json and not wait:
        print(json.dumps(reply))
    elif not as_json:
        print(f"job {handle.id} submitted: predicted completion {when(handle.predicted_completion, now)}, "
              f"bound {clock(handle.bound)}")
    if wait:
        final = client.wait(handle.id)
        if as_json:
            print(json.dumps({**reply, "final": final}))
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
    watch: Annotated[float, typer.Option("--watch", help="Refresh every N seconds until interrupted (0: once).")] = 0.0,
    as_json: Annotated[bool, JSON_OUT] = False,
    explain: Annotated[int | None, typer.Option(
        "--explain", metavar="ID", help="Why placement gave job ID its GPUs: each score's factor and share, "
        "and what filters rejected.", show_default=False)] = None,
) -> None:
    """The live table: every job, its state, GPUs, progress and predicted finish (and why a failed job failed)."""
    client = coordinator_client(address)
    if explain is not None:
        why = client.predict(explain)["placement"]
        if as_json:
            print(json.dumps(why))
        elif why is None:
            print(f"job {explain} has not been placed")
        else:
            Console().print(explanation_table(why))
        return
    if as_json:
        print(json.dumps(client.status()))
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
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """A job's current predicted completion, its p10-p90 range and worst-case bound (refreshed on every
    cluster event), and which of the forecast's inputs are still estimates rather than measurements."""
    reply = coordinator_client(address).predict(job_id)
    if as_json:
        print(json.dumps(reply))
    else:
        line = (f"job {job_id} ({reply['state']}): predicted completion {when(reply['predicted_completion'], time.time())}, "
                f"bound {clock(reply['bound'])}")
        if reply.get("range"):
            line += f", p10-p90 {clock(reply['range'][0])} to {clock(reply['range'][1])}"
        if reply.get("estimates"):
            line += f" (still estimated: {', '.join(reply['estimates'])})"
        print(line)


def cancel_cmd(
    job_id: Annotated[int, typer.Argument(help="Job id to cancel.")],
    address: Annotated[str | None, ADDRESS] = None,
) -> None:
    """Cancel a job (a running one is stopped at its next step boundary)."""
    view = coordinator_client(address).cancel(job_id)
    print(f"job {job_id}: {view['state']}" + (" (cancel requested)" if JobStatus(view["state"]).holds_gpus else ""))


def stop_cmd(
    address: Annotated[str | None, ADDRESS] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for runners to checkpoint.")] = 60.0,
) -> None:
    """Checkpoint every running job and stop the coordinator; `pcs-ray start` resumes from the journal."""
    import ray

    from pcs_ray.coordinator.actor import NAMESPACE, get_coordinator
    from pcs_ray.client import connect

    connect(cluster_address(address), NAMESPACE)
    actor = get_coordinator()
    killed = ray.get(actor.drain.remote(timeout))
    ray.kill(actor, no_restart=True)
    print("coordinator stopped" + (f" ({killed} runner(s) killed after {timeout:.0f} s)" if killed else ""))


def node_resources_cmd(
    node_name: Annotated[str | None, typer.Option("--node-name", help="Name of this node in pcs-ray (default: the host name).")] = None,
    cluster_spec: Annotated[Path | None, typer.Option("--cluster-spec", help="Declared spec for nodes without NVML (logical GPUs).")] = None,
    head: Annotated[bool, typer.Option("--head", help="Prefix --head (for the head node's `ray start`).")] = False,
    address: Annotated[str | None, typer.Option("--address", help="Prefix --address=ADDR (for a worker's `ray start`).")] = None,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Print the `ray start` arguments that register this node's GPUs with pcs-ray.

    One custom resource per GPU (`<node>_gpu<i>`: 1) so jobs can be pinned to
    exact GPUs, plus labels. GPUs come from NVML (UUIDs, NVLink/PCIe matrix,
    power, clocks) or, without NVML, from the node of that name in
    --cluster-spec. The output is shell-quoted: `eval ray start $(pcs-ray node-resources --head)`.
    """
    from pcs_ray.discovery import format_args, local_node, ray_start_args

    node = local_node(node_name, cluster_spec)
    args = ray_start_args(node, head=head, address=address)
    if as_json:
        print(json.dumps({"args": args, "node": node.to_dict()}))
    else:
        print(format_args(args))


def register(app: typer.Typer) -> None:
    app.command("start")(start_cmd)
    app.command("submit")(submit_cmd)
    app.command("status")(status_cmd)
    app.command("predict")(predict_cmd)
    app.command("cancel")(cancel_cmd)
    app.command("stop")(stop_cmd)
    app.command("node-resources")(node_resources_cmd)
