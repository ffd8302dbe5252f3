"""Packed placement (Tiresias when sticky, Gandiva when not): as few nodes as possible."""

from __future__ import annotations

import numpy as np

from pcs_ray.placement.base import Placement
from pcs_ray.state import JobState


def packed_select(placement: Placement, n: int, free: np.ndarray, home: tuple[int, ...] = ()) -> np.ndarray:
    """``n`` free GPUs on the fullest node that fits them (best fit), else spread over the
    nodes with the most free GPUs first; lowest ids within a node, the job's old GPUs first."""
    per_node = placement.free_per_node(free)
    fits = np.flatnonzero(per_node >= n)
    if len(fits):
        if home:
            home_nodes = placement.node[list(home)]
            at_home = fits[np.isin(fits, home_nodes)]
            best_home = at_home[per_node[at_home] == per_node[fits].min()] if len(at_home) else at_home
            if len(best_home):
                fits = best_home
        node = fits[np.argmin(per_node[fits])]
        return _lowest_on_node(placement, node, n, free, home)
    out: list[np.ndarray] = []
    need = n
    for node in np.argsort(-per_node, kind="stable"):
        take = min(need, int(per_node[node]))
        if take <= 0:
            break
        out.append(_lowest_on_node(placement, node, take, free, home))
        need -= take
        if need == 0:
            break
    return np.concatenate(out)


def _lowest_on_node(placement: Placement, node: int, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
    start = placement.node_start[node]
    ids = start + np.flatnonzero(free[start : start + placement.node_size[node]])
    if home and len(ids) > n:
        mine = np.isin(ids, home)
        ids = np.concatenate([ids[mine], ids[~mine]])
    return ids[:n]


class PackedPlacement(Placement):
    """Minimise the number of nodes per job; ignores GPU variability."""

    name = "packed"

    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        return packed_select(self, n, free, home)
