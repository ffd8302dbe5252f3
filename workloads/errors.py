"""The one error type for bad workload input.

A ``ValueError`` so callers that already catch bad values keep working; the
message is a single line naming the file (and line) so a user can fix it.
"""

from __future__ import annotations

from pathlib import Path


class WorkloadError(ValueError):
    """A trace or CDF file that cannot be used, with a one-line, actionable message."""

    @classmethod
    def at(cls, path: str | Path, line: int | None, message: str) -> "WorkloadError":
        """``path:line: message`` (``path: message`` when the line is unknown)."""
        where = f"{path}:{line}" if line is not None else f"{path}"
        return cls(f"{where}: {message}")
