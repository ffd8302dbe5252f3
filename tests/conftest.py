"""Shared fixtures. One local Ray instance serves every test that needs Ray.

Most tests need no Ray at all; those that do take the ``ray_local`` fixture (and
are marked ``slow`` for it),
which starts Ray once per session (again for a module that finds it gone) with logical GPUs laid out as two nodes of
four (custom resources ``node0_gpu0`` … ``node1_gpu3``, see
``pcs_ray.cluster.resources``), no dashboard and a small object store. Token
authentication is switched off for this private instance only.

The dashboard's browser tests take ``chromium`` (the system's headless Chromium,
see ``browser.py``): where there is none they skip, and the run ends with one
line saying so and how to run them.
"""

from __future__ import annotations

import os
import sys

import pytest
from loopback_head import ray_head  # noqa: F401  (a fixture: the modules that submit through Ray's job API take it)
from s3_server import s3_bucket, s3_server  # noqa: F401  (fixtures: a real S3 endpoint, moto over HTTP)

import browser

LOGICAL_NODES = {"node0": 4, "node1": 4}
#: Fixtures that start Ray: a test that takes one is slow whether or not its module says so.
RAY_FIXTURES = {"ray_local", "ray_head"}


def pytest_collection_modifyitems(config, items):
    """Mark every test that starts Ray ``slow`` (``pytest -m "not slow"`` is the fast loop)."""
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def _ours(ray) -> bool:
    """Whether the Ray this process is connected to is the test layout (a default instance lacks its GPUs)."""
    try:
        resources = ray.cluster_resources()
    except Exception:
        return False
    return all(f"{node}_gpu{n - 1}" in resources for node, n in LOGICAL_NODES.items())


def _refresh_ray_config() -> None:
    """Make this process's cached Ray config read the environment again.

    A client command run in-process (``pcs_ray.client.connect``) may have switched this process to token
    mode, as ``ray start`` does; Ray caches that, so setting the variable alone would leave this driver
    asking for a token that the instance started here never hands its workers, and every actor it creates
    dies unscheduled.
    """
    try:
        from ray._raylet import Config
    except ImportError:  # pragma: no cover - a Ray without the cache
        return
    Config.initialize("")


@pytest.fixture(autouse=True)
def _auth_mode_kept():
    """A test that switches this process's Ray auth mode (an in-process client command does, as ``ray start``
    does) has it switched back afterwards, cached config included."""
    before = os.environ.get("RAY_AUTH_MODE")
    yield
    if os.environ.get("RAY_AUTH_MODE") != before:
        if before is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = before
        if "ray" in sys.modules:
            _refresh_ray_config()


@pytest.fixture(scope="session")
def _ray_session():
    """Shuts the shared instance down once, at the end of the session."""
    yield
    import ray

    ray.shutdown()


@pytest.fixture(scope="module")
def ray_local(_ray_session, tmp_path_factory):
    """The shared instance, started on first use and started again for a module that finds it gone: code
    under test may end the process's Ray (an embedded demo, a bench's own instance), after which any Ray
    call starts a default one without the per-GPU resources, where a job or trial waits forever."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    _refresh_ray_config()

    from pcs_ray.cluster.resources import node_gpu_resources

    if ray.is_initialized() and not _ours(ray):
        ray.shutdown()
    resources: dict[str, float] = {}
    for node, n in LOGICAL_NODES.items():
        resources.update(node_gpu_resources(node, n))
    if not ray.is_initialized():
        ray.init(
            num_cpus=4,
            num_gpus=sum(LOGICAL_NODES.values()),
            resources=resources,
            include_dashboard=False,
            object_store_memory=100 * 1024 * 1024,
            log_to_driver=False,
            _temp_dir=str(tmp_path_factory.mktemp("ray")) if len(str(tmp_path_factory.getbasetemp())) < 60 else None,
        )
    yield ray


@pytest.fixture(scope="module")
def chromium():
    """The system's headless Chromium under Playwright, once per module (its event loop ends with the
    module, so no other module's asyncio code runs beside it); skips (fails when
    ``PCS_RAY_BROWSER_TESTS=required``) where there is none."""
    why = browser.missing()
    if why is not None:
        if browser.required():
            pytest.fail(why.replace(browser.SKIP_PREFIX, "browser tests are required but cannot run", 1), pytrace=False)
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chrome = browser.launch(playwright)
        try:
            yield chrome
        finally:
            chrome.close()


def pytest_terminal_summary(terminalreporter):
    """One clear line when browser tests were skipped for want of a browser (and how to run them)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if browser.SKIP_PREFIX in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} browser test(s) SKIPPED, no browser: {browser.HOW_TO_RUN}",
                                    yellow=True, bold=True)
