"""Inconsistent option values (data given by bundled name or by path is ``pcs_ray.data.locate``)."""

import sys


class UsageError(ValueError):
    """Inconsistent or out-of-range options."""


def renamed_option(old: str, new: str, old_value, new_value):
    """The value of option ``new``, or of its deprecated spelling ``old`` (with a warning on stderr)."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise UsageError(f"{old} and {new} are one option: give {new}")
    print(f"warning: {old} is deprecated; use {new}", file=sys.stderr, flush=True)
    return old_value
