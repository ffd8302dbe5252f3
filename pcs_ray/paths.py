"""Where reference data lives.

Tests, benchmarks and experiments read the shared reference data in place
(``../shared/data`` beside the checkout, or ``$PCS_RAY_DATA``). A few tiny
files (themis1 CDFs and configs) are bundled so the installed CLI works
anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_DATA = Path(__file__).resolve().parent / "data"


def shared_data_dir() -> Path:
    """The shared reference data folder (may not exist on a user's machine)."""
    env = os.environ.get("PCS_RAY_DATA")
    if env:
        return Path(env)
    for candidate in (REPO_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return REPO_ROOT.parent / "shared" / "data"


def pcs_workload_dirs() -> list[Path]:
    """Folders searched for ``cdf-*-<name>.csv`` files: shared data first, then bundled."""
    return [shared_data_dir() / "pcs" / "workloads", BUNDLED_DATA]
