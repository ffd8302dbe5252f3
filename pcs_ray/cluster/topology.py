"""Intra-node GPU links: the ``nvidia-smi topo -m`` matrix and the hardware graph built from it.

``parse_topo`` reads the text ``nvidia-smi topo -m`` prints (tab- or
space-separated; NIC rows and columns, affinity columns and the legend are
skipped). The live system builds the same :class:`TopoMatrix` from NVML, so
everything downstream (MAPA, the combined policy) sees one format.

Link codes: ``X`` (self), ``NV#`` (a bonded set of # NVLinks), and PCIe paths
of increasing distance ``PIX`` < ``PXB`` < ``PHB`` < ``NODE`` < ``SYS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

#: Per-NVLink bandwidth in GB/s (V100 NVLink2, A100/H100 per link: 25 GB/s each way).
NVLINK_GBPS = 25.0
#: PCIe gen3 x16 as the MAPA paper takes it (its artifact uses 10; the paper says 12).
PCIE_GBPS = 12.0
PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")

_NV_RE = re.compile(r"^NV(\d+)$")
_GPU_RE = re.compile(r"^GPU(\d+)$")
_ROW_RE = re.compile(r"^GPU\d+\s")


class TopologyError(ValueError):
    """A topology matrix that cannot be read, with a one-line message."""


@dataclass(frozen=True)
class TopoMatrix:
    """GPU-to-GPU link codes of one node, in the GPU order of ``gpus``.

    ``numa`` is each GPU's NUMA node (socket) when the matrix says, else ``None``.
    """

    gpus: list[str]
    links: list[list[str]]
    numa: list[int | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if n == 0:
            raise TopologyError("topology matrix lists no GPUs")
        if len(self.links) != n or any(len(row) != n for row in self.links):
            raise TopologyError(f"topology matrix must be {n}x{n}")
        for i in range(n):
            for j in range(n):
                a, b = self.links[i][j], self.links[j][i]
                if (i == j) != (a == "X"):
                    raise TopologyError(f"{self.gpus[i]}-{self.gpus[j]}: 'X' must be exactly the diagonal, got {a!r}")
                if a != b:
                    raise TopologyError(f"{self.gpus[i]}-{self.gpus[j]}: asymmetric links {a!r} / {b!r}")
                if a != "X" and nvlinks(a) == 0 and a not in PCIE_CODES:
                    raise TopologyError(f"{self.gpus[i]}-{self.gpus[j]}: unknown link code {a!r}")
        if not self.numa:
            object.__setattr__(self, "numa", [None] * n)
        elif len(self.numa) != n:
            raise TopologyError(f"topology matrix: {len(self.numa)} NUMA entries for {n} GPUs")

    @property
    def size(self) -> int:
        return len(self.gpus)

    def link(self, i: int, j: int) -> str:
        return self.links[i][j]

    def sockets(self) -> list[int]:
        """Socket of each GPU: the NUMA column where given, else components of non-``SYS`` links."""
        if all(x is not None for x in self.numa):
            return [int(x) for x in self.numa]
        g = nx.Graph()
        g.add_nodes_from(range(self.size))
        g.add_edges_from(
            (i, j) for i in range(self.size) for j in range(i + 1, self.size) if self.links[i][j] not in ("SYS", "SOC")
        )
        label = {}
        for k, comp in enumerate(sorted(nx.connected_components(g), key=min)):
            for v in comp:
                label[v] = k
        return [label[i] for i in range(self.size)]


def nvlinks(code: str) -> int:
    """Number of bonded NVLinks a link code stands for (0 for PCIe paths)."""
    m = _NV_RE.match(code)
    return int(m.group(1)) if m else 0


def link_bandwidth(code: str, nvlink_gbps: float = NVLINK_GBPS, pcie_gbps: float = PCIE_GBPS) -> float:
    """Peak one-way bandwidth (GB/s) of a link code: NVLink count x per-link rate, else PCIe."""
    k = nvlinks(code)
    return k * nvlink_gbps if k else pcie_gbps


def parse_topo(text: str) -> TopoMatrix:
    """Read ``nvidia-smi topo -m`` output. Raises :class:`TopologyError` on anything unusable."""
    lines = [ln.rstrip("\n\r") for ln in text.splitlines()]
    # The header is the line before the first row; rows start with a GPU name, the header with blanks.
    header_at = next((k for k, ln in enumerate(lines) if _ROW_RE.match(ln)), None)
    if header_at is None or header_at == 0:
        raise TopologyError("no 'nvidia-smi topo -m' matrix found (expected a header row and GPU rows)")
    header = _cells(lines[header_at - 1])
    columns = _header_columns(header)
    gpu_cols = [(k, name) for k, name in enumerate(columns) if _GPU_RE.match(name)]
    if not gpu_cols:
        raise TopologyError("topology header names no GPU columns")
    numa_col = next((k for k, name in enumerate(columns) if name.lower() == "numa affinity"), None)
    rows: dict[str, list[str]] = {}
    numa: dict[str, int | None] = {}
    for ln in lines[header_at:]:
        cells = _cells(ln)
        if not cells:
            break
        if not _GPU_RE.match(cells[0]):
            if cells[0].lower().startswith("legend"):
                break
            continue  # NIC rows
        values = cells[1:]
        if len(values) < len(gpu_cols):
            raise TopologyError(f"row {cells[0]}: {len(values)} cells for {len(gpu_cols)} GPU columns")
        rows[cells[0]] = [values[k] for k, _ in gpu_cols]
        numa[cells[0]] = _int_or_none(values[numa_col]) if numa_col is not None and numa_col < len(values) else None
    names = [name for _, name in gpu_cols]
    missing = [n for n in names if n not in rows]
    if missing:
        raise TopologyError(f"topology matrix has no row for {', '.join(missing)}")
    return TopoMatrix(gpus=names, links=[rows[n] for n in names], numa=[numa[n] for n in names])


def read_topo(path: str | Path) -> TopoMatrix:
    """``parse_topo`` of a file; unreadable or malformed files raise :class:`TopologyError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TopologyError(f"{path}: cannot read topology ({e})") from None
    try:
        return parse_topo(text)
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None


def hardware_graph(matrix: TopoMatrix, nvlink_gbps: float = NVLINK_GBPS, pcie_gbps: float = PCIE_GBPS) -> nx.Graph:
    """Complete graph over the node's GPUs (nodes ``0..n-1``, local indices).

    Each edge carries ``link`` (the code), ``nvlinks`` (count) and ``bw``
    (GB/s): every pair can talk, NVLink pairs faster, as in MAPA.
    Each node carries ``name`` and ``socket``.
    """
    g = nx.Graph()
    sockets = matrix.sockets()
    for i, name in enumerate(matrix.gpus):
        g.add_node(i, name=name, socket=sockets[i])
    for i in range(matrix.size):
        for j in range(i + 1, matrix.size):
            code = matrix.links[i][j]
            g.add_edge(i, j, link=code, nvlinks=nvlinks(code), bw=link_bandwidth(code, nvlink_gbps, pcie_gbps))
    return g


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t") if c.strip()]
    return line.split()


def _header_columns(header: list[str]) -> list[str]:
    """Header cells, with space-separated multi-word names (``CPU Affinity``) rejoined."""
    out: list[str] = []
    for cell in header:
        if out and cell.lower() in ("affinity", "id") and out[-1].lower() in ("cpu", "numa", "gpu", "gpu numa"):
            out[-1] = f"{out[-1]} {cell}"
        else:
            out.append(cell)
    return out


def _int_or_none(cell: str) -> int | None:
    try:
        return int(cell)
    except ValueError:
        return None


__all__ = [
    "NVLINK_GBPS", "PCIE_GBPS", "TopoMatrix", "TopologyError", "hardware_graph", "link_bandwidth", "nvlinks",
    "parse_topo", "read_topo",
]
