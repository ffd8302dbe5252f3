"""GPU variability profiles: measured per-class PM-scores, sampling them onto a cluster, binning them.

A *PM-score* is a GPU's run time for a class's representative application
divided by the median over the profiled cluster (1.0 = median, 2.5 = 2.5x
slower). Profiles come from the PAL artifact's measurements
(``../shared/data/pal/variability``); each class is one application:

=========  =========================================  ==================================
profile    class A / B / C / D                        source files
=========  =========================================  ==================================
longhorn   ResNet-50 / BERT / PageRank / PageRank     ``sim/*-longhorn-agg.csv`` (V100)
frontera   ResNet-50 / BERT / PageRank / PageRank     ``frontera/*-agg.csv`` (RTX 5000)
ls6        ResNet-50 / - / - / -                      ``ls6/resnet-ls6-agg.csv`` (A100)
32gpu      per-GPU ``PerfVar_classA..D``              ``32gpu-variability.csv``
pal-sim64  per-GPU draw of the PAL artifact's          ``pal-sim64-variability.csv``
           64-GPU simulated cluster, with its bins
=========  =========================================  ==================================

``pal-sim64`` is the cluster the PAL artifact simulated (16 nodes x 4): each
GPU's scores are the artifact's own draw from the Longhorn runs (ResNet-50 /
BERT / BERT / PageRank, as its ``profiles.json`` maps the classes), and its
bins are the ones the artifact decided on (``gpudf_class*.csv``). It is not
sampled: GPU i gets row i, so it needs exactly 64 GPUs.

Class D (the least variability-sensitive class) has no application of its
own in the artifact: it takes the memory-bound PageRank profile, like C.
Classes a profile does not measure get 1.0 (no variability). A file profile
is a CSV with ``PerfVar_classX`` or bare class-letter columns, one row per GPU.

The simulator runs each job at its GPUs' *raw* scores; PM-First and PAL
decide on *binned* scores (per-class 1-D K-means, K in 2..11 by silhouette,
>3 sigma outliers kept at their own score), as the paper does.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pcs_ray.cluster import ClusterSpec, NodeSpec
from pcs_ray import data
from pcs_ray.variability.longhorn import CLASS_APPS

CLASSES = ("A", "B", "C", "D")

_APP_FILES = {
    "longhorn": {c: f"sim/{app}-longhorn-agg.csv" for c, app in CLASS_APPS.items()},
    "frontera": {"A": "frontera/frontera-resnet-agg.csv", "B": "frontera/frontera-bert-agg.csv",
                 "C": "frontera/frontera-pagerank-agg.csv", "D": "frontera/frontera-pagerank-agg.csv"},
    "ls6": {"A": "ls6/resnet-ls6-agg.csv"},
}
PROFILES = (*_APP_FILES, "32gpu", "pal-sim64")


class ProfileError(ValueError):
    """A variability profile that cannot be read or used (one line)."""


@dataclass(frozen=True)
class VariabilityProfile:
    """Measured PM-scores per class (each normalised to its median); ``per_gpu`` when the
    rows of every class are the same physical GPUs (a ready cluster profile like ``32gpu``)."""

    name: str
    scores: dict[str, np.ndarray]
    per_gpu: bool = False
    #: GPU i is row i (a recorded cluster, not a sample); ``binned``: the bins decided on there
    fixed: bool = False
    binned: dict[str, np.ndarray] | None = None

    def sample(self, num_gpus: int, seed: int = 0) -> dict[str, np.ndarray]:
        """``num_gpus`` scores per class, drawn without repetition (seeded), as the paper does.

        A per-GPU profile keeps each GPU's classes together (one draw of GPUs).
        With more GPUs than measurements, whole shuffled passes repeat (said in the README).
        A fixed profile is its rows in order, for exactly as many GPUs.
        """
        if self.fixed:
            rows = len(next(iter(self.scores.values())))
            if num_gpus != rows:
                raise ProfileError(f"profile {self.name} is a recorded {rows}-GPU cluster; the cluster has {num_gpus} GPUs")
            return dict(self.scores)
        rng = np.random.default_rng(seed)
        if self.per_gpu:
            rows = _draw(rng, len(next(iter(self.scores.values()))), num_gpus)
            return {c: v[rows] for c, v in self.scores.items()}
        return {c: v[_draw(rng, len(v), num_gpus)] for c, v in self.scores.items()}


def _draw(rng: np.random.Generator, available: int, wanted: int) -> np.ndarray:
    passes = [rng.permutation(available) for _ in range(math.ceil(wanted / available))]
    return np.concatenate(passes)[:wanted]


def load_profile(name_or_path: str | Path, data_dir: str | Path | None = None) -> VariabilityProfile:
    """A named profile (``longhorn``, ``frontera``, ``ls6``, ``32gpu``) or a CSV file."""
    base = Path(data_dir) if data_dir is not None else data.data_dir() / "pal" / "variability"
    key = str(name_or_path).lower()
    if key in _APP_FILES:
        cache: dict[str, np.ndarray] = {}
        scores = {}
        for cls, rel in _APP_FILES[key].items():
            if rel not in cache:
                cache[rel] = _app_scores(base / rel)
            scores[cls] = cache[rel]
        return VariabilityProfile(key, scores)
    if key == "32gpu":
        return _per_gpu_profile(base / "32gpu-variability.csv", "32gpu")
    if key == "pal-sim64":
        return _recorded_profile(base / "pal-sim64-variability.csv", "pal-sim64")
    path = Path(name_or_path)
    if not path.is_file():
        raise ProfileError(f"unknown profile {str(name_or_path)!r}: not one of {', '.join(PROFILES)} and not a file")
    return _per_gpu_profile(path, path.stem)


def _read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            return list(reader.fieldnames or []), rows
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ProfileError(f"{path}: cannot read profile ({e})") from None


def _app_scores(path: Path) -> np.ndarray:
    """One application's per-run times normalised to their median (higher = slower)."""
    fields, rows = _read_rows(path)
    if "perf" not in fields:
        raise ProfileError(f"{path}: no 'perf' column")
    perf = np.asarray([float(r["perf"]) for r in rows if r["perf"] not in ("", None)], dtype=np.float64)
    perf = perf[np.isfinite(perf) & (perf > 0)]
    if len(perf) == 0:
        raise ProfileError(f"{path}: no positive 'perf' values")
    return perf / np.median(perf)


