"""Where a coordinator says its API listens: its advert in the state folder, and the well-known ports.

The coordinator listens on the first free port of ``DEFAULT_API_PORT`` and the
``API_PORT_SPAN - 1`` after it, on the node it runs on (the head), as Ray's
own job API is found at the head's port 8265; and it writes
``STATE_DIR/api.json`` (the URL, the Ray cluster it serves, its PID) whenever it
starts, so a restarted one is found again. ``pcs-ray stop`` and ``pcs-ray down``
remove the advert. How a client uses both: :mod:`pcs_ray.api.discovery`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from pathlib import Path

API_ENV = "PCS_RAY_API"
THROUGH_RAY = "ray"  # $PCS_RAY_API=ray: no HTTP, join the cluster as a Ray driver
ADVERT = "api.json"
DEFAULT_STATE_DIR = "~/.pcs-ray"
DEFAULT_API_PORT = 8270
API_PORT_SPAN = 10  # a coordinator whose port another holds takes the next free one of these


def well_known_ports(first: int = DEFAULT_API_PORT) -> range:
    return range(first, min(first + API_PORT_SPAN, 65536))


def advert_path(state_dir: str | Path | None = None) -> Path:
    return Path(state_dir or DEFAULT_STATE_DIR).expanduser() / ADVERT


def write_advert(state_dir: str | Path, url: str, ray_address: str | None, pid: int) -> Path:
    """Atomically, readable by its owner only (it names no secret, but says where the API is)."""
    path = advert_path(state_dir)
    tmp = path.with_name(f".{ADVERT}.{pid}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "ray_address": ray_address, "pid": pid}, f)
    os.replace(tmp, path)
    return path


def read_advert(state_dir: str | Path | None = None) -> dict | None:
    try:
        raw = json.loads(advert_path(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and isinstance(raw.get("url"), str) else None


def remove_advert(state_dir: str | Path, pid: int | None = None) -> None:
    """Remove the advert (only the one process ``pid`` wrote, when given)."""
    found = read_advert(state_dir)
    if found is not None and (pid is None or found.get("pid") == pid):
        advert_path(state_dir).unlink(missing_ok=True)


def _host_port(address: str) -> tuple[str, str]:
    host, _, port = address.removeprefix("ray://").strip().rstrip("/").rpartition(":")
    return host.strip("[]"), port


def host_of(address: str) -> str:
    """The host of a Ray address (``host:port``, ``ray://host:port``, ``[v6]:port``)."""
    return _host_port(address)[0]


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def same_cluster(target: str, advertised: str) -> bool:
    """Whether the cluster a client was pointed at is the one an advert names: the same port on the same host,
    where the client may name it by loopback (``up`` records 127.0.0.1, Ray gives the coordinator this node's
    IP) or by a name that resolves to the advertised IP."""
    (ht, pt), (ha, pa) = _host_port(target), _host_port(advertised)
    if pt != pa or not ha:
        return False
    if ht == ha or is_loopback(ht):
        return True
    if _is_ip(ht):
        return False
    try:
        return socket.gethostbyname(ht) == ha
    except OSError:
        return False
