"""The demo's picture: which job held which GPU over time, and predicted vs actual JCT per job."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pcs_ray.commands.demo_cluster import GPUS_PER_NODE


def plot_report(report: dict, path: Path) -> None:
    """GPU-assignment timeline (one row per GPU, one colour per job) and predicted vs actual JCT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = report["cluster"].get("gpu_names") or [f"{n}:{i}" for n in report["cluster"]["nodes"] for i in range(GPUS_PER_NODE)]
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