def _per_gpu_profile(path: Path, name: str) -> VariabilityProfile:
    fields, rows = _read_rows(path)
    columns = {}
    for cls in CLASSES:
        for col in (f"PerfVar_class{cls}", cls):
            if col in fields:
                columns[cls] = col
                break
    if not columns:
        raise ProfileError(f"{path}: expected columns PerfVar_classA..D or A..D, one row per GPU")
    try:
        scores = {c: np.asarray([float(r[col]) for r in rows], dtype=np.float64) for c, col in columns.items()}
    except (TypeError, ValueError) as e:
        raise ProfileError(f"{path}: non-numeric score ({e})") from None
    for c, v in scores.items():
        if len(v) == 0 or not np.all(np.isfinite(v) & (v > 0)):
            raise ProfileError(f"{path}: class {c} scores must be positive numbers")
    return VariabilityProfile(name, scores, per_gpu=True)


def _recorded_profile(path: Path, name: str) -> VariabilityProfile:
    """A per-GPU profile whose rows are one cluster's GPUs in order, with ``bin_classX`` columns."""
    fields, rows = _read_rows(path)
    profile = _per_gpu_profile(path, name)
    binned = {c: np.asarray([float(r[f"bin_class{c}"]) for r in rows]) for c in profile.scores if f"bin_class{c}" in fields}
    return VariabilityProfile(name, profile.scores, per_gpu=True, fixed=True, binned=binned or None)


def apply_profile(cluster: ClusterSpec, profile: VariabilityProfile, seed: int = 0) -> ClusterSpec:
    """``cluster`` with every GPU's per-class scores drawn from ``profile``."""
    drawn = profile.sample(cluster.num_gpus, seed)
    nodes, gid = [], 0
    for node in cluster.nodes:
        gpus = []
        for gpu in node.gpus:
            scores = {c: float(v[gid]) for c, v in drawn.items()}
            gpus.append(gpu.model_copy(update={"scores": scores}))
            gid += 1
        nodes.append(NodeSpec(name=node.name, gpus=gpus, topology=node.topology))
    return ClusterSpec(nodes=nodes, locality_penalty=cluster.locality_penalty)


# -- binning ----------------------------------------------------------------------


def bin_scores(values: np.ndarray, k_range: range = range(2, 12), seed: int = 0) -> np.ndarray:
    """Each value replaced by its K-means bin centroid; >3 sigma outliers keep their own value.

    K is the one in ``k_range`` with the highest silhouette over the inliers
    (the paper's rule). Fewer distinct inliers than 3: every distinct value is its own bin.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):  # 1-D fits are tiny; OpenMP threads only fight other work
        return _bin_scores(values, k_range, seed)


def _bin_scores(values: np.ndarray, k_range: range, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    x = np.asarray(values, dtype=np.float64)
    out = x.copy()
    sigma = x.std()
    outlier = np.abs(x - x.mean()) > 3 * sigma if sigma > 0 else np.zeros(len(x), dtype=bool)
    inl = x[~outlier]
    distinct = np.unique(inl)
    if len(distinct) < 3:
        return out
    ks = [k for k in k_range if k < len(distinct)]
    col = inl.reshape(-1, 1)
    sample = min(len(inl), 1000)  # silhouette is O(n^2): a fixed sample above 1,000 GPUs
    best_k, best_s, best_labels, best_model = None, -2.0, None, None
    for k in ks:
        model = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(col)
        if len(np.unique(model.labels_)) < 2:
            continue
        s = silhouette_score(col, model.labels_, sample_size=sample if sample < len(inl) else None, random_state=seed)
        if s > best_s + 1e-12:
            best_k, best_s, best_labels, best_model = k, s, model.labels_, model
    if best_model is None:
        return out
    centres = best_model.cluster_centers_.ravel()
    out[~outlier] = centres[best_labels]
    return out


_BINNED: dict[tuple[bytes, int], np.ndarray] = {}


def bin_cluster_scores(raw: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """:func:`bin_scores` for every class, memoised: every placement built on one cluster bins it once."""
    out = {}
    for c, v in raw.items():
        key = (np.ascontiguousarray(v, dtype=np.float64).tobytes(), seed)
        if key not in _BINNED:
            if len(_BINNED) > 256:
                _BINNED.clear()
            _BINNED[key] = bin_scores(v, seed=seed)
            _BINNED[key].setflags(write=False)
        out[c] = _BINNED[key]
    return out


__all__ = [
    "CLASSES", "PROFILES", "ProfileError", "VariabilityProfile", "apply_profile", "bin_cluster_scores", "bin_scores",
    "load_profile",
]
