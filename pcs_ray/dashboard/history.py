"""The configuration history the policy page lists, from the journal's ``init``, ``config`` and ``tenants`` events."""

from __future__ import annotations

from collections.abc import Iterable

#: The journal kinds that change the configuration in force.
CONFIG_KINDS = ("init", "config", "tenants")


def _policy_words(policy: dict | None) -> str:
    if not policy:
        return "?"
    extra = ", ".join(f"{k} {v}" for k, v in policy.items() if k != "policy" and not isinstance(v, (dict, list)))
    return policy.get("policy", "?") + (f" ({extra})" if extra else "")


def config_history(events: Iterable[tuple[float, str, dict]], epoch: float | None) -> list[dict]:
    """``[{"t", "kind", "source", "what"}]`` in journal order from ``(t, kind, data)`` events
    (``t``: seconds since ``epoch``; an ``init`` event gives the epoch when ``epoch`` is None)."""
    out = []
    for t, kind, data in events:
        if kind == "init":
            epoch = data.get("epoch", epoch)
            out.append({"t": epoch, "kind": "start", "source": "start", "what": _policy_words(data.get("policy"))})
        elif kind == "config":
            source = data.get("source", "")
            what = _policy_words(data.get("policy")) if source == "start" else str(data.get("name", "?")) + (
                " with a WFQ configuration" if data.get("wfq") else "")
            out.append({"t": None if epoch is None else epoch + t, "kind": "config set" if source == "set" else "config",
                        "source": source, "what": what})
        elif kind == "tenants":
            tenants = (data.get("tenants") or {}).get("tenants") or {}
            quotas = ", ".join(f"{name} {spec.get('quota')}" for name, spec in tenants.items())
            out.append({"t": None if epoch is None else epoch + t, "kind": "tenants apply", "source": "apply",
                        "what": f"quotas: {quotas}" if quotas else "no tenants"})
    return out
