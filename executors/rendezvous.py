"""Where a run's ranks meet for ``torch.distributed``: rank 0's node address, on the interface that holds it.

The address comes from Ray (the node's address as the cluster knows it, never loopback), and each rank
tells gloo and NCCL which network interface to use (``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``): the
interface holding its own node's Ray address, or the operator's ``$PCS_RAY_SOCKET_IFNAME``. Left to
itself gloo resolves the host name, which on many machines (and in network namespaces) is loopback;
the ranks on other hosts are then told to connect to ``127.0.0.1``. A job's own setting of either
variable (its ``runtime_env``) is kept.
"""

from __future__ import annotations

import os
import socket

import ray

IFNAME_ENV = "PCS_RAY_SOCKET_IFNAME"
SOCKET_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def rendezvous_address() -> tuple[str, int]:
    """An address and free port on this node for torch.distributed (a run's rank 0)."""
    host = ray.util.get_node_ip_address()
    with socket.socket() as s:
        s.bind((host, 0))
        return host, s.getsockname()[1]


def interface_of(address: str) -> str | None:
    """The network interface that holds ``address`` on this machine (None: none does)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == address for a in addresses):
            return name
    return None


def pick_interfaces() -> dict[str, str]:
    """Set gloo's and NCCL's interface for this process where nobody has; returns what was set."""
    chosen = os.environ.get(IFNAME_ENV) or interface_of(ray.util.get_node_ip_address())
    if not chosen:
        return {}
    set_now = {name: chosen for name in SOCKET_VARIABLES if not os.environ.get(name)}
    os.environ.update(set_now)
    return set_now


def join_group(backend: str, master: tuple[str, int], rank: int, world_size: int,
               timeout_s: float | None = None) -> None:
    """Join the run's process group at rank 0's ``master`` address over this node's interface; ``timeout_s``:
    its collectives' timeout (None: torch's default)."""
    import datetime

    import torch.distributed as dist

    pick_interfaces()
    host, port = master
    timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world_size,
                            timeout=timeout)
