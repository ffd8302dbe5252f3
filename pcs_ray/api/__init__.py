"""The coordinator's HTTP API as its clients see it: the wire format, where to find it, and a client transport.

No Ray and no aiohttp here: the CLI reaches a coordinator with the standard
library alone. The server is ``pcs_ray.coordinator.http_server``.
"""
