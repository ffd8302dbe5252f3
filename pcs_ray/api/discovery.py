"""How a client finds the coordinator's API from what its user has: ``$PCS_RAY_API``, a state folder, or the
cluster's address.

In order: ``$PCS_RAY_API`` (``ray``: none, join as a driver); the advert in
the state folder (``--state-dir``, default ``~/.pcs-ray``) when it is for the
cluster the client was pointed at; else the well-known ports on that
cluster's host (:data:`~pcs_ray.api.advert.DEFAULT_API_PORT` and the ones after
it), each asked ``ping`` with the cluster's token and taken when it serves
that Ray cluster. A host that is this machine under another name is asked on
loopback too, where the API listens by default. Without an address, the first
API on this machine's loopback is taken, as Ray takes the local cluster.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from typing import NamedTuple

from pcs_ray.api.advert import (
    API_ENV,
    THROUGH_RAY,
    host_of,
    is_loopback,
    read_advert,
    same_cluster,
    well_known_ports,
)
from pcs_ray.api.ray_token import read_token
from pcs_ray.api.wire import PREFIX, UNAUTHORIZED

CONNECT_S = 1.0  # a host that does not accept within this is not asked on its other ports
REPLY_S = 10.0  # a coordinator busy deciding still answers ``ping`` within this


def target_address(address: str | None) -> str | None:
    """The Ray cluster a client was pointed at: ``address``, else ``$RAY_ADDRESS``; ``None`` for Ray's local one."""
    target = address or os.environ.get("RAY_ADDRESS")
    return None if not target or target == "auto" else target


def through_ray() -> bool:
    """Whether the user asked for no HTTP at all (``$PCS_RAY_API=ray``)."""
    return os.environ.get(API_ENV, "").strip().lower() == THROUGH_RAY


def _url(host: str, port: int) -> str:
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _ping(host: str, port: int, token: str | None) -> dict | str | None:
    """``ping``'s reply from ``host:port``; ``UNAUTHORIZED`` where a pcs-ray API refuses the token; ``None``
    where nothing or something else listens. Raises ``OSError`` when the host itself does not answer."""
    conn = http.client.HTTPConnection(host, port, timeout=CONNECT_S)
    try:
        conn.connect()  # refused: nothing listens (None); any other OSError: the host does not answer (raised)
    except ConnectionRefusedError:
        return None
    try:
        conn.sock.settimeout(REPLY_S)
        conn.request("GET", PREFIX + "ping", headers={"Authorization": f"Bearer {token}"} if token else {})
        reply = conn.getresponse()
        body = json.loads(reply.read())
    except (http.client.HTTPException, ValueError, OSError):
        return None  # not an HTTP server that speaks our JSON, or one that gave up on us
    finally:
        conn.close()
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if reply.status == 401 and isinstance(error, dict) and error.get("type") == UNAUTHORIZED:
        return UNAUTHORIZED
    result = body.get("result")
    return result if reply.status == 200 and isinstance(result, dict) else None


def _is_this_machine(host: str) -> bool:
    """Whether ``host`` names an interface of this machine (it can be bound)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


def probe(target: str | None, ports=None, token: str | None = None) -> str | None:
    """The URL of the API on ``ports`` (default: the well-known ones) of ``target``'s host that serves the Ray
    cluster at ``target`` (``None``: the first on loopback); where none does but one refused the token, that one
    (so the user hears what to set); else ``None``."""
    ports = well_known_ports() if ports is None else ports
    token = read_token() if token is None else token
    hosts = ["127.0.0.1"]
    if target is not None:
        host = host_of(target)
        hosts = [host] + (["127.0.0.1"] if not is_loopback(host) and _is_this_machine(host) else [])
    refused = None
    for host in hosts:
        for port in ports:
            try:
                found = _ping(host, port, token)
            except OSError:
                break  # unreachable, or it drops what it does not serve: its other ports would only wait too
            if found == UNAUTHORIZED:
                refused = refused or _url(host, port)
            elif found is not None and (target is None or same_cluster(target, str(found.get("ray_address") or ""))):
                return _url(host, port)
    return refused


class Found(NamedTuple):
    url: str
    source: str  # "env", "advert" or "port" (a well-known one)


def discover(address: str | None = None, state_dir: str | Path | None = None, ports=None) -> Found | None:
    """The API for the cluster at ``address`` (default ``$RAY_ADDRESS``): ``$PCS_RAY_API``, else ``state_dir``'s
    advert for that cluster, else the API on its well-known ``ports``; ``None`` when none is found (or
    ``$PCS_RAY_API=ray``)."""
    explicit = os.environ.get(API_ENV, "").strip()
    if explicit:
        return None if through_ray() else Found(explicit, "env")
    target = target_address(address)
    found = read_advert(state_dir)
    if found is not None and (target is None or same_cluster(target, str(found.get("ray_address") or ""))):
        return Found(found["url"], "advert")
    url = probe(target, ports)
    return None if url is None else Found(url, "port")


def find_api(address: str | None = None, state_dir: str | Path | None = None, ports=None) -> str | None:
    """:func:`discover`'s URL."""
    found = discover(address, state_dir, ports)
    return None if found is None else found.url


def rediscover(address: str | None, state_dir: str | Path | None, first: Found):
    """Where a client retries a call the API did not take: the API found again; where none is, the URL first
    found on a well-known port (a restarting coordinator takes it again), or ``None`` when it came from an advert
    since withdrawn (``pcs-ray stop``: the coordinator is gone)."""
    def again() -> str | None:
        return find_api(address, state_dir) or (first.url if first.source == "port" else None)

    return again


def not_found(address: str | None, state_dir: str | Path | None = None) -> str:
    """One line: where no API was found, and that the client joined Ray instead."""
    target = target_address(address)
    ports = well_known_ports()
    where = f"{host_of(target) if target else '127.0.0.1'} ports {ports[0]}-{ports[-1]}"
    return (f"pcs-ray: no coordinator API found (no advert for this cluster in {state_dir or '~/.pcs-ray'}, none "
            f"on {where}): joined the Ray cluster as a driver, a second or two per command (from another machine, "
            f"the coordinator needs `pcs-ray start --api-host 0.0.0.0`; elsewhere, set $PCS_RAY_API to its URL)")
