"""Serve a coordinator's HTTP API on a port clients find, and advertise it in its state folder.

The API takes the first free port of ``config.api_port`` and the ones after
it (:func:`~pcs_ray.api.advert.well_known_ports`; by default the ports a
client given only the cluster's address asks, :mod:`pcs_ray.api.discovery`),
else any free port; either way it writes the advert. A restarted coordinator
(Ray restarts the actor, or ``pcs-ray start`` on the same state folder) takes
first the port its advert names when that is one of these and free, so clients
keep their URL; otherwise another, and rewrites the advert, where clients
look again (:mod:`pcs_ray.api.transport`). ``api_port`` 0: any free port,
or the advert's after a restart.
"""

from __future__ import annotations

import logging
import os
import sys

from pcs_ray.api.advert import (
    read_advert,
    remove_advert,
    well_known_ports,
    write_advert,
)
from pcs_ray.api.ray_token import read_token

log = logging.getLogger("pcs_ray.coordinator.http")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ServedApi:
    """A running :class:`~pcs_ray.coordinator.http_server.ApiServer`, the advert that names it, and the Ray
    cluster it serves (``ping`` says so, for a client that found the API on a well-known port)."""

    def __init__(self, server, advertised: str, state_dir: str, ray_address: str | None = None) -> None:
        self.server, self.advertised, self.state_dir, self.ray_address = server, advertised, state_dir, ray_address

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
    ports = candidate_ports(config.api_port, read_advert(config.state_dir))
    for i, port in enumerate(ports):
        server = ApiServer(target, token, config.api_host, port)
        try:
            server.start()
            break
        except (OSError, TimeoutError) as e:
            server.stop()
            if i == len(ports) - 1:
                log.error("the HTTP API cannot listen on %s (%s): it is off", config.api_host, e)
                return None
    if config.api_port and server.port not in well_known_ports(config.api_port):
        span = well_known_ports(config.api_port)
        log.warning("ports %s-%s are taken: the HTTP API listens on %s, which clients find only through the advert "
                    "in %s", span[0], span[-1], server.port, config.state_dir)
    host = _reachable_host(config.api_host)
    url = f"http://{f'[{host}]' if ':' in host else host}:{server.port}"
    ray = sys.modules.get("ray")  # the actor's; an in-process host has none
    try:
        gcs = ray.get_runtime_context().gcs_address if ray is not None and ray.is_initialized() else None
    except Exception:
        gcs = None
    write_advert(config.state_dir, url, gcs, os.getpid())
    log.info("HTTP API on %s", url)
    return ServedApi(server, url, config.state_dir, gcs)


def candidate_ports(first: int, previous: dict | None) -> list[int]:
    """The ports to try in order: the advert's (a restart) where it is one of ``first``'s well-known ones, those,
    then any (0). ``first`` 0: the advert's, then any."""
    port = previous["url"].rsplit(":", 1)[-1] if previous is not None else ""
    before = int(port) if port.isdigit() else None
    if not first:
        return [before, 0] if before else [0]
    span = list(well_known_ports(first))
    if before in span:
        span.remove(before)
        span.insert(0, before)
    return [*span, 0]
