"""Done-when experiment of the preference solver (issue 4).

Runs the solver on themis1 (500 jobs per sample, 64 GPUs) within a wall-time
budget, Ray tasks on a fresh local Ray instance, then evaluates the front and
the artifact's three themis1 configurations (and FIFO/SRSF/Themis/AFS) on the
same held-out test samples. Prints one JSON object: wall times, evaluations,
for each artifact configuration the front point that weakly dominates it (or
null), and hypervolumes of the front and of the three artifact configurations
for two stated reference points (FIFO, SRSF, Themis and AFS are
simulated after the budget, which covers the search and the front's test
evaluation):

* ``published``: 1.1 x the worst test value per objective among the three
  artifact configurations (the region where they live);
* ``references``: 1.1 x the worst test value among all reference policies.

With ``--watch N`` it also evaluates the current train front on the test
samples every N generations and records, per check, which artifact
configurations it weakly dominates and how many simulations the search had
run by then (the checks' own test simulations are counted apart, and their
wall time is inside ``search_s``); the search is never steered or stopped by
them. This shows how much search a budget must buy when the shared machine
gives the 10 minutes fewer simulations than it would alone.

Usage: python bench/solver_front.py [--objectives jct:avg,pred_err:avg]
       [--space paper|cuts] [--max-queues 6] [--budget 600] [--population 40] [--seed 0] [--out DIR]
       [--local-rate R]
       [--watch N]
The machine is shared with other jobs: wall times are pessimistic.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from common import start_ray
from pcs_ray.api import strict_json
from pcs_ray.policies import BUNDLED
from pcs_ray.solver.evaluate import RayBackend, SerialBackend
from pcs_ray.solver.front import (
    dominance_report, front_json, hypervolume, normalised_hypervolume, plot_front, reference_point,
)
from pcs_ray.solver.objectives import parse_objectives
from pcs_ray.solver.search import Problem, Search
from pcs_ray.solver.space import DEFAULT_MAX_QUEUES, SPACES
from pcs_ray.solver.workload import WorkloadSource


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objectives", default="jct:avg,pred_err:avg")
    ap.add_argument("--budget", type=float, default=600.0, help="wall seconds for everything (search + test)")
    ap.add_argument("--margin", type=float, default=2.0,
                    help="stop searching when elapsed + margin x (estimated time of the remaining work) reaches --budget")
    ap.add_argument("--space", choices=SPACES, default="paper", help="search space (pcs_ray.solver.space)")
    ap.add_argument("--max-queues", type=int, default=DEFAULT_MAX_QUEUES, help="queues at most, --space cuts")
    ap.add_argument("--population", type=int, default=40)
    ap.add_argument("--local-rate", type=float, default=0.0,
                    help="share of offspring made by a local move along the front (pcs_ray.solver.space neighbour)")
    ap.add_argument("--generations", type=int, default=500)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--test-samples", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serial", action="store_true")
    ap.add_argument("--front-size", type=int, default=None, help="thin the front to this many points (default: all)")
    ap.add_argument("--watch", type=int, default=0, help="test-evaluate the front every N generations (0: never)")
    ap.add_argument("--out", type=Path, default=None, help="folder for front.json and front.png")
    args = ap.parse_args()

    started = time.perf_counter()
    objectives = parse_objectives(args.objectives)
    problem = Problem(WorkloadSource.generated("themis1", 500, 0.9), 64, objectives, args.samples,
                      args.test_samples, args.population, args.seed, space=args.space, max_queues=args.max_queues,
                      local_rate=args.local_rate)
    ray = None if args.serial else start_ray()
    backend = SerialBackend() if args.serial else RayBackend()
    ray_ready = time.perf_counter() - started
    search = Search(problem, backend)
    # The artifact's configurations first (the watch compares with them); the baseline policies only after the
    # budget: they are measured beside the front, not part of finding it (Themis alone took ~100 s of a loaded
    # machine's 10 minutes), so the budget is search + the front's test evaluation.
    published_cfg = [(name, b.load()) for name, b in BUNDLED.items()]
    refs = search.references(published_cfg, baselines=())
    references_s = time.perf_counter() - started - ray_ready
    reports = []
    watched = []
    published_now = {r.label: r.test for r in refs if r.label.startswith("pcs-")}
    reference_sims = search.evaluator.simulations
    test_sims = 0

    def watch(r) -> None:
        nonlocal test_sims
        search_sims = r.simulations - reference_sims - test_sims  # train simulations of the search so far
        before = search.evaluator.simulations
        test = [p.test for p in search.front(args.front_size)]
        test_sims += search.evaluator.simulations - before
        watched.append({"generation": r.generation, "search_simulations": search_sims,
                        "wall_s": round(time.perf_counter() - started, 1), "front_size": len(test),
                        "dominated": {k: v is not None for k, v in dominance_report(test, published_now).items()}})
        print(strict_json.dumps(watched[-1]), file=sys.stderr, flush=True)

    def on_generation(r) -> bool:
        reports.append({"generation": r.generation, "evaluations": r.evaluations, "simulations": r.simulations,
                        "front_size": r.front_size, "train_hv": round(r.hypervolume, 5), "wall_s": round(r.wall_s, 1)})
        print(strict_json.dumps(reports[-1]), file=sys.stderr, flush=True)
        if args.watch and r.generation % args.watch == 0:
            watch(r)
        # Remaining work if we stop now: the front on the test samples, plus one more generation if we go
        # on; priced at the simulation rate measured over the last generations.
        recent = reports[-5:]
        sims = recent[-1]["simulations"] - (recent[0]["simulations"] if len(recent) > 1 else 0)
        secs = recent[-1]["wall_s"] - (recent[0]["wall_s"] if len(recent) > 1 else 0)
        rate = sims / secs if secs > 0 else 1.0
        front = min(len(search.train_front()), args.front_size or 10**9)
        test_work = front * args.test_samples / rate
        next_generation = (sims / max(len(recent) - 1, 1)) / rate
        elapsed = time.perf_counter() - started
        return elapsed + args.margin * (test_work + next_generation) >= args.budget

    state = search.run(args.generations, on_generation)
    search_s = time.perf_counter() - started
    points = search.front(args.front_size)
    total_s = time.perf_counter() - started
    refs = search.references(published_cfg)
    baselines_s = time.perf_counter() - started - total_s

    published = {r.label: r.test for r in refs if r.label.startswith("pcs-")}
    front_test = [p.test for p in points]
    result = {
        "objectives": [o.label for o in objectives],
        "workload": "themis1, 500 jobs/sample, load 0.9, 64 GPUs",
        "samples": args.samples, "test_samples": args.test_samples, "population": args.population,
        "seed": args.seed, "local_rate": args.local_rate, "backend": backend.name, "space": search.space.describe(),
        "cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg(),
        "ray_start_s": round(ray_ready, 1), "references_s": round(references_s, 1), "search_s": round(search_s, 1), "total_wall_s": round(total_s, 1),
        "baselines_after_budget_s": round(baselines_s, 1),
        "generations": state.generation, "evaluations": state.evaluations,
        "simulations": search.evaluator.simulations,
        "search_simulations_per_min": round(60 * (reports[-1]["simulations"] - reference_sims - test_sims)
                                            / max(reports[-1]["wall_s"], 1e-9), 1),
        "test_front_s": round(total_s - search_s, 1),
        "distinct_configurations": len(search.evaluator.cache.specs("train")),
        "front_size": len(points),
        "dominated_by_front_point": dominance_report(front_test, published),
        "published_test": {k: list(v) for k, v in published.items()},
    }
    for name, ref in (("published", reference_point([list(published.values())])),
                      ("references", reference_point([[r.test for r in refs]]))):
        result[f"hv_ref_{name}"] = {
            "reference_point": list(ref),
            "front": hypervolume(front_test, ref),
            "published": hypervolume(list(published.values()), ref),
            "front_normalised": normalised_hypervolume(front_test, ref),
            "published_normalised": normalised_hypervolume(list(published.values()), ref),
        }
    result["all_published_weakly_dominated"] = all(v is not None for v in result["dominated_by_front_point"].values())
    idx = result["dominated_by_front_point"]
    result["dominating_points"] = {
        k: {"test": list(points[i].test), "config": points[i].config.to_dict()} for k, i in idx.items() if i is not None
    }
    # Where each artifact configuration sits against the front: the front point closest to weakly dominating
    # it (smallest worst relative excess over its test values; <= 0 dominates), with that point's train values
    # beside the configuration's (a point that dominates on train but not on test is the train front overfitting).
    train_of = {r.label: r.train for r in refs}
    result["nearest_front_point"] = {}
    for label, target in published.items():
        gaps = [max((v - t) / abs(t) for v, t in zip(p.test, target)) for p in points]
        i = min(range(len(points)), key=gaps.__getitem__)
        result["nearest_front_point"][label] = {
            "gap": gaps[i], "test": list(points[i].test), "train": list(points[i].train),
            "published_train": list(train_of[label]), "config": points[i].config.to_dict(),
            "front_points_dominating_on_train": sum(
                all(v <= t for v, t in zip(p.train, train_of[label])) for p in points),
        }
    result["baselines_test"] = {r.label: list(r.test) for r in refs if not r.label.startswith("pcs-")}
    result["progress"] = reports
    if args.watch:
        result["watch"] = watched
        result["watch_test_simulations"] = test_sims
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "front.json").write_text(strict_json.dumps(front_json(points, objectives, refs, {}), indent=1))
        plot_front(args.out / "front.png", points, objectives, refs, title=f"themis1 {args.objectives}")
    search.close()
    if ray is not None:
        ray.shutdown()
    print(strict_json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
