"""Tenants on a live local cluster: a burst borrows idle quota, the lender takes it back, every waiting job says why.

    PYTHONPATH=. python bench/tenants_live.py [--min-runtime 20] [--no-reclaim]

Starts `pcs-ray up --local` (2 nodes x 2 logical GPUs, pcs-bal) in a temporary
state folder, applies two tenants (vision and speech, quota 2 each) as the
operator, and drives it with the CLI as users do, each command one process:

1. alice (vision) submits 4 one-GPU jobs: they should run on all 4 GPUs,
   borrowing speech's idle quota;
2. bob (speech) submits 2 jobs: the time until both run is the reclaim time
   (with ``reclaim_young_runs`` it should come within the minimum runtime);
3. every `status --json` poll checks that each queued or stopping job carries
   a reason (``waiting``);
4. bob cancelling alice's job must be refused with one line; alice's own cancel passes.

Prints one JSON object of what it measured; the cluster is stopped at the end.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import Cli, cli_env, private_token, up_local

from pcs_ray.api import strict_json

JOB = "name: burst\nworkload: tiny_cnn\nsteps: 400\ngpus: 1\ncheckpoint_every: 20\nparams: {num_samples: 256, seed: 1}\n"
OPERATOR, ALICE, BOB = ({"PCS_RAY_USER": user, "PCS_RAY_TENANT": tenant}
                        for user, tenant in (("ops", ""), ("alice", "vision"), ("bob", "speech")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-runtime", type=float, default=20.0, help="the operator's min_runtime_s")
    ap.add_argument("--no-reclaim", action="store_true", help="reclaim_young_runs: false")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for each phase")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pcs-tenants-live-"))
    token = private_token(work)
    (work / "job.yaml").write_text(JOB)
    (work / "tenants.yaml").write_text(
        "tenants:\n  vision: {quota: 2}\n  speech: {quota: 2}\n"
        f"min_runtime_s: {args.min_runtime}\nreclaim_young_runs: {'false' if args.no_reclaim else 'true'}\n"
        "operators: [ops]\n")
    out: dict = {"min_runtime_s": args.min_runtime, "reclaim_young_runs": not args.no_reclaim}
    with up_local(Cli(cli_env(token)), work / "state", "--nodes", 2, "--gpus-per-node", 2, "--policy", "pcs-bal") as cluster:
        cli = Cli(cli_env(token, RAY_ADDRESS=cluster.up["address"], PCS_RAY_API=cluster.up["api"]))
        play(cli, work, args, out)
    print(strict_json.dumps(out, indent=1))


def play(cli: Cli, work: Path, args, out: dict) -> None:
    """The vision tenant fills the cluster, the speech tenant (the lender) asks for its quota back."""
    polls, reasonless = [0], []
    t0 = time.time()

    def jobs() -> dict:
        view = {j["id"]: j for j in cli.json("status")["jobs"]}
        polls[0] += 1
        reasonless.extend((round(time.time() - t0, 1), j["id"], j["state"]) for j in view.values()
                          if j["state"] in ("queued", "stopping") and not j.get("waiting"))
        return view

    def running(ids, began) -> dict:
        while True:
            view = jobs()
            if all(view[j]["state"] == "running" for j in ids) or time.time() - began > args.timeout:
                return view
            time.sleep(1)

    cli("tenants", "apply", work / "tenants.yaml", env=OPERATOR)
    vision = [cli.json("submit", work / "job.yaml", env=ALICE)["id"] for _ in range(4)]
    view = running(vision, time.time())
    out["vision_gpus_before_lender"] = sum(len(view[j]["gpus"]) for j in vision)
    time.sleep(5)
    asked = time.time()
    speech = [cli.json("submit", work / "job.yaml", env=BOB)["id"] for _ in range(2)]
    view = jobs()
    out["reasons_right_after_lender"] = {j: v["waiting"] for j, v in view.items() if v.get("waiting")}
    view = running(speech, asked)
    out["lender_running_after_s"] = round(time.time() - asked, 1) if all(
        view[j]["state"] == "running" for j in speech) else None
    out["vision_gpus_after_lender"] = sum(len(view[j]["gpus"]) for j in vision)
    refused = cli("cancel", vision[0], env=BOB, check=False)
    out["cross_tenant_cancel"] = {"exit": refused.returncode, "stderr_lines": len(refused.stderr.strip().splitlines()),
                                  "stderr": refused.stderr.strip()}
    out["own_cancel_exit"] = cli("cancel", vision[0], env=ALICE, check=False).returncode
    out["status_polls"] = polls[0]
    out["reasonless"] = reasonless  # (seconds, job, state) of every queued or stopping job a poll showed without a reason

if __name__ == "__main__":
    main()
