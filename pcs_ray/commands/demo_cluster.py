"""The demo's cluster: 2 nodes x 4 logical GPUs, built from bundled measurements of real systems.

Each node is wired like half a DGX-1 V100 (topology ``dgx1-v100``) and every
GPU gets the per-class scores of a GPU drawn from PAL's measured 32-GPU
profile (``32gpu``), so placement has real links and real variability to act on.
"""

from __future__ import annotations

from pathlib import Path

from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.data import resolve
from pcs_ray.variability.profiles import load_profile
from pcs_ray.cluster.topology import read_topo

NODES, GPUS_PER_NODE = ("node0", "node1"), 4
NOTES = ["topology: half a DGX-1 V100 per node", "variability: PAL 32-GPU profile (TACC)"]


def _half_dgx_topology(folder: Path) -> Path:
    """GPUs 0-3 of a DGX-1 V100 (one NVLink hybrid-cube-mesh half), as an `nvidia-smi topo -m` file."""
    full = read_topo(resolve("topology", "dgx1-v100"))
    names = [f"GPU{i}" for i in range(GPUS_PER_NODE)]
    lines = ["\t" + "\t".join(names)]
    for i in range(GPUS_PER_NODE):
        lines.append("\t".join([names[i]] + [full.links[i][j] for j in range(GPUS_PER_NODE)]))
    path = folder / "topo-half-dgx1-v100.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _variability_scores(seed: int) -> list[dict[str, float]]:
    """Per-class PM-scores of 8 GPUs drawn without repetition from PAL's measured 32-GPU profile."""
    drawn = load_profile("32gpu").sample(len(NODES) * GPUS_PER_NODE, seed)
    return [{c: float(v[i]) for c, v in drawn.items()} for i in range(len(NODES) * GPUS_PER_NODE)]


def demo_cluster(folder: Path, seed: int) -> tuple[ClusterSpec, list[str]]:
    """The demo's cluster (its topology file written to ``folder``); notes say what real data it is built from."""
    topo = _half_dgx_topology(folder)
    scores = _variability_scores(seed)
    nodes = []
    for n, name in enumerate(NODES):
        gpus = [GPUSpec(index=i, uuid=f"GPU-demo-{name}-{i}", scores=scores[n * GPUS_PER_NODE + i])
                for i in range(GPUS_PER_NODE)]
        nodes.append(NodeSpec(name=name, gpus=gpus, topology=str(topo)))
    return ClusterSpec(nodes=nodes, locality_penalty=1.2), list(NOTES)
