"""Hashes of per-job simulation results, so a refactoring can show it changed no result.

Runs ``pcs-ray simulate --per-job`` (through the CLI, so the check does not
depend on internal APIs) for every policy on a generated themis1 workload and
on a Philly VC with measured speedups, for every placement on Sia-Philly
workload-1 (64 GPUs, Longhorn profile, locality penalty 1.7; 16 x 4, or 8 DGX-1 nodes for the
placements that read links), and runs
the DGX-1 (MAPA) experiment of ``bench/placement_experiments.py`` for each of
its placements. Each run's per-job rows (job id, submit, start, finish,
predictions, bound, preemptions; placement runs also each job's bandwidth) are
hashed with SHA-256.

Usage: ``python bench/results_hashes.py [--check FILE] [--write FILE]``; prints
one JSON object ``{"hashes": {run: sha256}, "mismatches": [...]}``. With
``--check`` it exits 1 when a hash differs from the committed file
(``bench/results_hashes.json``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from pcs_ray.api import strict_json
from pcs_ray.data import data_dir
from common import log

HERE = Path(__file__).resolve().parent
DATA = data_dir()

# The columns that existed before any refactoring: later columns (explanations) are not hashed.
COLUMNS = ("job_id", "submit", "service", "max_gpus", "start", "finish", "jct", "first_pred", "last_pred",
           "refreshes", "bound", "preemptions")
POLICIES = ("fifo", "srsf", "las", "srtf", "themis", "themis-lease", "afs", "afs-l", "fair", "pcs")
PLACEMENTS = ("packed-sticky", "packed-nonsticky", "random-sticky", "random-nonsticky", "pm-first", "pal",
              "mapa-baseline", "mapa-topo", "mapa-greedy", "mapa-preserve", "combined")


def cli_runs(name: str, args: list[str]) -> dict[str, str]:
    """Run ``pcs-ray simulate ARGS --per-job`` and hash each policy's rows."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "per-job.csv"
        cmd = [sys.executable, "-m", "pcs_ray.cli", "simulate", *args, "--per-job", str(out), "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"error: {' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")
        rows: dict[str, list[str]] = {}
        with out.open() as f:
            for row in csv.DictReader(f):
                rows.setdefault(row["policy"], []).append(",".join(row[c] for c in COLUMNS))
    return {f"{name}/{label}": hashlib.sha256("\n".join(r).encode()).hexdigest() for label, r in rows.items()}


def dgx1_runs(seeds: int = 2) -> dict[str, str]:
    """MAPA's DGX-1 experiment, per placement and seed: job times and effective bandwidth."""
    import placement_experiments as pe

    out = {}
    for placement in pe.DGX_PLACEMENTS:
        for seed in range(seeds):
            res, place, jobs = pe.dgx1_run(placement, seed)
            bw = place.job_bandwidth()
            lines = [f"{r.job_id},{r.start!r},{r.finish!r},{r.preemptions},{bw.get(r.job_id)!r}" for r in res.records]
            out[f"dgx1/{placement}/seed{seed}"] = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", type=Path, help="compare with this hash file; exit 1 on a mismatch")
    ap.add_argument("--write", type=Path, help="write the hashes to this file")
    args = ap.parse_args()

    hashes: dict[str, str] = {}
    log("themis1, every policy ...")
    hashes |= cli_runs("themis1", ["--workload", "themis1", "--num-jobs", "500", "--gpus", "64",
                                   "--policy", ",".join(POLICIES)])
    log("philly ed69ec (model speedups), every policy ...")
    hashes |= cli_runs("philly-ed69ec", ["--trace", str(DATA / "pcs/traces/trace_ed69ec.csv"), "--speedup", "model", "--gpus", "64",
                                         "--policy", ",".join(POLICIES)])
    for placement in PLACEMENTS:
        # PAL's setting (16 nodes x 4) for placements that ignore links; MAPA's need a node's NVLink
        # topology, so they (and combined) run on 8 DGX-1 V100 nodes, as the "mixed" experiment does.
        shape = (["--gpus-per-node", "8", "--topology", str(DATA / "topology/dgx1-v100.topo")] if placement.startswith(("mapa", "combined"))
                 else ["--gpus-per-node", "4"])
        log(f"sia-philly workload-1, {placement} ...")
        hashes |= cli_runs(f"sia-philly-1/{placement}", [
            "--trace", str(DATA / "pal/sia-philly/workload-1.csv"), "--gpus", "64", *shape, "-p", "fifo",
            "--placement", placement, "--profile", "longhorn", "--profile-seed", "1", "--locality-penalty", "1.7",
            "--no-predict"])
    log("dgx1 (MAPA experiment) ...")
    hashes |= dgx1_runs()

    mismatches = []
    if args.check:
        want = json.loads(args.check.read_text())["hashes"]
        mismatches = sorted(k for k in set(want) | set(hashes) if want.get(k) != hashes.get(k))
    if args.write:
        args.write.write_text(strict_json.dumps({"hashes": hashes}, indent=1, sort_keys=True) + "\n")
    print(strict_json.dumps({"runs": len(hashes), "hashes": hashes, "mismatches": mismatches}, indent=1, sort_keys=True))
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
