"""The fuzz suite at full size: 1,000 hypothesis cases per input surface (``tests/test_fuzz.py``).

    PYTHONPATH=. python bench/fuzz.py [--examples 1000]

Each CLI command is a surface of its own (a quarter as many cases), run with
no Ray cluster reachable and no process allowed to start. Prints one JSON
object: per surface, the cases run and whether any ended in a
traceback (a failure names the falsifying input; on the HTTP surface, also
any answer of 500 or more); and whether the in-process coordinator that took
every fuzzed submission still answers ``status``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from pcs_ray.api import strict_json

ROOT = Path(__file__).resolve().parent.parent


def fuzz_http(fz, tmp: Path) -> None:
    """The HTTP surface, against a coordinator of its own served on loopback; it must still answer at the end."""
    from api_helpers import TOKEN, local_host, served

    (tmp / "http").mkdir()
    with served(local_host(tmp / "http")) as server:
        fz.test_fuzz_http_api(http_api=(server, TOKEN))
        fz.check_http_alive(server, TOKEN)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--only", help="comma-separated surfaces (default: all)")
    args = ap.parse_args()
    os.environ["PCS_RAY_FUZZ_EXAMPLES"] = str(args.examples)
    os.environ["PCS_RAY_HTTP_FUZZ_EXAMPLES"] = str(args.examples)
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import test_fuzz as fz
    from pcs_ray.cluster import ClusterSpec
    from pcs_ray.coordinator import Coordinator, Journal
    from pcs_ray.coordinator.local import LocalCoordinator
    from pcs_ray.policies import build_policy
    from workloads.catalog import registered_workloads

    with tempfile.TemporaryDirectory() as tmp:
        coordinator = LocalCoordinator(Coordinator(
            ClusterSpec.homogeneous(8, 4), build_policy("pcs-bal"), Journal(Path(tmp) / "journal.sqlite"),
            checkpoint_root=str(Path(tmp) / "ckpt"), workloads=registered_workloads()))
        runs = {
            "job_dict": lambda: fz.test_fuzz_job_dicts(coordinator=coordinator),
            "job_yaml": fz.test_fuzz_job_yaml,
            "cluster_spec": fz.test_fuzz_cluster_specs,
            "wfq_config": fz.test_fuzz_wfq_configs,
            "trace_pcs": lambda: fz.test_fuzz_traces(kind="pcs"),
            "trace_testbed": lambda: fz.test_fuzz_traces(kind="testbed"),
            "trace_sia": lambda: fz.test_fuzz_traces(kind="sia"),
            "joblist": fz.test_fuzz_joblists,
            "http_api": lambda: fuzz_http(fz, Path(tmp)),
        }
        for command in fz.CLI_COMMANDS:  # each command with its own options and real values, no cluster reachable
            runs[f"cli {command}"] = lambda command=command: _without_cluster(fz, command)
        out: dict = {"examples_asked": args.examples, "load_average": os.getloadavg(), "surfaces": {}}
        wanted = set(args.only.split(",")) if args.only else set(runs)
        for name, run in runs.items():
            if name not in wanted:
                continue
            began = time.perf_counter()
            failure = None
            try:
                run()
            except Exception:
                failure = traceback.format_exc()[-1500:]
            out["surfaces"][name] = {"cases": fz.CASES[name], "tracebacks": 0 if failure is None else 1,
                                     "failure": failure, "wall_s": round(time.perf_counter() - began, 1)}
        status = coordinator.status()
        out["coordinator_serving"] = isinstance(status["jobs"], list)
        out["coordinator_jobs_accepted"] = len(status["jobs"])
        out["total_cases"] = sum(s["cases"] for s in out["surfaces"].values())
        out["total_tracebacks"] = sum(s["tracebacks"] for s in out["surfaces"].values())
    print(strict_json.dumps(out))


def _without_cluster(fz, command: str) -> None:
    with fz.without_a_cluster():
        fz.fuzz_command(command)


if __name__ == "__main__":
    main()
