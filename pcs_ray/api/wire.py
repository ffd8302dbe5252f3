"""What crosses the wire: the calls served, how replies and refusals are encoded, and the limits.

Every call is ``POST /v1/<call>`` with a JSON object ``{"args": [...], "kwargs": {...}}``
(both optional); the read-only calls also answer ``GET /v1/<call>?name=value``.
A reply is ``{"result": ...}``; a refusal is ``{"error": {"type": ..., "message": ...}}``
whose type names the :class:`~pcs_ray.contract.CoordinatorError` subclass, so a
client raises the same class the coordinator raised.
"""

from __future__ import annotations

import dataclasses
import json

from pcs_ray.api.strict_json import finite
from pcs_ray.contract import (ConfigError, CoordinatorError, JobSpecError, PermissionDeniedError, Submitted,
                              UnknownJobError)

PREFIX = "/v1/"
#: The CoordinatorAPI calls, plus ``ping`` (who answers, since when).
CALLS = ("submit", "status", "predict", "cancel", "logs", "report_progress", "assignment", "external_ended", "set_demand",
         "external_failed", "renew_lease", "config", "set_config", "tenants", "set_tenants", "dashboard_ticket", "ping")
READ_ONLY = frozenset({"status", "predict", "assignment", "config", "tenants", "ping"})
MAX_BODY = 1 << 20  # a job spec or a WFQ configuration is a few KiB
ERRORS = {cls.__name__: cls for cls in (CoordinatorError, JobSpecError, UnknownJobError, ConfigError,
                                        PermissionDeniedError)}
UNAUTHORIZED = "Unauthorized"


def status_of(error: CoordinatorError) -> int:
    if isinstance(error, PermissionDeniedError):
        return 403
    return 404 if isinstance(error, UnknownJobError) else 400


def _plain(value):
    """JSON for what the coordinator's replies hold besides JSON types (dataclasses, numpy scalars, sets)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode(obj) -> bytes:
    """Strict JSON (``jq`` and browsers read it): a non-finite float is ``null``."""
    return json.dumps(finite(obj, plain=_plain), allow_nan=False).encode()


def error_body(kind: str, message: str) -> bytes:
    return encode({"error": {"type": kind, "message": " ".join(str(message).split()) or kind}})


def decode_result(call: str, result):
    """A reply as the in-process call returns it (``submit``: a :class:`Submitted`)."""
    if call == "submit" and isinstance(result, dict):
        return Submitted(int(result["id"]), result.get("predicted_completion"), result.get("bound"))
    return result


def refusal(body: dict) -> CoordinatorError | None:
    """The typed error a refusal carries, or ``None`` when it is not a coordinator's refusal."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    cls = ERRORS.get(error.get("type"))
    return None if cls is None else cls(str(error.get("message", "")))
