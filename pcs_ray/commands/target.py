"""What the live commands share: the cluster they talk to (``--address``) and their common options."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

from pcs_ray.api.advert import ADVERT, well_known_ports

_PORTS = f"{well_known_ports()[0]}-{well_known_ports()[-1]}"

ADDRESS = typer.Option("--address", help="Ray cluster address (default: $RAY_ADDRESS, else the cluster `pcs-ray up "
                       "--local` started with --state-dir, else the running local cluster). Given only this, a command "
                       f"finds the coordinator's API on the cluster's head (ports {_PORTS}).")
CLIENT_STATE_DIR = typer.Option("--state-dir", help="The coordinator's state folder (as given to `up` or `start`), "
                                "whose advert says where its API listens and whose cluster.json (`up`'s) gives the "
                                "address [default: ~/.pcs-ray].", show_default=False)
JSON_OUT = typer.Option("--json", help="Print JSON instead of a table.")
STORAGE = typer.Option(
    "--storage", envvar="PCS_RAY_STORAGE", show_default=False,
    help="Where checkpoints, logs and the journal's mirror live, so that no machine's disk is needed after it is "
         "gone: s3://BUCKET/PREFIX (endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
         "AWS_SECRET_ACCESS_KEY, AWS_REGION on every node), gs://..., file:///mnt/shared/... "
         "[default: none: all of it under --state-dir, which every node must then share]")
API_HOST = typer.Option("--api-host", help="Interface the coordinator's HTTP API listens on. The default, loopback, "
                        "serves this node only; another (0.0.0.0: all) lets any machine that can reach it and holds the "
                        "cluster's token submit, cancel and reconfigure.")
API_PORT = typer.Option("--api-port", min=0, max=65535, help="First port the coordinator's HTTP API tries: it takes the "
                        "first free one of P to P+9 (a restart keeps the one it had), else any free one (the URL is "
                        f"advertised in the state folder either way; clients given only the cluster's address look on "
                        f"{_PORTS}). 0: any free port.")


def cluster_address(address: str | None, state_dir: Path | None = None) -> str | None:
    """``--address``, else ``$RAY_ADDRESS``, else the cluster `pcs-ray up --local` recorded in ``state_dir``
    (default ~/.pcs-ray), else ``None`` (Ray's own lookup of a local cluster)."""
    if address or os.environ.get("RAY_ADDRESS"):
        return address
    try:
        return json.loads((Path(state_dir or "~/.pcs-ray").expanduser() / "cluster.json").read_text())["address"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def coordinator_client(address: str | None, state_dir: Path | None = None):
    """A client of the coordinator at ``address`` (or the one ``state_dir`` records) that says on stderr when it
    waits for an API that does not answer, and when it finds none and joins Ray instead."""
    from pcs_ray.client import Client

    target = cluster_address(address, state_dir)
    if state_dir is not None and target is None and not (state_dir.expanduser() / ADVERT).is_file():
        raise FileNotFoundError(f"nothing in {state_dir} says where its coordinator is (no {ADVERT}, no cluster.json): "
                                f"is it the folder given to `up` or `start`? (or pass --address)")
    say = lambda line: print(line, file=sys.stderr, flush=True)
    return Client(target, state_dir=state_dir, on_wait=say, on_fallback=say)


def dashboard_line(api: str | None) -> str:
    """Where the coordinator's dashboard is (its API's address) and how to sign in, or why there is none."""
    if not api:
        return "off (the coordinator serves no HTTP API: no token found)"
    return f"{api.rstrip('/')}/dashboard/ (sign in with the cluster's token, or `pcs-ray dashboard` for a one-time link)"
