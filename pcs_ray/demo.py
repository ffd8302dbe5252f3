"""``pcs-ray demo``: the whole live system on one machine, with real training on logical GPUs.

An embedded local Ray gets 2 nodes x 4 logical GPUs (per-GPU custom
resources, as ``pcs-ray node-resources`` would register them), each node
wired like half a DGX-1 V100 (NVLink mesh), and every GPU a real measured
variability profile (PAL's 32-GPU sample). The coordinator runs PCS's WFQ
with queue thresholds sized for these short jobs; real PyTorch jobs of mixed
sizes and classes arrive over time. Runners stretch each step by the
slowdown the cluster model gives their GPUs (there is no real device).
At the end: per-job predicted (at submission) vs actual JCT, preemptions,
GPUs, a JSON report and a PNG timeline.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.data import data_dir

NODES, GPUS_PER_NODE = ("node0", "node1"), 4
DEADLINE_S = 280.0  # stop waiting (and report what finished) well inside five minutes
# WFQ(T, W, zeta): three queues by job size (GPU-seconds at one GPU), weights e^(-i W) with W = 1.
DEMO_WFQ = {"class_thresholds": [15.0, 60.0, "inf"], "class_rates": [1.0, 0.3679, 0.1353], "clip_demand_factor": 0.0}

# (arrival s, name, workload, steps, gpus, min_gpus, class, params, 1-GPU step s alone on an idle core)
DEMO_JOBS = [
    (0, "resnet18-a", "resnet18", 30, 2, 2, "A", {"batch_size": 8, "num_samples": 1024}, 0.15),
    (2, "tinycnn-d", "tiny_cnn", 800, 1, 1, "D", {"num_samples": 1024}, 0.012),
    (6, "transformer-b", "transformer", 80, 4, 1, "B", {"batch_size": 16, "num_samples": 2048}, 0.12),
    (12, "mobilenet-c", "mobilenet_v2", 40, 2, 2, "C", {"batch_size": 8, "num_samples": 1024}, 0.09),
    (20, "tinycnn-a4", "tiny_cnn", 500, 4, 4, "A", {"num_samples": 1024}, 0.012),
    (30, "vgg11-c", "vgg11", 15, 1, 1, "C", {"batch_size": 8, "num_samples": 512}, 0.31),
    (40, "transformer-b2", "transformer", 40, 2, 1, "B", {"batch_size": 16, "num_samples": 1024}, 0.12),
    (50, "resnet18-short", "resnet18", 12, 1, 1, "A", {"batch_size": 8, "num_samples": 512}, 0.15),
]


def _demo_jobs(n: int) -> list[tuple[float, dict]]:
    out = []
    for k in range(n):
        at, name, workload, steps, gpus, min_gpus, cls, params, t1 = DEMO_JOBS[k % len(DEMO_JOBS)]
        rep = k // len(DEMO_JOBS)
        spec = {
            "name": name if rep == 0 else f"{name}-{rep + 1}", "workload": workload, "steps": steps, "gpus": gpus,
            "min_gpus": min_gpus, "class": cls, "checkpoint_every": max(10, steps // 4),
            "params": {**params, "seed": k},
        }
        out.append((at + 60.0 * rep, spec))
    return out


def _calibration_jobs() -> list[dict]:
    """One short 1-GPU run of each workload the demo uses, with the same parameters.

    Run together first, like a cluster that has seen these models before: the
    coordinator learns each workload's step time on this (shared, CPU-only)
    machine and how long a runner takes to start, and predicts with them.
    """
    seen: dict[str, dict] = {}
    for _, _, workload, _, _, _, _, params, _ in DEMO_JOBS:
        seen.setdefault(workload, params)
    return [
        {"name": f"calibrate-{w}", "workload": w, "steps": 6, "gpus": 1, "class": "D", "params": dict(p)}
        for w, p in seen.items()
    ]


def _half_dgx_topology(folder: Path) -> Path | None:
    """GPUs 0-3 of a DGX-1 V100 (one NVLink hybrid-cube-mesh half), as an `nvidia-smi topo -m` file."""
    from pcs_ray.topology import read_topo

    src = data_dir() / "topology" / "dgx1-v100.topo"
    if not src.is_file():
        return None
    full = read_topo(src)
    names = [f"GPU{i}" for i in range(GPUS_PER_NODE)]
    lines = ["\t" + "\t".join(names)]
    for i in range(GPUS_PER_NODE):
        lines.append("\t".join([names[i]] + [full.links[i][j] for j in range(GPUS_PER_NODE)]))
    path = folder / "topo-half-dgx1-v100.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _variability_scores(seed: int) -> list[dict[str, float]] | None:
    """Per-class PM-scores of 8 GPUs drawn without repetition from PAL's measured 32-GPU profile."""
    path = data_dir() / "pal" / "variability" / "32gpu-variability.csv"
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    picks = np.random.default_rng(seed).choice(len(rows), size=len(NODES) * GPUS_PER_NODE, replace=False)
    return [{c: float(rows[i][f"PerfVar_class{c}"]) for c in "ABCD"} for i in picks]


