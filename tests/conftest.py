"""Shared fixtures. One local Ray instance serves every test that needs Ray.

Most tests need no Ray at all; those that do take the ``ray_local`` fixture (and
are marked ``slow`` for it),
which starts Ray once per session with logical GPUs laid out as two nodes of
four (custom resources ``node0_gpu0`` … ``node1_gpu3``, see
``pcs_ray.resources``), no dashboard and a small object store. Token
authentication is switched off for this private instance only.
"""

from __future__ import annotations

import os

import pytest

LOGICAL_NODES = {"node0": 4, "node1": 4}
#: Fixtures that start Ray: a test that takes one is slow whether or not its module says so.
RAY_FIXTURES = {"ray_local", "ray_head"}


def pytest_collection_modifyitems(config, items):
    """Mark every test that starts Ray ``slow`` (``pytest -m "not slow"`` is the fast loop)."""
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def ray_local(tmp_path_factory):
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    from pcs_ray.resources import node_gpu_resources

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
    ray.shutdown()
