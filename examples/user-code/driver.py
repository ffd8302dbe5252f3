"""Submit your own training function through pcs-ray from a driver: print its prediction, then its result.

::

    ray job submit --working-dir examples/user-code -- python driver.py

The function (``train_mlp.train_loop``) is a top-level function of a file in this folder, so it
travels as an entrypoint with this folder as its working_dir; a function defined in this script
would travel by value instead.
"""

from __future__ import annotations

import argparse
import json
import time

from pcs_ray.train import Trainer
from train_mlp import train_loop


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="the loop's steps (default 200)")
    ap.add_argument("--gpus", type=int, default=2, help="most GPUs (default 2)")
    ap.add_argument("--lr", type=float, default=0.02)
    args = ap.parse_args(argv)
    trainer = Trainer(train_loop, config={"lr": args.lr, "checkpoint_every": 50}, steps=args.steps, gpus=args.gpus,
                      min_gpus=1, name="mlp-driver")
    handle = trainer.submit()
    now = time.time()
    print(f"job {handle.id}: predicted completion in {handle.predicted_completion - now:.1f} s "
          f"(bound {handle.bound - now:.1f} s)", flush=True)
    result = trainer.fit()
    print(f"job {result.job_id} {result.state}: metrics {json.dumps(result.metrics)}, checkpoint {result.checkpoint}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
