"""``pcs-ray up --local | down``: a real multi-node Ray cluster on this machine, with the coordinator on it.

The launcher is :mod:`pcs_ray.commands.local_cluster`; this module is its
command line. ``down`` stops the processes ``up`` recorded, by PID, and
nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pcs_ray.api.advert import DEFAULT_API_PORT
from pcs_ray.commands.limits import LIMIT, parse_limits
from pcs_ray.commands.target import API_HOST, API_PORT, JSON_OUT, STORAGE, dashboard_line
from pcs_ray.placement import PLACEMENTS
from pcs_ray.commands.views import print_json

STATE_DIR = typer.Option("--state-dir", help="Where the cluster's state file, logs, the coordinator's journal and "
                         "checkpoints live.")


def up_cmd(
    local: Annotated[bool, typer.Option("--local", help="Start every node on this machine (the only mode so far; "
                                        "for real machines see cloudlab/README.md).")] = False,
    nodes: Annotated[int | None, typer.Option("--nodes", min=1, max=64, help="Nodes: a head and N-1 workers "
                                              "[default: 2, or the nodes of --cluster-spec].", show_default=False)] = None,
    gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node", min=0, max=64,
                                                      help="Logical GPUs per node [default: 4].", show_default=False)] = None,
    cluster_spec: Annotated[Path | None, typer.Option("--cluster-spec", help="A cluster spec whose nodes to start "
                                                      "(GPU scores, topology); instead of --gpus-per-node.")] = None,
    state_dir: Annotated[Path, STATE_DIR] = Path("~/.pcs-ray"),
    placement: Annotated[str, typer.Option("--placement", help=f"Placement: {', '.join(PLACEMENTS)}.")] = "packed-sticky",
    policy: Annotated[str | None, typer.Option("--policy", help="Scheduling policy (as `pcs-ray start --policy`).",
                                               show_default=False)] = None,
    cpus_per_node: Annotated[int | None, typer.Option("--cpus-per-node", min=1, max=1024, help="Ray CPUs per node "
                                                      "[default: its GPUs, at least 1].", show_default=False)] = None,
    api_host: Annotated[str, API_HOST] = "127.0.0.1",
    api_port: Annotated[int, API_PORT] = DEFAULT_API_PORT,
    limit: Annotated[list[str] | None, LIMIT] = None,
    storage: Annotated[str | None, STORAGE] = None,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Start a head and N-1 worker Ray nodes on this machine, token authentication on, and the coordinator on the head.

    Each node is its own `ray start` (own ports and temp dir, its per-GPU
    resources as `pcs-ray node-resources` prints them). On a machine with
    NVIDIA GPUs, one node registers them through NVML. Every process started is
    recorded per node in STATE_DIR/cluster.json; `pcs-ray down` stops exactly
    those. The token is the one Ray finds ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH,
    ~/.ray/auth_token), or a new one written to ~/.ray/auth_token.
    """
    from pcs_ray.commands import local_cluster as lc
    from pcs_ray.commands.start import launch_coordinator
    from pcs_ray.cluster.discovery import nvml_inventory

    limits = parse_limits(limit)
    if not local:
        raise lc.LocalClusterError("only --local is supported: real machines join with `pcs-ray node-resources` "
                                   "(cloudlab/README.md)")
    if cluster_spec is not None and gpus_per_node is not None:
        raise lc.LocalClusterError("give --gpus-per-node or --cluster-spec, not both")
    state = lc.private_dir(state_dir.expanduser().resolve())
    if (state / lc.STATE_FILE).exists():
        raise lc.LocalClusterError(f"a local cluster is already recorded in {state}; `pcs-ray down --state-dir {state}` first")
    spec = None
    real = nvml_inventory()
    if cluster_spec is not None:
        spec = cluster_spec.expanduser().resolve()
        names = lc.node_names(spec)
        if nodes is not None and nodes != len(names):
            raise lc.LocalClusterError(f"--nodes {nodes} but {cluster_spec} has {len(names)} node(s)")
    elif real is not None:
        if (nodes or 1) != 1:
            raise lc.LocalClusterError(f"this machine's {len(real.gpus)} NVIDIA GPU(s) form one node; use --nodes 1")
        names = [real.name]
    else:
        spec = lc.write_spec(state, nodes or 2, 4 if gpus_per_node is None else gpus_per_node)
        names = lc.node_names(spec)
    print(f"starting {len(names)} Ray node(s) on this machine: {', '.join(names)}", file=sys.stderr)
    record = lc.start_nodes(state, spec, names, cpus_per_node)
    import ray

    try:
        from pcs_ray.client import connect

        connect(record.address)
        head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
        _, info, _ = launch_coordinator(record.address, spec, policy, None, placement, state, 30.0, pin_node=head,
                                        api_host=api_host, api_port=api_port, limits=limits, storage=storage)
        ray.shutdown()
        record.api = info.get("api") or ""
        lc.save(record, state / lc.STATE_FILE)
    except BaseException:
        if ray.is_initialized():  # disconnect first: a driver whose GCS goes away aborts the process after 60 s
            ray.shutdown()
        lc.down(state)
        raise
    if as_json:
        print_json(record.summary())
        return
    print(f"Ray cluster up: {len(record.nodes)} node(s), {sum(n.gpus for n in record.nodes)} GPU(s), coordinator on "
          f"{record.nodes[0].name}\n  address    {record.address}\n  api        {record.api or 'off (no token found)'}\n"
          f"  dashboard  {dashboard_line(record.api)}\n  ray        {record.dashboard} (Ray's own dashboard)\n"
          f"  state      {state}/{lc.STATE_FILE} (pcs-ray down --state-dir {state})\n  clients    {lc.client_hint(record)}")


def down_cmd(
    state_dir: Annotated[Path, STATE_DIR] = Path("~/.pcs-ray"),
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Stop the local cluster `pcs-ray up --local` started: exactly the processes it recorded, by PID."""
    from pcs_ray.commands import local_cluster as lc

    result = lc.down(state_dir.expanduser().resolve())
    if as_json:
        print_json(result)
        return
    count = sum(len(p) for p in result["stopped"].values())
    print(f"stopped {count} process(es) of {len(result['stopped'])} node(s)" +
          (f"; still alive: {result['left']}" if result["left"] else ""))
    if result["left"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("up")(up_cmd)
    app.command("down")(down_cmd)