def demo_cluster(folder: Path, seed: int) -> tuple[ClusterSpec, list[str]]:
    """The demo's 2 x 4 logical-GPU cluster; notes say what real data it is built from."""
    notes = []
    topo = _half_dgx_topology(folder)
    scores = _variability_scores(seed)
    notes.append("topology: half a DGX-1 V100 per node" if topo else "topology: none (shared data not found)")
    notes.append("variability: PAL 32-GPU profile (TACC)" if scores else "variability: none (shared data not found)")
    nodes = []
    for n, name in enumerate(NODES):
        gpus = [
            GPUSpec(index=i, uuid=f"GPU-demo-{name}-{i}", scores=scores[n * GPUS_PER_NODE + i] if scores else {})
            for i in range(GPUS_PER_NODE)
        ]
        nodes.append(NodeSpec(name=name, gpus=gpus, topology=str(topo) if topo else None))
    return ClusterSpec(nodes=nodes, locality_penalty=1.2), notes


def _start_ray(cluster: ClusterSpec, temp_dir: str | None) -> None:
    import ray

    from pcs_ray.coordinator.actor import NAMESPACE
    from pcs_ray.resources import node_gpu_resources

    resources: dict[str, float] = {}
    for node in cluster.nodes:
        resources.update(node_gpu_resources(node.name, len(node.gpus)))
    ray.init(
        num_cpus=2, num_gpus=cluster.num_gpus, resources=resources, include_dashboard=False, namespace=NAMESPACE,
        log_to_driver=False, logging_level="ERROR", object_store_memory=200 * 1024 * 1024, _temp_dir=temp_dir,
    )


def run_demo(out: str | Path, num_jobs: int = 8, seed: int = 1, live: bool = True, deadline_s: float = DEADLINE_S) -> dict:
    """Run the demo; returns the report (also written to ``out``)."""
    import ray
    from rich.console import Console
    from rich.live import Live

    from pcs_ray.client import Client
    from pcs_ray.commands.live import status_table
    from pcs_ray.coordinator.actor import start_coordinator
    from pcs_ray.coordinator.config import CoordinatorConfig, cluster_dict

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    err = Console(stderr=True)
    began = time.time()
    cluster, notes = demo_cluster(out, seed)
    state_dir = tempfile.mkdtemp(prefix="pcs-ray-demo-state-")
    ray_tmp = tempfile.mkdtemp(prefix="pcs-ray-demo-ray-", dir="/tmp")
    err.print(f"[bold]pcs-ray demo[/]: starting Ray with {cluster.num_gpus} logical GPUs on {len(cluster.nodes)} nodes ...")
    _start_ray(cluster, ray_tmp)
    actor = None
    try:
        config = CoordinatorConfig(
            cluster=cluster_dict(cluster), state_dir=state_dir, policy="pcs", wfq=DEMO_WFQ, grace_s=20.0,
            restart_overhead=8.0, progress_journal_every=2.0,
        )
        actor = start_coordinator(config)
        client = Client(coordinator=actor)
        calibration = [client.submit(spec) for spec in _calibration_jobs()]
        err.print(f"calibrating: a short run of each of the {len(calibration)} workloads (step times, start-up) ...")
        for handle in calibration:
            client.wait(handle.id, timeout=max(10.0, deadline_s / 2 - (time.time() - began)))
        arrivals = _demo_jobs(num_jobs)
        submitted: dict[int, dict] = {}
        t0 = time.time()
        pending = list(arrivals)

        def step() -> dict:
            while pending and time.time() - t0 >= pending[0][0]:
                _, spec = pending.pop(0)
                handle = client.submit(spec)
                submitted[handle.id] = {"spec": spec, "predicted": handle.predicted_completion, "bound": handle.bound,
                                        "history": []}
            status = client.status()
            for j in status["jobs"]:
                if j["state"] not in ("finished", "cancelled", "failed") and j["predicted_completion"] is not None:
                    submitted[j["id"]]["history"].append((status["now"], j["predicted_completion"]))
            return status

        status = step()
        with Live(status_table(status, "pcs-ray demo (live)"), console=err, refresh_per_second=2,
                  transient=False, auto_refresh=live) as view:
            while True:
                status = step()
                if live:
                    view.update(status_table(status, f"pcs-ray demo (live, {time.time() - t0:.0f} s)"))
                done = [j for j in status["jobs"] if j["state"] in ("finished", "cancelled", "failed")]
                if not pending and len(done) == len(status["jobs"]):
                    break
                if time.time() - began > deadline_s:
                    err.print(f"[yellow]demo deadline of {deadline_s:.0f} s reached; reporting what finished[/]")
                    break
                time.sleep(0.5)
        status = {**status, "jobs": [j for j in status["jobs"] if j["id"] in submitted]}
        report = build_report(status, submitted, cluster, notes, wall_s=time.time() - began)
    finally:
        if actor is not None:
            ray.kill(actor, no_restart=True)
        ray.shutdown()
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    (out / "demo-report.json").write_text(json.dumps(report, indent=2))
    plot_report(report, out / "demo-timeline.png")
    Console(width=None if sys.stdout.isatty() else 160).print(result_table(report))  # pipes: no truncated names
    return report


