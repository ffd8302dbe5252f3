"""One of Ray's own Tune examples at full length on a 2-node cluster beside other jobs: its trials preempted
and resumed from their checkpoints.

    PYTHONPATH=. python bench/tune_example_preempted.py [--example pbt_function.py] [--others 2]

Starts `pcs-ray up --local` (2 nodes x 2 logical GPUs, pcs-bal) in a temporary state folder, copies the
example from the installed Ray wheel with only its tuner lines changed (``tests/tune_examples.py``, as
``tests/test_ray_tune_examples.py`` does) and runs it without ``--smoke-test``. Once the sweep trains on
every GPU, ``--others`` rigid 2-GPU jobs arrive one after another (``--gap`` seconds apart): the policy
takes GPUs back from the sweep, whose trials pause at their next result and resume later from their last
checkpoint. Prints one JSON object: the example's exit and wall time, its trials' ends (Tune's last
table), how often the sweep was preempted (pcs-ray's count) and how many trial starts restored a
checkpoint (the driver's log), its predicted and actual completion, the other jobs' ends.
"""

from __future__ import annotations

import argparse
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, Cli, cli_env, log, up_local

sys.path.insert(0, str(ROOT / "tests"))
from tune_examples import (  # the tests' folder, put on the path just above
    EXAMPLES,
    port,
)

from pcs_ray.api import strict_json

OTHER = "name: other{i}\nworkload: tiny_cnn\nsteps: {steps}\ngpus: 2\ncheckpoint_every: 20\nparams: {{num_samples: 256}}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--example", default="pbt_function.py", help="a file of the wheel's ray/tune/examples")
    ap.add_argument("--others", type=int, default=2, help="rigid 2-GPU jobs that arrive while the sweep runs")
    ap.add_argument("--other-steps", type=int, default=150, help="each other job's steps")
    ap.add_argument("--gap", type=float, default=20.0, help="seconds between the other jobs' arrivals")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds the example may run")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pcs-tune-preempted-"))
    token = work / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    script = work / args.example
    script.write_text(port((EXAMPLES / args.example).read_text()))
    out: dict = {"example": args.example, "cluster": "2 nodes x 2 logical GPUs", "others": args.others}
    with up_local(Cli(cli_env(token)), work / "state", "--nodes", 2, "--gpus-per-node", 2, "--policy",
                  "pcs-bal") as cluster:
        env = cli_env(token, RAY_ADDRESS=cluster.up["address"], PCS_RAY_API=cluster.up["api"])
        play(Cli(env), {**env, "RAY_AUTH_MODE": "token", "HOME": str(work)}, script, work, args, out)
    print(strict_json.dumps(out, indent=1))


def play(cli: Cli, driver_env: dict, script: Path, work: Path, args, out: dict) -> None:
    began = time.time()
    driver = subprocess.Popen([sys.executable, str(script)], env=driver_env, cwd=work, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        sweep = wait_for_sweep(cli, driver, began, args.timeout)
        others = []
        for i in range(args.others):
            (work / f"other{i}.yaml").write_text(OTHER.format(i=i, steps=args.other_steps))
            others.append(cli.json("submit", work / f"other{i}.yaml")["id"])
            log(f"other job {others[-1]} arrived at {time.time() - began:.0f} s")
            time.sleep(args.gap)
        text, _ = driver.communicate(timeout=max(1.0, args.timeout - (time.time() - began)))
    finally:
        if driver.poll() is None:
            driver.kill()
    (work / "driver.log").write_text(text)
    jobs = {j["id"]: j for j in cli.json("status")["jobs"]}
    done = jobs[sweep["id"]]
    ends = re.findall(r"Trial status: ([^\n]*)", text)
    out.update({
        "example_rc": driver.returncode, "example_wall_s": round(time.time() - began, 1),
        "best_printed": "Best hyperparameters" in text, "trials_at_end": ends[-1] if ends else None,
        "sweep": {k: done.get(k) for k in ("id", "name", "state", "steps", "preemptions", "attempts")},
        "sweep_jct_s": round(done["finish"] - done["submit"], 1) if done.get("finish") else None,
        "sweep_first_predicted_jct_s": round(done["first_predicted"] - done["submit"], 1) if done.get(
            "first_predicted") else None,
        "trial_starts_restored_from_a_checkpoint": len(re.findall(r"Restored on \S+ from checkpoint", text)),
        "others": [{k: jobs[j].get(k) for k in ("id", "state", "preemptions")} for j in others],
        "driver_log": str(work / "driver.log"),
    })


def wait_for_sweep(cli: Cli, driver: subprocess.Popen, began: float, timeout: float) -> dict:
    """The example's sweep once it trains on every GPU of the cluster."""
    while True:
        running = [j for j in cli.json("status")["jobs"] if j["state"] == "running" and j["workload"] == "tune"]
        if running and len(running[0]["gpus"]) == 4 and running[0]["steps"] > 0:
            log(f"sweep {running[0]['id']} trains on 4 GPUs at {time.time() - began:.0f} s")
            return running[0]
        if driver.poll() is not None or time.time() - began > timeout:
            raise RuntimeError(f"the example ended (rc {driver.returncode}) before its sweep trained on 4 GPUs")
        time.sleep(1.0)


if __name__ == "__main__":
    main()
