"""``pcs-ray start | stop | node-resources``: start and stop the coordinator, and register a node's GPUs.

Their options list the placements and policies, so this module imports the
scheduler's packages; the calls users poll live in :mod:`.live`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pcs_ray.api.advert import DEFAULT_API_PORT
from pcs_ray.commands.limits import LIMIT, parse_limits
from pcs_ray.commands.target import ADDRESS, API_HOST, API_PORT, JSON_OUT, STORAGE, cluster_address, dashboard_line
from pcs_ray.placement import PLACEMENTS
from pcs_ray.policies import policy_names
from pcs_ray.commands.views import print_json


def start_cmd(
    address: Annotated[str | None, ADDRESS] = None,
    cluster_spec: Annotated[Path | None, typer.Option("--cluster-spec", help="Cluster spec (YAML/JSON): GPU scores, UUIDs, topology. Default: the per-GPU resources registered in Ray.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help=f"Scheduling policy: {', '.join(policy_names())} (pcs with --pcs-config). Default: the WFQ configuration `pcs-ray solve --set` wrote, else pcs-bal.", show_default=False)] = None,
    pcs_config: Annotated[Path | None, typer.Option("--pcs-config", help="WFQ configuration JSON for --policy pcs (e.g. from `pcs-ray solve --out`).")] = None,
    placement: Annotated[str, typer.Option("--placement", help=f"Placement: {', '.join(PLACEMENTS)} (`pcs-ray simulate --help` says what each does).")] = "packed-sticky",
    state_dir: Annotated[Path, typer.Option("--state-dir", help="Journal, checkpoints and job history (must be reachable from every node for checkpoints).")] = Path("~/.pcs-ray"),
    grace: Annotated[float, typer.Option("--grace", help="Seconds a runner gets to checkpoint and stop before it is killed.")] = 30.0,
    api_host: Annotated[str, API_HOST] = "127.0.0.1",
    api_port: Annotated[int, API_PORT] = DEFAULT_API_PORT,
    limit: Annotated[list[str] | None, LIMIT] = None,
    storage: Annotated[str | None, STORAGE] = None,
) -> None:
    """Start the coordinator on a Ray cluster (or report the one already running).

    The coordinator is a detached, named Ray actor (namespace `pcs-ray`): it
    outlives this command, is restarted by Ray if it dies, and rebuilds its
    state from the journal in --state-dir.

    Without --policy or --pcs-config it runs the WFQ configuration that
    `pcs-ray solve --set` chose ($PCS_RAY_WFQ_CONFIG, default
    ~/.pcs-ray/wfq_config.json), else pcs-bal. A restart keeps a policy set
    with `pcs-ray config set` unless this command names a different one.

    With --storage, a coordinator started on any machine with an empty
    --state-dir rebuilds its journal from the storage and resumes every job
    from its checkpoints there (a head that can be replaced).
    """
    from pcs_ray.api.actor_ref import NAMESPACE

    config, info, running = launch_coordinator(address, cluster_spec, policy, pcs_config, placement, state_dir, grace,
                                               api_host=api_host, api_port=api_port, limits=parse_limits(limit),
                                               storage=storage)
    print(f"coordinator running (namespace {NAMESPACE}): {info['jobs']} job(s) in its journal, "
          f"policy {running['policy']['policy']} (see `pcs-ray config show`), state in {config.state_dir}")
    print(f"dashboard: {dashboard_line(info.get('api'))}")


def launch_coordinator(address, cluster_spec, policy, pcs_config, placement, state_dir, grace, pin_node=None,
                       api_host: str = "127.0.0.1", api_port: int = DEFAULT_API_PORT, limits: dict | None = None,
                       storage: str | None = None):
    """Connect, read the cluster from Ray, and start the coordinator (or find the running one).
    ``limits``: its guards (``CoordinatorConfig`` fields, ``pcs_ray.commands.limits``), checked before it starts.
    ``storage``: the cluster's storage URI, checked (written, read back) before anything starts.

    ``pin_node`` (a Ray node id) places it on that node instead of this process's (``pcs-ray up``: the head).
    Returns the config, its ``ping`` and the configuration in force; progress goes to stderr.
    """
    import ray

    from pcs_ray.client import connect
    from pcs_ray.cluster import load_cluster_spec
    from pcs_ray.api.actor_ref import NAMESPACE
    from pcs_ray.coordinator.actor import start_coordinator
    from pcs_ray.coordinator.config import CoordinatorConfig, choose_policy, cluster_dict
    from pcs_ray.cluster.discovery import cluster_from_ray_nodes
    from pcs_ray.placement import create_placement

    choice = choose_policy(policy, pcs_config)  # fail here, not inside the actor
    if storage:
        from pcs_ray.storage import open_storage

        open_storage(storage, retry_s=STORAGE_CHECK_S).check()
        print(f"storage {storage}: reachable", file=sys.stderr)
    declared = load_cluster_spec(cluster_spec) if cluster_spec is not None else None
    if declared is not None:
        create_placement(placement, declared)
    connect(cluster_address(address), NAMESPACE)
    cluster = cluster_from_ray_nodes(ray.nodes(), declared)
    config = CoordinatorConfig(
        cluster=cluster_dict(cluster), state_dir=str(Path(state_dir).expanduser().resolve()), policy=choice.policy,
        wfq=choice.wfq, placement=placement, grace_s=grace, api_host=api_host, api_port=api_port, **(limits or {}),
        storage=storage or None,
    )
    config.limits(), config.retention()  # a bad limit fails here, not inside the actor
    print(f"starting coordinator: {cluster.num_gpus} GPUs on {len(cluster.nodes)} node(s), "
          f"policy {choice.policy} ({choice.source})", file=sys.stderr)
    actor = start_coordinator(config, pin_here=pin_node is None) if pin_node is None else _start_on(config, pin_node)
    info, running = ray.get([actor.ping.remote(), actor.config.remote()])  # one already running keeps its own
    return config, info, running


#: Seconds `start` retries a storage that does not answer before it gives up with one line.
STORAGE_CHECK_S = 15.0


def _start_on(config, node_id: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pcs_ray.coordinator.actor import start_coordinator

    return start_coordinator(config, pin_here=False, strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


def stop_cmd(
    address: Annotated[str | None, ADDRESS] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for runners to checkpoint.")] = 60.0,
) -> None:
    """Checkpoint every running job and stop the coordinator; `pcs-ray start` resumes from the journal.

    Once a tenants file names operators, only they may (`pcs-ray tenants --help`)."""
    import ray

    from pcs_ray.api.actor_ref import NAMESPACE
    from pcs_ray.client import actor_call, connect, get_coordinator
    from pcs_ray.tenants.identity import Caller

    connect(cluster_address(address), NAMESPACE)
    actor = get_coordinator()
    killed = actor_call(actor, "drain", timeout, Caller.from_env().to_wire())
    ray.get(actor.close_api.remote())  # the advert goes too: clients know at once that it stopped
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
    NVIDIA GPUs are checked first as `pcs-ray doctor` checks them; each failed
    check is a warning line on stderr.
    """
    from pcs_ray.cluster.discovery import format_args, local_node, ray_start_args
    from pcs_ray.commands.doctor import warn_failed_checks

    node = local_node(node_name, cluster_spec)
    warn_failed_checks(node)
    args = ray_start_args(node, head=head, address=address)
    if as_json:
        print_json({"args": args, "node": node.to_dict()})
    else:
        print(format_args(args))
