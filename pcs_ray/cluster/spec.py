"""The cluster a scheduler places jobs on: nodes, their GPUs and how fast each GPU is.

A GPU's *score* for a job class is its PM-score: the slowdown a job of that
class sees on it relative to a nominal GPU (1.0 = nominal, 1.3 = 30% slower).
Multi-GPU training is bulk-synchronous, so the slowest GPU in an allocation
sets the pace, and an allocation that spans nodes pays ``locality_penalty``
on top (:meth:`ClusterSpec.slowdown`).

GPUs have *global ids* ``0..N-1``: nodes in the order listed, and each node's
GPUs in the order listed under it. Specs come from a YAML or JSON file
(:func:`load_cluster_spec`), from :meth:`ClusterSpec.homogeneous` for
simulations, or from the local machine via NVML (:func:`discover_cluster`)::

    locality_penalty: 1.2
    nodes:
      - name: node0
        topology: topo-node0.txt      # optional: `nvidia-smi topo -m` output, or a bundled name (dgx1-v100)
        gpus:
          - {index: 0, uuid: GPU-aaaa, scores: {A: 1.0, B: 1.1}}
          - {index: 1, uuid: GPU-bbbb, scores: {A: 1.4}, power: {A: 190.0}}   # W per class, optional
      - name: node1
        gpus: 4                       # shorthand: 4 nominal GPUs GPU-sim-node1-0..3
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from pcs_ray.cluster.nvml import NVMLDevices, NVMLUnavailable

Score = Annotated[float, Field(gt=0, allow_inf_nan=False)]


MAX_GPUS_PER_NODE = 65_536  # far above any machine; a bound so `gpus: 1e12` is an error, not an out-of-memory


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be used, with a one-line message naming the field."""


def sim_uuid(node: str, index: int) -> str:
    """The deterministic UUID given to a simulated GPU."""
    return f"GPU-sim-{node}-{index}"


class GPUSpec(BaseModel):
    """One GPU: its index on its node, its UUID, its per-class slowdown scores and, where known, the
    power (W) it is predicted to draw running a job of each class (what energy-aware placement reads)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    uuid: str = Field(min_length=1)
    scores: dict[str, Score] = Field(default_factory=dict)
    power: dict[str, Score] = Field(default_factory=dict)

    def score(self, job_class: str) -> float:
        """Slowdown of a ``job_class`` job on this GPU; 1.0 for classes without a score."""
        return self.scores.get(job_class, 1.0)


class NodeSpec(BaseModel):
    """One machine and its GPUs. ``topology`` is the path of an ``nvidia-smi topo -m`` dump."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    gpus: list[GPUSpec] = Field(min_length=1)
    topology: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _gpu_count_shorthand(cls, data: Any) -> Any:
        """``gpus: 4`` means four nominal GPUs with simulated UUIDs."""
        if isinstance(data, dict) and isinstance(data.get("gpus"), int) and not isinstance(data["gpus"], bool):
            count = data["gpus"]
            if not 1 <= count <= MAX_GPUS_PER_NODE:  # a count is expanded into objects: bound it before that
                raise ValueError(f"'gpus' must list at least one GPU or be a count from 1 to {MAX_GPUS_PER_NODE}, got {count}")
            name = str(data.get("name", "node"))
            data = {**data, "gpus": [{"index": i, "uuid": sim_uuid(name, i)} for i in range(count)]}
        return data

    @field_validator("gpus")
    @classmethod
    def _unique_indices(cls, gpus: list[GPUSpec]) -> list[GPUSpec]:
        seen: set[int] = set()
        for gpu in gpus:
            if gpu.index in seen:
                raise ValueError(f"duplicate GPU index {gpu.index}")
            seen.add(gpu.index)
        return gpus


