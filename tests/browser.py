"""The system's headless Chromium for the dashboard's browser tests (nothing downloads a browser).

Playwright for Python drives the Chromium that the operating system installed:
``$PCS_RAY_CHROMIUM`` names its binary, else ``/usr/bin/chromium`` (Debian's
``apt-get install chromium``). Where there is none, the browser tests skip and
say how to run them; with ``PCS_RAY_BROWSER_TESTS=required`` (``.ci/run`` sets
it) a missing browser fails them instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM_ENV = "PCS_RAY_CHROMIUM"
REQUIRED_ENV = "PCS_RAY_BROWSER_TESTS"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
#: Headless in a container: no sandbox (no user namespaces), no GPU, and no traffic of Chromium's own.
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"]
#: Every skip's reason starts with this, so the terminal summary can count them.
SKIP_PREFIX = "browser test skipped"
HOW_TO_RUN = (f"install the system's Chromium (`apt-get install chromium`, as root) or set ${CHROMIUM_ENV} to a "
              f"Chromium binary; `{REQUIRED_ENV}=required` makes a missing browser fail instead")


def required() -> bool:
    """Whether a missing browser fails the browser tests rather than skipping them."""
    return os.environ.get(REQUIRED_ENV, "").strip().lower() == "required"


def chromium_path() -> str | None:
    """The Chromium binary to drive: ``$PCS_RAY_CHROMIUM`` (a path or a name on ``PATH``), else /usr/bin/chromium."""
    named = os.environ.get(CHROMIUM_ENV, "").strip()
    candidate = named or DEFAULT_CHROMIUM
    if os.sep not in candidate:
        candidate = shutil.which(candidate) or candidate
    path = Path(candidate)
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def missing() -> str | None:
    """Why the browser tests cannot run here (no Chromium, no Playwright), or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"{SKIP_PREFIX}: Playwright for Python is not installed (pip install -e '.[test]'); {HOW_TO_RUN}"
    if chromium_path() is None:
        where = os.environ.get(CHROMIUM_ENV) or DEFAULT_CHROMIUM
        return f"{SKIP_PREFIX}: no Chromium at {where}; {HOW_TO_RUN}"
    return None


def launch(playwright):
    """A headless Chromium from the system's binary."""
    return playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=LAUNCH_ARGS)
