"""What GPUs a node has, and how a Ray cluster tells the coordinator about them.

On a node with NVIDIA GPUs, NVML (read by :mod:`pcs_ray.cluster.nvml`) gives each
GPU's UUID, power limit and clocks, and the GPU-to-GPU link matrix (NVLink
counts, else the PCIe distance) in the same :class:`TopoMatrix` that
``nvidia-smi topo -m`` files parse into. Without NVML (no driver, no GPU) the node comes from a declared
cluster spec. ``pcs-ray node-resources`` turns a node into the
``ray start`` arguments that register one custom resource per GPU, and
:func:`cluster_from_ray_nodes` reads those back into a ``ClusterSpec``.
"""

from __future__ import annotations

import json
import re
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

from pcs_ray.cluster.spec import ClusterSpec, ClusterSpecError, GPUSpec, NodeSpec, load_cluster_spec, sim_uuid
from pcs_ray.cluster.nvml import NVMLDevices, NVMLUnavailable
from pcs_ray.cluster.topology import TopoMatrix
from pcs_ray.cluster.resources import gpu_resource

_RESOURCE_RE = re.compile(r"^(?P<node>[A-Za-z0-9][A-Za-z0-9_.-]*)_gpu(?P<index>\d+)$")


@dataclass
class GPUInfo:
    index: int
    uuid: str
    name: str = ""
    power_limit_w: float | None = None
    max_sm_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None
    sm_clock_mhz: int | None = None


@dataclass
class NodeInventory:
    """One node's GPUs as discovered, with their link matrix (``None`` when unknown)."""

    name: str
    gpus: list[GPUInfo]
    topology: TopoMatrix | None = None
    source: str = "nvml"
    notes: list[str] = field(default_factory=list)

    def node_spec(self) -> NodeSpec:
        return NodeSpec(name=self.name, gpus=[GPUSpec(index=g.index, uuid=g.uuid) for g in self.gpus])

    def to_dict(self) -> dict:
        return {
            "name": self.name, "source": self.source, "notes": self.notes,
            "gpus": [g.__dict__ for g in self.gpus],
            "topology": None if self.topology is None else {"gpus": self.topology.gpus, "links": self.topology.links},
        }


def nvml_inventory(node_name: str | None = None, nvml=None) -> NodeInventory | None:
    """The local GPUs via NVML (:class:`~pcs_ray.cluster.nvml.NVMLDevices`), or ``None`` where NVML or GPUs are
    missing. ``nvml``: a pynvml stand-in for tests."""
    try:
        with NVMLDevices.start(nvml) as devices:
            if not devices.count:
                return None
            gpus = [GPUInfo(index=i, **devices.facts(i)) for i in range(devices.count)]
            topology = devices.topology()
    except NVMLUnavailable:
        return None
    return NodeInventory(node_name or default_node_name(), gpus, topology, "nvml")


def default_node_name() -> str:
    """This host's name made safe for a Ray resource name."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname() or "node").strip("-.") or "node"
    return name if name[0].isalnum() else f"n{name}"


def local_node(node_name: str | None = None, spec_path: str | Path | None = None, nvml=None) -> NodeInventory:
    """This node's GPUs: NVML where there is a GPU, else node ``node_name`` of the declared spec."""
    found = nvml_inventory(node_name, nvml)
    if found is not None:
        return found
    if spec_path is None:
        raise ClusterSpecError("no GPUs found by NVML; give --cluster-spec FILE and --node-name NAME for logical GPUs")
    spec = load_cluster_spec(spec_path)
    wanted = node_name or default_node_name()
    for node in spec.nodes:
        if node.name == wanted:
            gpus = [GPUInfo(index=g.index, uuid=g.uuid) for g in node.gpus]
            topo = None
            if node.topology:
                from pcs_ray.cluster.topology import read_topo

                topo = read_topo(node.topology)
            return NodeInventory(node.name, gpus, topo, "cluster-spec", ["logical GPUs (no NVML device)"])
    names = ", ".join(n.name for n in spec.nodes)
    raise ClusterSpecError(f"{spec_path}: no node named {wanted!r} (nodes: {names}); pass --node-name")


def ray_start_args(node: NodeInventory, head: bool = False, address: str | None = None) -> list[str]:
    """``ray start`` arguments that register ``node``'s GPUs as per-GPU custom resources.

    Logical GPUs (no device) are still counted as ``--num-gpus`` so Ray's own
    accounting matches, even though pcs-ray pins with the custom resources.
    """
    resources = {gpu_resource(node.name, g.index): 1 for g in node.gpus}
    labels = {"pcs-ray/node": node.name, "pcs-ray/gpus": str(len(node.gpus)), "pcs-ray/source": node.source}
    args = ["--head"] if head else [f"--address={address}"] if address else []
    args += [
        f"--num-gpus={len(node.gpus)}",
        f"--resources={json.dumps(resources, separators=(',', ':'))}",
        "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
    ]
    return args


def format_args(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def cluster_from_ray_nodes(nodes: list[dict], base: ClusterSpec | None = None) -> ClusterSpec:
    """The cluster as registered in Ray (``ray.nodes()``): every ``<node>_gpu<i>`` resource of a live node.

    GPUs also described in ``base`` (a declared spec) keep its UUIDs, scores and topology.
    """
    found: dict[str, set[int]] = {}
    for info in nodes:
        if not info.get("Alive", info.get("alive", True)):
            continue
        for key in info.get("Resources", {}):
            m = _RESOURCE_RE.match(key)
            if m:
                found.setdefault(m["node"], set()).add(int(m["index"]))
    if not found:
        raise ClusterSpecError(
            "the Ray cluster has no per-GPU resources; start each node with the arguments "
            "`pcs-ray node-resources` prints, or pass --cluster-spec"
        )
    declared = {n.name: n for n in base.nodes} if base is not None else {}
    out = []
    for name in sorted(found):
        known = declared.get(name)
        by_index = {g.index: g for g in known.gpus} if known is not None else {}
        gpus = [by_index.get(i) or GPUSpec(index=i, uuid=sim_uuid(name, i)) for i in sorted(found[name])]
        out.append(NodeSpec(name=name, gpus=gpus, topology=known.topology if known is not None else None))
    return ClusterSpec(nodes=out, locality_penalty=base.locality_penalty if base is not None else 1.0)