def build_report(status: dict, submitted: dict[int, dict], cluster: ClusterSpec, notes: list[str], wall_s: float) -> dict:
    """Per-job predicted (at submission) vs actual JCT, PCS's error metric, preemptions and GPU segments."""
    t0 = min(j["submit"] for j in status["jobs"])
    jobs = []
    for j in status["jobs"]:
        sub = submitted.get(j["id"], {})
        jct = j["finish"] - j["submit"] if j["state"] == "finished" else None
        pred = sub.get("predicted")
        pred_jct = pred - j["submit"] if pred is not None else None
        mid = _prediction_at(sub.get("history", []), j["submit"] + jct / 2) if jct else None
        mid_jct = mid - j["submit"] if mid is not None else None
        jobs.append({
            "id": j["id"], "name": j["name"], "workload": j["workload"], "class": j["class"], "state": j["state"],
            "demand": j["demand"], "steps": j["steps"], "total_steps": j["total_steps"],
            "submit_s": j["submit"] - t0, "finish_s": None if j["finish"] is None else j["finish"] - t0,
            "jct_s": jct, "predicted_jct_s": pred_jct,
            "bound_jct_s": None if sub.get("bound") is None else sub["bound"] - j["submit"],
            "error_pct": None if jct is None or not pred_jct else 100.0 * abs(jct - pred_jct) / pred_jct,
            "midlife_predicted_jct_s": mid_jct,
            "midlife_error_pct": None if jct is None or not mid_jct else 100.0 * abs(jct - mid_jct) / mid_jct,
            "signed_error_s": None if jct is None or pred_jct is None else jct - pred_jct,
            "preemptions": j["preemptions"], "attempts": j["attempts"], "emulated": j["emulated"],
            "segments": [
                {"start_s": s["start"] - t0, "end_s": None if s["end"] is None else s["end"] - t0,
                 "gpus": s["gpus"], "kind": s["kind"]}
                for s in j["segments"]
            ],
        })
    errs = [j["error_pct"] for j in jobs if j["error_pct"] is not None]
    mid_errs = [j["midlife_error_pct"] for j in jobs if j["midlife_error_pct"] is not None]
    abs_s = [abs(j["signed_error_s"]) for j in jobs if j["signed_error_s"] is not None]
    finished = [j for j in jobs if j["state"] == "finished"]
    return {
        "cluster": {"nodes": [n.name for n in cluster.nodes], "gpus": cluster.num_gpus,
                    "locality_penalty": cluster.locality_penalty, "notes": notes},
        "policy": status["policy"],
        "summary": {
            "jobs": len(jobs), "finished": len(finished),
            "mean_abs_error_pct": float(np.mean(errs)) if errs else float("nan"),
            "mean_abs_error_s": float(np.mean(abs_s)) if abs_s else float("nan"),
            "mean_abs_error_midlife_pct": float(np.mean(mid_errs)) if mid_errs else float("nan"),
            "avg_jct_s": float(np.mean([j["jct_s"] for j in finished])) if finished else None,
            "makespan_s": max((j["finish_s"] for j in finished), default=None),
            "preemptions": sum(j["preemptions"] for j in jobs),
            "restart_overhead_s": status["restart_overhead"], "wall_s": wall_s,
        },
        "jobs": jobs,
    }


