"""``pcs-ray tenants show | apply``: the tenants of the running coordinator, and who may act on whose jobs.

``apply`` checks the file here (shape, keys, negative quotas), then the
coordinator checks it against the cluster (quotas past its GPUs) and its
jobs, journals it like ``config set`` and schedules with the ``tenants``
policy wrapping the policy in force. Any error is one line and changes
nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pcs_ray.commands.format import clock
from pcs_ray.commands.live import ADDRESS, JSON_OUT, coordinator_client, register_group
from pcs_ray.commands.target import CLIENT_STATE_DIR
from pcs_ray.commands.views import strict_json

TENANTS_HELP = """
The tenants of the running coordinator: show them, or apply a tenants file without a restart.

A tenants file gives each team a guaranteed quota of GPUs, a weight for idle GPUs, a borrowing
limit, the minimum runtime before preemption, and the operators. Once one is in force, `cancel`
is refused unless it comes from the job's tenant ($PCS_RAY_TENANT), the user who submitted it
($PCS_RAY_USER, else the OS login) or an operator; once it names operators, `config set`,
`tenants apply` and `stop` are theirs only. Identity is declared by the client: this guards
against mistakes, not against anyone holding the Ray cluster's token.

Jobs submitted before that name no tenant keep running as guests, on GPUs no tenant uses; an
apply that leaves out a tenant that still has active jobs is refused.
"""


def show_cmd(
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Print the tenants file in force (quotas, weights, limits, minimum runtime, operators) and each tenant's
    active jobs and GPUs."""
    reply = coordinator_client(address, state_dir).tenants()
    print(strict_json(reply) if as_json else describe(reply))


def apply_cmd(
    tenants_file: Annotated[Path, typer.Argument(metavar="FILE", help="Tenants file (YAML, or JSON by its .json "
                                                 "suffix): tenants, min_runtime_s, max_min_runtime_s, "
                                                 "reclaim_young_runs, operators.")],
    address: Annotated[str | None, ADDRESS] = None,
    state_dir: Annotated[Path | None, CLIENT_STATE_DIR] = None,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Apply a tenants file to the running coordinator.

    The change is journaled, so a restart keeps it; its next decision divides GPUs among the tenants
    (which may stop or resize jobs), and every prediction and bound is refreshed at once.
    """
    from pcs_ray.tenants.spec import load_tenants

    checked = load_tenants(tenants_file)  # a bad file fails before connecting
    reply = coordinator_client(address, state_dir).set_tenants(checked.model_dump(mode="json"))
    print(strict_json(reply) if as_json else describe(reply))


def describe(reply: dict) -> str:
    """The reply of ``tenants`` for a person."""
    file = reply.get("tenants")
    if file is None:
        return "no tenants file applied (`pcs-ray tenants apply FILE`): every job shares the cluster, nothing is refused"
    usage = reply.get("usage") or {}
    lines = [f"tenants applied {clock(reply['since'])}"]
    for name, t in file["tenants"].items():
        used = usage.get(name, {"jobs": 0, "waiting": 0, "gpus": 0})
        limit = "no borrowing limit" if t.get("borrow_limit") is None else f"borrows at most {t['borrow_limit']}"
        lines.append(f"  {name}: quota {t['quota']}, weight {t['weight']:g}, {limit}; "
                     f"{used['jobs']} active job(s), {used['waiting']} waiting, {used['gpus']} GPU(s)")
    guests = usage.get("")
    if guests:
        lines.append(f"  (no tenant): {guests['jobs']} active job(s), {guests['waiting']} waiting, {guests['gpus']} GPU(s)")
    lines.append(f"min_runtime_s {file['min_runtime_s']:g}, max_min_runtime_s "
                 f"{'-' if file['max_min_runtime_s'] is None else format(file['max_min_runtime_s'], 'g')}, "
                 f"reclaim_young_runs {str(file['reclaim_young_runs']).lower()}")
    lines.append(f"operators: {', '.join(file['operators']) or 'none (config set, tenants apply and stop are open)'}")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    register_group(app, "tenants", TENANTS_HELP, show=show_cmd, apply=apply_cmd)
