"""Can the paper's WFQ(T, W, zeta) space express the artifact's themis1 configurations? (issue 4)

The first queue of any decoded configuration ends at a *record* of the
running C^2 over the sorted (pooled train) sizes: the walk cuts where adding
the next size would first push C^2 above T, so a size whose prefix C^2 is
below an earlier one can never end the first queue. For each artifact
configuration this prints its first threshold, the nearest reachable first
cuts below and above it, how many train sizes lie between, the prefix C^2 at
each, and the objectives (train and test, same samples as bench/solver_front.py)
of the artifact configuration and of the same configuration with its first
threshold moved to each reachable neighbour. For the ``cuts`` space
(``--space cuts``), the configuration its encoding of the artifact's
thresholds and W decodes to, and whether that puts every train size in the
same queue as the artifact's configuration does, with its objectives (W is
quantised to 0.01, so they may differ a little).

Usage: python bench/solver_reachability.py [--objectives jct:avg,pred_err:avg] [--seed 0]
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import bisect
import math
import time

import numpy as np

from pcs_ray.api import strict_json
from pcs_ray.data import PCS_CONFIG_KINDS, pcs_config
from pcs_ray.policies import WFQConfig
from pcs_ray.solver.objectives import parse_objectives
from pcs_ray.solver.search import Problem, Search
from pcs_ray.solver.space import SearchSpace
from pcs_ray.solver.workload import WorkloadSource


def record_cuts(sizes: list[float]) -> tuple[list[float], dict[float, float]]:
    """Every size that ends the first queue for some T, and the prefix C^2 (equal sizes together) at each size."""
    values, counts = np.unique(np.asarray(sizes, dtype=float), return_counts=True)
    n = np.cumsum(counts)
    s1 = np.cumsum(counts * values)
    s2 = np.cumsum(counts * values * values)
    mean = s1 / n
    c2 = (s2 / n - mean * mean) / (mean * mean)
    # The first queue ends at values[i-1] for T in [max(c2[:i]), c2[i]): non-empty iff c2[i] is a new record.
    best = np.maximum.accumulate(c2)
    ends = [float(values[i - 1]) for i in range(1, len(values)) if c2[i] > best[i - 1]]
    return ends, dict(zip(values.tolist(), c2.tolist()))


def prefix_c2(c2_at: dict[float, float], x: float) -> float:
    keys = sorted(c2_at)
    i = bisect.bisect_right(keys, x) - 1
    return c2_at[keys[i]]


def queue(cfg: WFQConfig, size: float) -> int:
    return bisect.bisect_left(cfg.thresholds, size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objectives", default="jct:avg,pred_err:avg")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    started = time.perf_counter()
    problem = Problem(WorkloadSource.generated("themis1", 500, 0.9), 64, parse_objectives(args.objectives), 3, 3, 40,
                      args.seed)
    search = Search(problem)
    sizes = sorted(search.space.sizes)
    ends, c2_at = record_cuts(sizes)
    out = {"objectives": args.objectives, "train_sizes": len(sizes), "reachable_first_cuts": len(ends), "configs": {}}
    for kind in PCS_CONFIG_KINDS:
        cfg = WFQConfig.load(pcs_config("themis1", kind))
        t1 = cfg.thresholds[0]
        i = bisect.bisect_right(ends, t1)
        below = ends[i - 1] if i > 0 else None
        above = ends[i] if i < len(ends) else None
        # The artifact's first queue is reachable iff a record cut splits the train sizes at the same place.
        reachable = any(e is not None and not [s for s in sizes if min(e, t1) < s <= max(e, t1)] for e in (below, above))
        variants = [(f"pcs-{kind}", cfg)]
        for label, cut in (("below", below), ("above", above)):
            if cut is not None:
                variants.append((label, WFQConfig((cut, *cfg.thresholds[1:]), cfg.weights, cfg.zeta_min, cfg.delta)))
        refs = search.references(variants, baselines=())
        art = refs[0]
        entry = {
            "first_threshold": t1, "prefix_c2_at_threshold": prefix_c2(c2_at, t1), "reachable": reachable,
            "objectives": {"train": list(art.train), "test": list(art.test)},
        }
        for (label, cut), ref in zip([(lbl, c) for lbl, c in (("below", below), ("above", above)) if c is not None],
                                     refs[1:]):
            entry[label] = {
                "cut": cut, "prefix_c2": c2_at[cut],
                "train_sizes_between": sum(1 for s in sizes if min(cut, t1) < s <= max(cut, t1)),
                "train": list(ref.train), "test": list(ref.test),
                "weakly_dominates_on_test": all(a <= b for a, b in zip(ref.test, art.test)),
            }
        cuts = SearchSpace.from_samples(search.train, kind="cuts", max_queues=max(len(cfg.thresholds), 2))
        W = math.log(cfg.weights[0] / cfg.weights[1]) if len(cfg.weights) > 1 else 0.0
        decoded = cuts.decode(cuts.encode_thresholds(cfg.thresholds, W, cfg.zeta_min, cfg.delta))
        via = search.references([("cuts", decoded)], baselines=())[0]
        entry["cuts_space"] = {
            "thresholds": list(decoded.thresholds[:-1]),
            "weights": list(decoded.normalised_weights),
            "same_train_queues": [queue(decoded, x) for x in sizes] == [queue(cfg, x) for x in sizes],
            "train": list(via.train), "test": list(via.test),
        }
        out["configs"][f"pcs-{kind}"] = entry
    out["wall_s"] = round(time.perf_counter() - started, 1)
    search.close()
    print(strict_json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
