"""``pcs-ray config show | set``: the scheduling policy of the running coordinator.

``set`` swaps it without a restart: the change is journaled (a restart keeps
it), the coordinator's next decision uses it, and every prediction and bound
is refreshed. ``show`` prints what is in force.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pcs_ray.commands.format import clock
from pcs_ray.commands.live import ADDRESS, JSON_OUT, coordinator_client, register_group
from pcs_ray.commands.target import CLIENT_STATE_DIR
from pcs_ray.commands.views import strict_json

CONFIG_HELP = """
The scheduling policy of the running coordinator: show it, or swap it without a restart.

The operator's usual path: `pcs-ray solve ... --set` picks a WFQ configuration from the Pareto
front and writes it where the coordinator reads it ($PCS_RAY_WFQ_CONFIG, default
~/.pcs-ray/wfq_config.json); a coordinator started afterwards without --policy runs it, and
`pcs-ray config set` applies it to one that is already running.
"""


def show_cmd(
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Print the policy in force (with its parameters), the placement, and where and when the policy came from."""
    reply = coordinator_client(address, state_dir).config()
    print(strict_json(reply) if as_json else describe(reply))


def set_cmd(
    wfq_file: Annotated[Path | None, typer.Argument(
        metavar="FILE", help="WFQ configuration JSON (as `pcs-ray solve --out` writes it); the policy becomes pcs. "
        "Without FILE and --policy: the configuration `pcs-ray solve --set` wrote.", show_default=False)] = None,
    policy: Annotated[str | None, typer.Option(
        "--policy", help="A policy by name instead of a file: pcs-jct, pcs-bal, pcs-pred, fifo, srsf, las, srtf, "
        "themis, themis-lease, afs, afs-l, fair.", show_default=False)] = None,
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Swap the running coordinator's scheduling policy.

    The change is journaled, so a restart of the coordinator keeps it (unless `pcs-ray start` names
    another policy); its next decision uses the new policy, which may stop, resize or start jobs,
    and every job's predicted completion and bound is refreshed at once.
    """
    from pcs_ray.contract import ConfigError
    from pcs_ray.coordinator.config import choose_policy
    from pcs_ray.solver.preference import default_config_path

    if wfq_file is not None and policy is not None:
        raise ConfigError("give a WFQ configuration FILE or --policy NAME, not both")
    if wfq_file is None and policy is None:
        wfq_file = default_config_path()
        if not wfq_file.is_file():
            raise ConfigError(f"give a WFQ configuration FILE or --policy NAME (`pcs-ray solve --set` has written "
                              f"no configuration to {wfq_file})")
    choice = choose_policy(policy, wfq_file)  # checked before connecting
    reply = coordinator_client(address, state_dir).set_config(choice.policy, choice.wfq)
    print(strict_json(reply) if as_json else describe(reply))


def describe(config: dict) -> str:
    """The reply of ``config`` for a person: one line per parameter."""
    policy = dict(config["policy"])
    how = "set with `pcs-ray config set`" if config["source"] == "set" else "in force since the coordinator started"
    lines = [f"policy {policy.pop('policy')} ({how}, {clock(config['since'])})"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in policy.items()]
    placement = dict(config["placement"])
    lines.append(f"placement {placement.pop('placement')}")
    lines += [f"  {key}: {json.dumps(value)}" for key, value in placement.items()]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    register_group(app, "config", CONFIG_HELP, show=show_cmd, set=set_cmd)
