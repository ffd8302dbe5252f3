"""The fuzz suite at full size: 1,000 hypothesis cases per input surface (``tests/test_fuzz.py``).

    PYTHONPATH=. python bench/fuzz.py [--examples 1000]

The suite runs under pytest in this process (the bench imports no test module
itself). Each CLI command is a surface of its own (a quarter as many cases),
run with no Ray cluster reachable and no process allowed to start. Prints one
JSON object: per surface, the cases run and whether any ended in a traceback
(a failure names the falsifying input; on the HTTP surface, also any answer of
500 or more); and whether the in-process coordinator that took every fuzzed
submission still answers ``status``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import pytest

from common import ROOT
from pcs_ray.api import strict_json

SUITE = ROOT / "tests" / "test_fuzz.py"
#: Surfaces by test function (a parametrized test's surface takes its parameter: ``trace_pcs``, ``cli submit``).
SURFACES = {"test_fuzz_job_dicts": "job_dict", "test_fuzz_job_yaml": "job_yaml", "test_fuzz_cluster_specs": "cluster_spec",
            "test_fuzz_wfq_configs": "wfq_config", "test_fuzz_traces": "trace_{}", "test_fuzz_joblists": "joblist",
            "test_fuzz_tenants_files": "tenants", "test_fuzz_http_api": "http_api", "test_fuzz_cli_arguments": "cli {}"}


def surface(item) -> str | None:
    """The surface a collected test fuzzes, or None for the suite's other tests."""
    name = SURFACES.get(item.originalname)
    if name is None:
        return None
    spec = getattr(item, "callspec", None)
    return name.format(*spec.params.values()) if spec is not None else name


class Surfaces:
    """A pytest plugin: each surface's outcome and time, and the coordinator the job dicts were submitted to."""

    def __init__(self, wanted: set[str] | None) -> None:
        self.wanted, self.surface_of, self.results, self.coordinator = wanted, {}, {}, None

    def pytest_collection_modifyitems(self, items, config) -> None:
        keep = [i for i in items if surface(i) is not None and (self.wanted is None or surface(i) in self.wanted)]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
        self.surface_of = {i.nodeid: surface(i) for i in keep}

    def pytest_runtest_call(self, item) -> None:
        if item.originalname == "test_fuzz_job_dicts":
            self.coordinator = item.funcargs["coordinator"]

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "teardown":
            return
        result = self.results.setdefault(self.surface_of[report.nodeid], {"tracebacks": 0, "failure": None, "wall_s": 0.0})
        result["wall_s"] = round(result["wall_s"] + report.duration, 1)
        if report.failed:
            result.update(tracebacks=1, failure=report.longreprtext[-1500:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--only", help="comma-separated surfaces (default: all)")
    args = ap.parse_args()
    os.environ["PCS_RAY_FUZZ_EXAMPLES"] = str(args.examples)
    os.environ["PCS_RAY_HTTP_FUZZ_EXAMPLES"] = str(args.examples)
    plugin = Surfaces(set(args.only.split(",")) if args.only else None)
    out: dict = {"examples_asked": args.examples, "load_average": os.getloadavg(), "surfaces": {}}
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON alone
        pytest.main([str(SUITE), "-q", "-p", "no:cacheprovider", "-m", "", "-o", "addopts="], plugins=[plugin])
    cases = sys.modules["test_fuzz"].CASES  # the counts the suite keeps of the cases it ran
    for name, result in plugin.results.items():
        out["surfaces"][name] = {"cases": cases[name], **result}
    if plugin.coordinator is not None:
        status = plugin.coordinator.status()
        out["coordinator_serving"] = isinstance(status["jobs"], list)
        out["coordinator_jobs_accepted"] = len(status["jobs"])
    out["total_cases"] = sum(s["cases"] for s in out["surfaces"].values())
    out["total_tracebacks"] = sum(s["tracebacks"] for s in out["surfaces"].values())
    print(strict_json.dumps(out))


if __name__ == "__main__":
    main()
