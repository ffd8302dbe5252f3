"""Names of the Ray custom resources pcs-ray pins jobs with.

Ray hands out whole GPUs by lowest free index and cannot be asked for a
specific one, so every GPU a node contributes is also a custom resource named
``<node>_gpu<index>`` (amount 1). A runner requests exactly the resources of
the GPUs placement chose, with ``num_gpus=0``, and sets
``CUDA_VISIBLE_DEVICES`` itself. No Ray import: the simulator and tests use
these names too.
"""

from __future__ import annotations

import re

_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def gpu_resource(node: str, index: int) -> str:
    """The custom resource that stands for GPU ``index`` of ``node``."""
    if not _NODE_RE.match(node):
        raise ValueError(f"node name {node!r} must be letters, digits, '_', '-' or '.'")
    if index < 0:
        raise ValueError(f"GPU index must be >= 0, got {index}")
    return f"{node}_gpu{index}"


def node_gpu_resources(node: str, num_gpus: int) -> dict[str, float]:
    """All per-GPU resources of one node (what ``ray start --resources`` gets)."""
    return {gpu_resource(node, i): 1.0 for i in range(num_gpus)}
