"""``pcs-ray report STATE_DIR``: the GPU timeline, JCT CDF and predicted-vs-actual plots of any run, from its journal.

The journal is read, never written (a copy is opened, so a damaged one is
recovered in the copy). GPU names come from ``STATE_DIR/cluster-spec.yaml``
(``pcs-ray up`` writes it) or ``--cluster-spec``; otherwise GPUs are shown by
id. Predictions at submission are in journals written by coordinators that
note them (``predicted`` events); older journals give the timeline and CDF only.
Each job's energy is measured where its runners sent NVML readings
(``telemetry`` events), else modelled from the cluster spec's predicted power
per GPU and class over its runs, else null (``source`` says which).
The timeline and predicted-vs-actual panels are the demo's (``demo_plot``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from pcs_ray.commands.live import JSON_OUT
from pcs_ray.commands.views import strict_json


def journal_status(state_dir: Path, cluster_spec: Path | None = None,
                   config_events: list | None = None) -> tuple[dict, list[str]]:
    """A ``status``-shaped dict (absolute times) and the GPU names, from the journal replayed through the
    coordinator's own interpreter (``JournalInterpreter``) and views. ``policy``: the one the latest start journaled.
    ``config_events``: filled with the ``(t, kind, data)`` of the events that changed the configuration."""
    from pcs_ray.dashboard.history import CONFIG_KINDS
    from pcs_ray.cluster import load_cluster_spec
    from pcs_ray.coordinator import views
    from pcs_ray.coordinator.journal import Journal
    from pcs_ray.coordinator.journal_interpreter import JournalInterpreter

    source = state_dir / "journal.sqlite"
    if not source.is_file():
        raise FileNotFoundError(f"no journal in {state_dir} (journal.sqlite)")
    spec_path = cluster_spec or (state_dir / "cluster-spec.yaml")
    names: list[str] = []
    power: list[dict] = []  # per GPU id: predicted W per class
    if spec_path.is_file():
        spec = load_cluster_spec(spec_path)
        names = [f"{n.name}:{g.index}" for n in spec.nodes for g in n.gpus]
        power = [dict(g.power) for n in spec.nodes for g in n.gpus]
    interpreter, last = JournalInterpreter(), 0.0
    with tempfile.TemporaryDirectory(prefix="pcs-ray-report-") as tmp:
        for suffix in ("", "-wal"):
            if Path(str(source) + suffix).exists():
                shutil.copy(str(source) + suffix, Path(tmp) / ("journal.sqlite" + suffix))
        journal = Journal(Path(tmp) / "journal.sqlite")
        try:
            for ev in journal.events():
                interpreter.apply(ev.t, ev.kind, ev.job_id, ev.data)
                last = ev.t
                if config_events is not None and ev.kind in CONFIG_KINDS:
                    config_events.append((ev.t, ev.kind, ev.data))
        except (KeyError, TypeError, AttributeError) as e:  # a record this version cannot read
            raise ValueError(f"{source}: record {ev.seq} ({ev.kind}) cannot be read: {type(e).__name__} {e}") from None
        finally:
            journal.close()
    if not names:
        top = max((g for job in interpreter.jobs.values() for seg in job.segments for g in seg["gpus"]), default=-1)
        names = [f"gpu{g}" for g in range(top + 1)]

    def name(g: int) -> str:
        return names[g] if 0 <= g < len(names) else f"gpu{g}"

    def watts(job_class: str, g: int) -> float | None:
        return power[g].get(job_class) if 0 <= g < len(power) else None

    epoch = interpreter.epoch or 0.0
    # A run still open is modelled up to the journal's last event.
    status = views.status(epoch + last, epoch, interpreter.started_with or {}, len(names), 0.0, interpreter.jobs.values(), name,
                          watts if power else None)
    return status, names


def _local_state(source: str, out: Path | None) -> tuple[Path, Path | None]:
    """The state folder to read: ``source`` itself, or for a storage URI a copy rebuilt from its journal's mirror
    (then the report goes to ``./pcs-ray-report`` unless ``out`` says where)."""
    if "://" not in source:
        return Path(source).expanduser(), out
    import tempfile

    from pcs_ray.coordinator.journal_mirror import restore
    from pcs_ray.storage import open_storage

    local = Path(tempfile.mkdtemp(prefix="pcs-ray-report-"))
    if not restore(open_storage(source), local):
        raise FileNotFoundError(f"no journal in {source} (journal/: a coordinator started with --storage writes it)")
    return local, out or Path("pcs-ray-report")


def report_cmd(
    state_dir: Annotated[str, typer.Argument(help="The run's state folder (holding journal.sqlite), or the cluster's "
                                              "storage URI (`start --storage`: the journal's mirror there).")],
    out: Annotated[Path | None, typer.Option("--out", help="Folder for report.json and the plots [default: STATE_DIR/report].",
                                             show_default=False)] = None,
    cluster_spec: Annotated[Path | None, typer.Option("--cluster-spec", help="Names the GPUs (default: STATE_DIR/cluster-spec.yaml).")] = None,
    html: Annotated[bool, typer.Option("--html", help="Also write the dashboard's pages (timeline, jobs, cluster, "
                                       "tenants, policy) as static HTML under OUT/html, readable offline.")] = False,
    as_json: Annotated[bool, JSON_OUT] = False,
) -> None:
    """Plot a run from its journal: GPU timeline, JCT CDF, predicted vs actual JCT (and, with --html, the
    dashboard's pages as they stood at the journal's last event)."""
    from pcs_ray.cluster import ClusterSpec, NodeSpec, GPUSpec, sim_uuid
    from pcs_ray.commands.demo_plot import plot_report
    from pcs_ray.commands.demo_report import build_report

    state_dir, out = _local_state(state_dir, out)
    config_events: list = []
    status, names = journal_status(state_dir, cluster_spec, config_events)
    if not status["jobs"]:
        raise ValueError(f"the journal in {state_dir} holds no jobs")
    nodes: dict[str, int] = {}
    for g in names:
        node = g.split(":")[0] if ":" in g else "gpus"
        nodes[node] = nodes.get(node, 0) + 1
    cluster = ClusterSpec(nodes=[NodeSpec(name=n, gpus=[GPUSpec(index=i, uuid=sim_uuid(n, i)) for i in range(k)])
                                 for n, k in nodes.items()])
    submitted = {j["id"]: {"predicted": j["first_predicted"]} for j in status["jobs"]}
    finishes = [j["finish"] for j in status["jobs"] if j["finish"]]
    wall = (max(finishes) - min(j["submit"] for j in status["jobs"])) if finishes else 0.0
    report = build_report(status, submitted, cluster, ["rebuilt from the journal"], wall)
    report["cluster"]["gpu_names"] = names
    report["skips"] = [{"id": j["id"], "name": j["name"], "skips": j["skips"], "last_reason": j["skip_reason"]}
                       for j in status["jobs"] if j["skips"]]  # RUSH's skipped starts, per job
    folder = out or state_dir / "report"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(strict_json(report, indent=1, default=str))
    plot_report(report, folder / "timeline.png")
    _plot_cdf(report, folder / "jct-cdf.png")
    result = {"jobs": len(report["jobs"]), "finished": report["summary"]["finished"],
              "report": str(folder / "report.json"), "plots": [str(folder / "timeline.png"), str(folder / "jct-cdf.png")],
              "predictions": sum(j["predicted_jct_s"] is not None for j in report["jobs"]),
              "skips": sum(s["skips"] for s in report["skips"]), "jobs_skipped": len(report["skips"]),
              "energy_j": report["summary"]["energy_j"], "energy_sources": report["summary"]["energy_sources"]}
    if html:
        from pcs_ray.dashboard.static_report import write_pages

        pages = write_pages(journal_snapshot(status, cluster, config_events, cluster_spec or state_dir / "cluster-spec.yaml"),
                            folder / "html")
        result["html"] = str(folder / "html" / "timeline.html")
        result["html_pages"] = len([p for p in pages if p.suffix == ".html"])
    print(strict_json(result) if as_json else
          f"{result['jobs']} job(s), {result['finished']} finished, {result['predictions']} with a prediction at "
          f"submission: {folder}/timeline.png (GPU timeline, predicted vs actual), {folder}/jct-cdf.png"
          + (f"; {result['skips']} skipped start(s) of {result['jobs_skipped']} job(s) (RUSH): " + "; ".join(
              f"job {s['id']} x{s['skips']} ({s['last_reason']})" for s in report["skips"]) if report["skips"] else "")
          + (f"; dashboard pages: {result['html']} (and {result['html_pages'] - 1} more beside it)" if html else ""))


def journal_snapshot(status: dict, cluster, config_events: list, spec_path: Path) -> dict:
    """The dashboard's snapshot (``pcs_ray.dashboard.snapshot``) of a run at its journal's last event: its jobs
    as ``journal_status`` rebuilt them, its GPUs (NVLink groups where the cluster spec gives topologies), and
    the configuration history. The journal keeps no forecast but the one at submission, so no bar is predicted."""
    from pcs_ray.cluster import load_cluster_spec
    from pcs_ray.coordinator.dashboard_state import cluster_layout
    from pcs_ray.dashboard.history import config_history

    history = config_history(config_events, None)
    tenants = next((data["tenants"] for _, kind, data in reversed(config_events) if kind == "tenants"), None)
    since = next((h["t"] for h in reversed(history) if h["kind"] == "tenants apply"), None)
    usage: dict[str, dict] = {}
    for job in status["jobs"]:
        if job["state"] not in ("finished", "cancelled", "failed"):
            row = usage.setdefault(job["tenant"] or "", {"jobs": 0, "waiting": 0, "gpus": 0})
            row["jobs"] += 1
            row["waiting"] += job["state"] == "queued"
            row["gpus"] += len(job["gpus"])
    latest = history[-1] if history else {"t": status["epoch"], "source": "start"}
    policy = dict(status.get("policy") or {})
    if latest.get("kind") == "config set":
        policy = {"policy": latest["what"]}
    for job in status["jobs"]:
        job.setdefault("waiting", None)
        job.setdefault("protected_until", None)
    spec = load_cluster_spec(spec_path) if spec_path.is_file() else cluster
    return {"now": status["now"], "jobs": status["jobs"], "nodes": cluster_layout(spec),
            "config": {"policy": policy, "placement": None, "source": latest.get("source"), "since": latest["t"]},
            "tenants": {"tenants": tenants, "since": since, "usage": usage}, "history": history}


def _plot_cdf(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("jct_s", "actual"), ("predicted_jct_s", "predicted at submission")):
        values = np.sort([j[key] for j in report["jobs"] if j[key] is not None and j["jct_s"] is not None])
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=label)
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_title("JCT CDF")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
