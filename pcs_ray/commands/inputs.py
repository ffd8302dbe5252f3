"""What option values stand for: inconsistent options, and data given by bundled name or by path."""

from __future__ import annotations

from pathlib import Path

from pcs_ray.data import DataError, resolve


class UsageError(ValueError):
    """Inconsistent or out-of-range options."""


def data_file(kind: str, value: str | Path) -> Path:
    """The file a ``--trace``, ``--topology`` or ``--pcs-config`` value names: a file or a bundled name.

    A value that looks like a path (a suffix, a folder) but is no file comes back
    as is, so its reader reports it missing in its own words; a bare word that
    is neither fails with the bundled names of that kind.
    """
    try:
        return resolve(kind, value)
    except DataError:
        path = Path(value)
        if path.suffix or path.is_absolute() or (len(path.parts) > 1 and path.parent.is_dir()):
            return path
        raise
