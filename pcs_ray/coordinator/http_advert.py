"""Serve a coordinator's HTTP API and advertise it in its state folder, keeping its port across restarts.

A restarted coordinator (Ray restarts the actor, or ``pcs-ray start`` on the
same state folder) binds the port its advert names when that port is free, so
clients keep their URL; otherwise it takes another and rewrites the advert,
where clients look again (:mod:`pcs_ray.api.transport`).
"""

from __future__ import annotations

import logging
import os
import sys

from pcs_ray.api.advert import read_advert, remove_advert, write_advert
from pcs_ray.api.ray_token import read_token

log = logging.getLogger("pcs_ray.coordinator.http")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ServedApi:
    """A running :class:`~pcs_ray.coordinator.http_server.ApiServer` and the advert that names it."""

    def __init__(self, server, advertised: str, state_dir: str) -> None:
        self.server, self.advertised, self.state_dir = server, advertised, state_dir

    def close(self) -> None:
        self.server.stop()
        remove_advert(self.state_dir, os.getpid())


def _reachable_host(bind: str) -> str:
    """The address clients use: the bound one, or this node's IP where it binds every interface."""
    if bind not in ("0.0.0.0", "::", ""):
        return bind
    import ray

    return ray.util.get_node_ip_address()


def serve_api(target, config) -> ServedApi | None:
    """Start ``target``'s API on ``config.api_host`` (see ``CoordinatorConfig``); ``None`` without a token,
    because the API serves nothing unauthenticated (clients then reach the coordinator through Ray)."""
    from pcs_ray.coordinator.http_server import ApiServer

    token = read_token()
    if token is None:
        log.warning("no Ray cluster token found ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token): "
                    "the HTTP API is off")
        return None
    ports = [config.api_port]
    previous = read_advert(config.state_dir)
    if not config.api_port and previous is not None:
        port = previous["url"].rsplit(":", 1)[-1]
        ports = [int(port), 0] if port.isdigit() else [0]
    for i, port in enumerate(ports):
        server = ApiServer(target, token, config.api_host, port)
        try:
            server.start()
            break
        except (OSError, TimeoutError) as e:
            server.stop()
            if i == len(ports) - 1:
                log.error("the HTTP API cannot listen on %s:%s (%s): it is off", config.api_host, port, e)
                return None
    host = _reachable_host(config.api_host)
    url = f"http://{f'[{host}]' if ':' in host else host}:{server.port}"
    ray = sys.modules.get("ray")  # the actor's; an in-process host has none
    try:
        gcs = ray.get_runtime_context().gcs_address if ray is not None and ray.is_initialized() else None
    except Exception:
        gcs = None
    write_advert(config.state_dir, url, gcs, os.getpid())
    log.info("HTTP API on %s", url)
    return ServedApi(server, url, config.state_dir)
