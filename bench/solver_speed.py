"""Preference-solver speed (issue 4): wall time, evaluations per second, hypervolume per generation.

themis1, 500 jobs per sample, 64 GPUs, 3 train samples per candidate,
objectives avg JCT and avg prediction error, fixed seed; simulations as Ray
tasks on a fresh local Ray instance (all CPUs of this machine), or in
process with --serial. Prints one JSON object. ``evaluations`` counts
candidates (a repeated configuration is served by the cache),
``simulations`` the simulations actually run. The machine is shared with
other jobs, so wall times are pessimistic; ``load_avg`` says how busy it was.

Usage: python bench/solver_speed.py [--generations 5] [--population 20] [--serial]
"""

from __future__ import annotations

import argparse
import os
import time

from pcs_ray.solver.evaluate import RayBackend, SerialBackend
from pcs_ray.solver.objectives import parse_objectives
from pcs_ray.solver.search import Problem, Search
from common import start_ray
from pcs_ray.api import strict_json
from pcs_ray.solver.workload import WorkloadSource


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generations", type=int, default=5)
    ap.add_argument("--population", type=int, default=20)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serial", action="store_true")
    args = ap.parse_args()

    t0 = time.perf_counter()
    ray = None if args.serial else start_ray()
    backend = SerialBackend() if args.serial else RayBackend()
    ray_start = time.perf_counter() - t0
    problem = Problem(WorkloadSource.generated("themis1", 500, 0.9), 64, parse_objectives("jct:avg,pred_err:avg"),
                      args.samples, 1, args.population, args.seed)
    search = Search(problem, backend)
    per_generation = []
    last = [0.0, 0, 0]

    def on_generation(r):
        dt = r.wall_s - last[0]
        per_generation.append({
            "generation": r.generation, "wall_s": round(r.wall_s, 2),
            "evaluations": r.evaluations, "simulations": r.simulations,
            "evaluations_per_s": round((r.evaluations - last[1]) / dt, 2) if dt > 0 else None,
            "simulations_per_s": round((r.simulations - last[2]) / dt, 2) if dt > 0 else None,
            "front_size": r.front_size, "train_hypervolume": round(r.hypervolume, 5),
        })
        last[:] = [r.wall_s, r.evaluations, r.simulations]

    t1 = time.perf_counter()
    state = search.run(args.generations, on_generation)
    wall = time.perf_counter() - t1
    result = {
        "workload": "themis1, 500 jobs/sample, load 0.9, 64 GPUs", "objectives": ["jct:avg", "pred_err:avg"],
        "samples_per_candidate": args.samples, "population": args.population, "generations": state.generation,
        "seed": args.seed, "backend": backend.name,
        "ray_cpus": backend.cluster_cpus() if not args.serial else None,
        "ray_start_s": round(ray_start, 2) if not args.serial else None,
        "search_wall_s": round(wall, 2), "evaluations": state.evaluations, "simulations": search.evaluator.simulations,
        "evaluations_per_s": round(state.evaluations / wall, 2),
        "simulations_per_s": round(search.evaluator.simulations / wall, 2),
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
        "per_generation": per_generation,
    }
    search.close()
    if ray is not None:
        ray.shutdown()
    print(strict_json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