def _prediction_at(history: list, t: float) -> float | None:
    """The prediction in force at time ``t`` (the last one made at or before it)."""
    before = [p for when, p in history if when <= t]
    return before[-1] if before else None


def result_table(report: dict):
    from rich.table import Table

    table = Table(title="pcs-ray demo: predicted (at submission) vs actual JCT", title_justify="left")
    for col in ("job", "class", "GPUs (demand)", "state", "predicted JCT", "actual JCT", "error", "mid-life error",
                "preempt", "GPUs used"):
        table.add_column(col)
    for j in report["jobs"]:
        used = sorted({g for s in j["segments"] for g in s["gpus"]})
        fmt = lambda v: "-" if v is None else f"{v:.1f} s"  # noqa: E731
        table.add_row(
            j["name"], j["class"], f"{j['demand'][0]}..{j['demand'][1]}", j["state"], fmt(j["predicted_jct_s"]),
            fmt(j["jct_s"]), "-" if j["error_pct"] is None else f"{j['error_pct']:.0f}%",
            "-" if j["midlife_error_pct"] is None else f"{j['midlife_error_pct']:.0f}%", str(j["preemptions"]),
            ",".join(used),
        )
    s = report["summary"]
    table.caption = (f"{s['finished']}/{s['jobs']} finished, {s['preemptions']} preemption(s), "
                     f"mean |error| at submission {s['mean_abs_error_pct']:.1f}% ({s['mean_abs_error_s']:.1f} s), "
                     f"at mid-life {s['mean_abs_error_midlife_pct']:.1f}%, wall {s['wall_s']:.0f} s")
    return table


def plot_report(report: dict, path: Path) -> None:
    """GPU-assignment timeline (one row per GPU, one colour per job) and predicted vs actual JCT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = [f"{n}:{i}" for n in report["cluster"]["nodes"] for i in range(GPUS_PER_NODE)]
    row = {g: k for k, g in enumerate(gpus)}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [2.2, 1]})
    colours = plt.get_cmap("tab10")
    end_all = max([s["end_s"] or 0 for j in report["jobs"] for s in j["segments"]] + [1])
    for k, j in enumerate(report["jobs"]):
        for s in j["segments"]:
            end = s["end_s"] if s["end_s"] is not None else end_all
            for g in s["gpus"]:
                ax.barh(row.get(g, 0), end - s["start_s"], left=s["start_s"], color=colours(k % 10), edgecolor="black", linewidth=0.4)
            if s["gpus"]:
                ax.text(s["start_s"] + 0.5, row.get(s["gpus"][0], 0), j["name"], va="center", fontsize=6)
        ax.plot([j["submit_s"]], [-0.8], marker="v", color=colours(k % 10))
    ax.set_yticks(range(len(gpus)), gpus)
    ax.set_ylim(-1.3, len(gpus) - 0.5)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first submission (triangles: arrivals)")
    ax.set_title("GPU assignment over time")
    names = [j["name"] for j in report["jobs"]]
    x = np.arange(len(names))
    pred = [j["predicted_jct_s"] or 0 for j in report["jobs"]]
    act = [j["jct_s"] or 0 for j in report["jobs"]]
    mid = [j["midlife_predicted_jct_s"] or 0 for j in report["jobs"]]
    bx.bar(x - 0.27, pred, 0.27, label="predicted at submission")
    bx.bar(x, mid, 0.27, label="predicted at mid-life")
    bx.bar(x + 0.27, act, 0.27, label="actual")
    bx.set_xticks(x, names, rotation=60, ha="right", fontsize=7)
    bx.set_ylabel("JCT (s)")
    summ = report["summary"]
    bx.set_title(f"JCT: mean |error| {summ['mean_abs_error_pct']:.0f}% at submission, "
                 f"{summ['mean_abs_error_midlife_pct']:.0f}% at mid-life", fontsize=9)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":  # pragma: no cover - `pcs-ray demo` is the entry point
    run_demo(sys.argv[1] if len(sys.argv) > 1 else "pcs-ray-demo")