class ClusterSpec(BaseModel):
    """Nodes in order; ``locality_penalty`` (>= 1) multiplies the slowdown of multi-node allocations."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: list[NodeSpec] = Field(min_length=1)
    locality_penalty: float = Field(default=1.0, ge=1.0, allow_inf_nan=False)

    # global id -> (node position, GPU): built once, models are frozen
    _flat: list[tuple[int, GPUSpec]] = PrivateAttr(default_factory=list)

    @field_validator("nodes")
    @classmethod
    def _check_unique(cls, nodes: list[NodeSpec]) -> list[NodeSpec]:
        names: set[str] = set()
        uuids: set[str] = set()
        for node in nodes:
            if node.name in names:
                raise ValueError(f"duplicate node name {node.name!r}")
            names.add(node.name)
            for gpu in node.gpus:
                if gpu.uuid in uuids:
                    raise ValueError(f"duplicate GPU uuid {gpu.uuid!r} (node {node.name!r})")
                uuids.add(gpu.uuid)
        return nodes

    def model_post_init(self, __context: Any) -> None:
        self._flat = [(pos, gpu) for pos, node in enumerate(self.nodes) for gpu in node.gpus]

    # -- builders -------------------------------------------------------------
    @classmethod
    def homogeneous(
        cls, num_gpus: int, gpus_per_node: int | None = None, locality_penalty: float = 1.0
    ) -> "ClusterSpec":
        """``num_gpus`` nominal GPUs on nodes ``node0, node1, ...`` of ``gpus_per_node`` each.

        ``gpus_per_node`` defaults to ``num_gpus`` (one node) and need not divide
        ``num_gpus``: the last node holds the remainder.
        """
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
            raise ClusterSpecError(f"num_gpus must be a whole number >= 1, got {num_gpus!r}")
        if gpus_per_node is None:
            gpus_per_node = num_gpus
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
            raise ClusterSpecError(f"gpus_per_node must be a whole number >= 1, got {gpus_per_node!r}")
        nodes = []
        for n, first in enumerate(range(0, num_gpus, gpus_per_node)):
            name = f"node{n}"
            count = min(gpus_per_node, num_gpus - first)
            nodes.append(NodeSpec(name=name, gpus=[GPUSpec(index=i, uuid=sim_uuid(name, i)) for i in range(count)]))
        try:
            return cls(nodes=nodes, locality_penalty=locality_penalty)
        except ValidationError as e:
            raise ClusterSpecError(format_validation_error(e, "cluster")) from None

    # -- queries --------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        return len(self._flat)

    @property
    def gpus_per_node(self) -> int | None:
        """GPUs per node when every node has the same number, else ``None``."""
        counts = {len(node.gpus) for node in self.nodes}
        return counts.pop() if len(counts) == 1 else None

    def gpu_ids(self) -> list[int]:
        """Global GPU ids ``0..N-1``, in node order."""
        return list(range(len(self._flat)))

    def _entry(self, global_id: int) -> tuple[int, GPUSpec]:
        if not 0 <= global_id < len(self._flat):
            raise IndexError(f"GPU id {global_id} is out of range 0..{len(self._flat) - 1}")
        return self._flat[global_id]

    def gpu(self, global_id: int) -> GPUSpec:
        return self._entry(global_id)[1]

    def node_of(self, global_id: int) -> NodeSpec:
        return self.nodes[self._entry(global_id)[0]]

    def score(self, global_id: int, job_class: str) -> float:
        """PM-score of GPU ``global_id`` for ``job_class`` (1.0 when the GPU has none for it)."""
        return self._entry(global_id)[1].score(job_class)

    def slowdown(self, gpu_ids: Iterable[int], job_class: str) -> float:
        """Slowdown of a ``job_class`` job on ``gpu_ids``: the slowest GPU sets the pace,
        times ``locality_penalty`` if the GPUs span more than one node. 1.0 for no GPUs."""
        worst = 1.0
        nodes: set[int] = set()
        first = True
        for gid in gpu_ids:
            pos, gpu = self._entry(gid)
            s = gpu.score(job_class)
            worst = s if first else max(worst, s)
            first = False
            nodes.add(pos)
        return worst * self.locality_penalty if len(nodes) > 1 else worst


# -- loading --------------------------------------------------------------------


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def format_validation_error(e: ValidationError, source: str, ranges: Mapping[str, str] | None = None) -> str:
    """The first error as one line naming the field and the value; ``ranges`` (field -> text) adds the allowed range."""
    errors = e.errors(include_url=False)
    first = errors[0]
    msg = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    loc = _format_loc(tuple(p for p in first["loc"] if p not in ("function-after", "function-before")))
    where = f"{source}: {loc}" if loc else source
    value = ""
    if first["type"] not in ("missing", "value_error") and not isinstance(first.get("input"), (dict, list)):
        allowed = (ranges or {}).get(loc) if first["type"] in _BOUND_ERRORS else None
        value = f" (got {first.get('input')!r}" + (f"; allowed {allowed})" if allowed else ")")
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return " ".join(f"{where}: {msg}{value}{more}".split())


def cluster_spec_from_dict(raw: Any, source: str = "cluster spec") -> ClusterSpec:
    """Validate a parsed spec; errors become a one-line :class:`ClusterSpecError`."""
    if not isinstance(raw, dict):
        raise ClusterSpecError(f"{source}: expected a mapping with a 'nodes' list, got {type(raw).__name__}")
    try:
        return ClusterSpec.model_validate(raw)
    except ValidationError as e:
        raise ClusterSpecError(format_validation_error(e, source)) from None


def load_cluster_spec(path: str | Path) -> ClusterSpec:
    """Read a cluster spec from YAML (``.yaml``/``.yml``/other) or JSON (``.json``).

    A node's ``topology`` is a file (a relative path is taken relative to the
    spec file's folder) or the name of a bundled one (``dgx1-v100``, see
    ``pcs_ray.data``); it must describe as many GPUs as the node has.
    """
    p = Path(path)
    if not p.is_file():
        raise ClusterSpecError(f"no such cluster spec file: {path}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ClusterSpecError(f"{path}: cannot read cluster spec ({e})") from None
    if p.suffix.lower() == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ClusterSpecError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    else:
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            problem = getattr(e, "problem", None) or type(e).__name__
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ClusterSpecError(f"{path}: not valid YAML{where} ({problem})") from None
    if raw is None:
        raise ClusterSpecError(f"{path}: empty cluster spec (expected a mapping with a 'nodes' list)")
    spec = cluster_spec_from_dict(raw, str(path))
    if any(n.topology for n in spec.nodes):
        base = p.resolve().parent
        nodes = [n.model_copy(update={"topology": _topology_file(n, k, base, str(path))}) if n.topology else n
                 for k, n in enumerate(spec.nodes)]
        spec = ClusterSpec(nodes=nodes, locality_penalty=spec.locality_penalty)
    return spec


def _topology_file(node: NodeSpec, position: int, base: Path, source: str) -> str:
    """The absolute path of ``node.topology``: a file (relative to the spec's folder) or a bundled name.

    A file that exists is read here, so a malformed matrix or one of another
    size than the node is a one-line error at load time, not a placement
    failure later; a path that does not exist (yet) is left to the reader.
    """
    from pcs_ray.data import DataError, resolve
    from pcs_ray.cluster.topology import TopologyError, read_topo  # networkx: only specs with a topology pay for it

    path = base / node.topology  # base is absolute, so is path
    if not path.is_file():
        try:
            path = resolve("topology", node.topology).resolve()
        except DataError:
            return str(path)
    where = f"{source}: nodes[{position}].topology"
    try:
        size = read_topo(path).size
    except TopologyError as e:
        raise ClusterSpecError(f"{where}: {e}") from None
    if size != len(node.gpus):
        raise ClusterSpecError(f"{where}: {node.topology} has {size} GPUs, node {node.name!r} has {len(node.gpus)}")
    return str(path)


def _nvml_cluster() -> ClusterSpec | None:
    """One node of the local GPUs as NVML sees them (:class:`~pcs_ray.cluster.nvml.NVMLDevices`), or ``None`` without
    NVML or GPUs."""
    try:
        with NVMLDevices.start() as devices:
            gpus = [GPUSpec(index=i, uuid=devices.uuid(i)) for i in range(devices.count)]
    except NVMLUnavailable:
        return None
    if not gpus:
        return None
    return ClusterSpec(nodes=[NodeSpec(name=socket.gethostname() or "localhost", gpus=gpus)])


def discover_cluster(spec_path: str | Path | None = None) -> ClusterSpec:
    """The local GPUs via NVML; without NVML or GPUs, the spec at ``spec_path``."""
    spec = _nvml_cluster()
    if spec is not None:
        return spec
    if spec_path is not None:
        return load_cluster_spec(spec_path)
    raise ClusterSpecError("no GPUs found by NVML and no cluster spec given")


__all__ = [
    "ClusterSpec", "ClusterSpecError", "GPUSpec", "NodeSpec", "cluster_spec_from_dict", "discover_cluster",
    "load_cluster_spec", "sim_uuid",
]
