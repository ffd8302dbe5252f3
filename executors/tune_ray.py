"""A sweep's driver joins the pcs-ray cluster's Ray before its sweep is submitted.

Tune would join Ray only in ``fit()``, after ``PCSTuner`` submitted the sweep: a driver refused there
(a token it lacks, a wrong address) left a sweep holding GPUs until its lease lapsed. Joined first, such
a driver fails with one line and nothing submitted. Token mode is chosen as ``pcs_ray.client`` chooses
it (:mod:`pcs_ray.api.ray_token`: a token where Ray looks for one means token mode). A driver already on
a Ray that has none of pcs-ray's per-GPU resources (a script's own ``ray.init(num_cpus=2)``) would
park its trials for good: it is refused too.
"""

from __future__ import annotations

import os

from pcs_ray.executors.tune_pin import is_gpu_resource
from pcs_ray.api.ray_token import AUTH_MODE, prefer_token, refusal_message


class NotOnClusterError(ConnectionError):
    """The driver cannot run the sweep's trials on the pcs-ray cluster (one line: what to do)."""


def join_cluster() -> None:
    """Join the Ray cluster at ``$RAY_ADDRESS`` (else the one on this machine) unless this process has joined
    one; raise :class:`NotOnClusterError` when it cannot, or when the Ray it is on is not pcs-ray's."""
    prefer_token()
    import ray

    if not ray.is_initialized():
        if os.environ.get(AUTH_MODE) == "token":
            try:  # Ray read the mode when it was imported (Tune imports it): refresh it, as `ray start` does
                from ray._private.authentication.authentication_token_setup import (
                    _enable_token_auth,
                )

                _enable_token_auth()
            except ImportError:  # pragma: no cover - a Ray without token auth
                pass
        address = os.environ.get("RAY_ADDRESS") or "auto"
        try:
            ray.init(address=address, logging_level="ERROR")
        except ConnectionError as e:
            raise NotOnClusterError(f"the sweep was not submitted: {refusal_message(address, str(e))}") from None
    if not any(is_gpu_resource(name) for name in ray.cluster_resources()):
        raise NotOnClusterError(
            "the sweep was not submitted: this driver's Ray has none of pcs-ray's GPUs (a ray.init() that started "
            "a Ray of its own, e.g. with num_cpus=...?); join the cluster with ray.init() and $RAY_ADDRESS")
