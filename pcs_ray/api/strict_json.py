"""Strict JSON: what the CLI and the benches print or write is JSON that ``jq``, browsers and strict
parsers read. ``json.dumps`` writes NaN and Infinity as bare words by default, which is not JSON; here a
missing figure is ``null`` and a non-finite number that slips through is an error."""

from __future__ import annotations

import json
import math


def finite(value, plain=None):
    """JSON-safe: NaN and infinities become None, recursively (tuples become lists). ``plain``, if given,
    turns any other non-JSON value (a dataclass, a numpy scalar) into JSON types first, so that what it
    holds is made finite too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v, plain) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, plain) for v in value]
    if plain is None or value is None or isinstance(value, (str, int)):
        return value
    return finite(plain(value), plain)


def dumps(payload, **options) -> str:
    """``payload`` as strict JSON (``options`` go to ``json.dumps``: ``indent``, ``default``, ``sort_keys``)."""
    return json.dumps(finite(payload), allow_nan=False, **options)


__all__ = ["dumps", "finite"]
