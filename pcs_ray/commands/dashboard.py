"""``pcs-ray dashboard``: a one-time sign-in link to the coordinator's web dashboard (and a browser, when asked)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pcs_ray.commands.target import ADDRESS, CLIENT_STATE_DIR, coordinator_client


def dashboard_cmd(
    open_browser: Annotated[bool, typer.Option("--open", help="Also open the link in this machine's web browser, "
                                                "where there is one.")] = False,
    user: Annotated[str | None, typer.Option("--user", help="Who the browser acts as [default: $PCS_RAY_USER, "
                                             "else your login].", show_default=False)] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="The tenant it acts for [default: $PCS_RAY_TENANT].",
                                               show_default=False)] = None,
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
) -> None:
    """Print a link that signs one browser in to the coordinator's dashboard (once, within two minutes).

    The dashboard is served by the coordinator, on its HTTP API's host and port
    (`pcs-ray up` and `pcs-ray start` print it). The browser then acts as the
    user and tenant given here, as the CLI's own calls do: a cancel of a job of
    another tenant is refused. Without a link, sign in with the cluster's token.
    """
    client = coordinator_client(address, state_dir)
    reply = client.dashboard_ticket(user, tenant)
    url = reply.get("url")
    if not url:
        raise ValueError("the coordinator serves no HTTP API (it found no Ray cluster token), so no dashboard either")
    print(url)
    print("one-time link: it signs in one browser within 2 minutes", file=sys.stderr)
    if open_browser:
        import webbrowser

        if not webbrowser.open(url):
            print("no web browser found here: open the link by hand", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard_cmd)
