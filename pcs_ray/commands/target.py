"""What the live commands share: the cluster they talk to (``--address``) and their common options."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

ADDRESS = typer.Option("--address", help="Ray cluster address (default: $RAY_ADDRESS, else the cluster `pcs-ray up --local` started with the default --state-dir, else the running local cluster).")
JSON_OUT = typer.Option("--json", help="Print JSON instead of a table.")
API_HOST = typer.Option("--api-host", help="Interface the coordinator's HTTP API listens on. The default, loopback, "
                        "serves this node only; another (0.0.0.0: all) lets any machine that can reach it and holds the "
                        "cluster's token submit, cancel and reconfigure.")
API_PORT = typer.Option("--api-port", min=0, max=65535, help="Port of the coordinator's HTTP API (0: the port it had "
                        "before a restart when free, else any; the URL is advertised either way).")


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
    """A client of the coordinator at ``address`` that says on stderr when it waits for an API that does not answer."""
    from pcs_ray.client import Client

    return Client(cluster_address(address), on_wait=lambda line: print(line, file=sys.stderr, flush=True))


def dashboard_line(api: str | None) -> str:
    """Where the coordinator's dashboard is (its API's address) and how to sign in, or why there is none."""
    if not api:
        return "off (the coordinator serves no HTTP API: no token found)"
    return f"{api.rstrip('/')}/dashboard/ (sign in with the cluster's token, or `pcs-ray dashboard` for a one-time link)"
