"""An AutoML sweep (learning rate x momentum) that pcs-ray schedules: run it against a pcs-ray cluster.

::

    pcs-ray start --cluster-spec examples/clusters/laptop.yaml
    ray job submit --address http://127.0.0.1:8265 --working-dir examples -- python sweep.py --workload resnet18

The sweep is one job to the coordinator (``pcs-ray status`` / ``pcs-ray predict
ID`` show it); its trials are ordinary Tune function trainables that report a
checkpoint every iteration, so preempting one loses nothing. Every grid point
is checked against the workload's parameter bounds before anything is
submitted, so a bad value is one line here rather than failed trials.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="tiny_cnn", help="registered model (tiny_cnn, resnet18, ...)")
    ap.add_argument("--lr", type=float, nargs="+", default=[0.01, 0.05, 0.1])
    ap.add_argument("--momentum", type=float, nargs="+", default=[0.0, 0.9])
    ap.add_argument("--iterations", type=int, default=5, help="Tune iterations per trial")
    ap.add_argument("--steps-per-iteration", type=int, default=2)
    ap.add_argument("--num-samples", type=int, default=256, help="dataset size (generated CIFAR-10-format data)")
    ap.add_argument("--iteration-time", type=float, default=1.0, help="estimated seconds per iteration on one GPU")
    ap.add_argument("--address", default=None, help="Ray address (default: this job's cluster)")
    ap.add_argument("--storage", default=None, help="Tune storage path (default ~/ray_results)")
    ap.add_argument("--asha", action="store_true", help="stop weak trials early with ASHA")
    return ap.parse_args(argv)


def grid_params(args: argparse.Namespace) -> list[dict]:
    """Each trial's ``params``, validated against the workload catalog (a ``ValueError`` names the bad value)."""
    from pcs_ray.workloads.catalog import CATALOG

    if args.workload not in CATALOG:
        raise ValueError(f"--workload: unknown workload {args.workload!r}; valid workloads: {', '.join(sorted(CATALOG))}")
    points = [{"lr": lr, "momentum": m, "num_samples": args.num_samples} for lr in args.lr for m in args.momentum]
    for params in points:
        CATALOG.check(args.workload, params)
    return points


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        points = grid_params(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from ray import tune

    from pcs_ray.executors.tune import PCSTuner, session_trainable
    from pcs_ray.client import Client

    client = Client(args.address)
    inner = None
    if args.asha:
        from ray.tune.schedulers import ASHAScheduler

        inner = ASHAScheduler(time_attr="training_iteration", max_t=args.iterations, grace_period=1, reduction_factor=2)
    tuner = PCSTuner(
        session_trainable,
        param_space={"workload": args.workload, "iterations": args.iterations,
                     "steps_per_iteration": args.steps_per_iteration,
                     "params": tune.grid_search(points)},
        iterations=args.iterations, client=client, iteration_time=args.iteration_time, scheduler=inner,
        metric="loss" if inner else None, mode="min" if inner else None,
        name=f"sweep-{args.workload}", storage_path=args.storage,
    )
    first = tuner.predict()
    print(f"sweep {tuner.job_id} submitted: predicted completion {first['predicted_completion'] - time.time():+.1f}s "
          f"from now ({tuner.scheduler.num_trials} trials; predicted in {tuner.scheduler.first_prediction_s:.2f}s)", flush=True)
    grid = tuner.fit()
    job = client.job(tuner.job_id)
    jct = job["finish"] - job["submit"]
    predicted = first["predicted_completion"] - job["submit"]
    print(f"sweep {tuner.job_id} {job['state']}: JCT {jct:.1f}s, predicted {predicted:.1f}s at submission "
          f"(error {100 * abs(jct - predicted) / predicted:.0f}%), preemptions {job['preemptions']}", flush=True)
    best = grid.get_best_result(metric="loss", mode="min")
    print(json.dumps({"best_config": best.config["params"], "best_loss": best.metrics["loss"],
                      "errors": len(grid.errors), "stopped_early": len(tuner.scheduler.log.stopped_early)}), flush=True)
    return 1 if grid.errors or job["state"] != "finished" else 0


if __name__ == "__main__":
    sys.exit(main())
