"""What ``pcs-ray demo`` submits: real PyTorch jobs of mixed sizes and classes, and the WFQ that schedules them."""

from __future__ import annotations

# WFQ(T, W, zeta): three queues by job size (GPU-seconds at one GPU), weights e^(-i W) with W = 1,
# thresholds sized for these short jobs.
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


def demo_jobs(n: int) -> list[tuple[float, dict]]:
    """``n`` (arrival s, job spec) pairs: the list above, repeated a minute later with new names and seeds."""
    out = []
    for k in range(n):
        at, name, workload, steps, gpus, min_gpus, cls, params, _ = DEMO_JOBS[k % len(DEMO_JOBS)]
        rep = k // len(DEMO_JOBS)
        spec = {
            "name": name if rep == 0 else f"{name}-{rep + 1}", "workload": workload, "steps": steps, "gpus": gpus,
            "min_gpus": min_gpus, "class": cls, "checkpoint_every": max(10, steps // 4),
            "params": {**params, "seed": k},
        }
        out.append((at + 60.0 * rep, spec))
    return out


def calibration_jobs() -> list[dict]:
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
