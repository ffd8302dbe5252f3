"""The simulated half of ``pcs-ray replay``: the same jobs, cluster, policy and placement in the simulator.

Each job's size, scaling and start/stop costs come from what the live
coordinator measured (its speed model, ``status()["speeds"]``), so the
simulator plays exactly what the live model believes; the gap between the
two is then what the live system does that the model does not know.
"""

from __future__ import annotations

from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.coordinator.speed import SpeedModel
from pcs_ray.jobs.jobfile import parse_job
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.placement import create_placement
from pcs_ray.policies import SchedulingPolicy, build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.workloads.joblist import ListedJob


def policy_from(described: dict) -> SchedulingPolicy:
    """A policy rebuilt from its ``describe()`` (what a coordinator's ``config()`` says is in force)."""
    params = {k: v for k, v in described.items() if k != "policy"}
    if "class_thresholds" in params:
        return build_policy("pcs", config=params)
    return build_policy(described["policy"])


def speed_model(speeds: dict | None) -> SpeedModel:
    """A speed model holding what a live coordinator learned (its ``status()["speeds"]``)."""
    model = SpeedModel()
    if speeds:
        model.merge(speeds)
        model.estimate_ratio = float(speeds.get("estimate_ratio", 1.0))
    return model


def sim_specs(jobs: list[ListedJob], speeds: SpeedModel, extra: dict | None = None) -> list[JobSpec]:
    """The jobs as the simulator sees them, sized and costed by ``speeds``."""
    out = []
    for i, job in enumerate(jobs, start=1):
        spec = parse_job(job.spec(**(extra or {})), f"job {job.name}")
        live = LiveJob(i, spec, job.submit_s, t1=speeds.estimate(spec))
        start, move = speeds.job_costs(live)
        out.append(JobSpec(
            job_id=i, submit_time=job.submit_s, service=job.steps * live.t1, max_gpus=job.gpus,
            speedup=speeds.speedup(spec), min_gpus=job.min_gpus, model=job.workload, job_class=job.job_class,
            name=job.name, start_cost=start, move_cost=move,
        ))
    return out


def simulate_joblist(jobs: list[ListedJob], cluster: ClusterSpec, policy: dict, placement: str,
                     speeds: dict | None, extra: dict | None = None) -> dict[str, dict]:
    """Per job name: simulated JCT and the prediction made at its submission (both seconds after it)."""
    model = speed_model(speeds)
    specs = sim_specs(jobs, model, extra)
    result = simulate(specs, cluster.num_gpus, policy_from(policy), predict=True,
                      placement=create_placement(placement, cluster))
    by_id = {s.job_id: s for s in specs}
    out = {}
    for rec in result.records:
        spec = by_id[rec.job_id]
        out[spec.name] = {
            "jct_s": rec.jct, "predicted_jct_s": None if rec.first_pred is None else rec.first_pred - rec.submit,
            "preemptions": rec.preemptions,
        }
    return out
