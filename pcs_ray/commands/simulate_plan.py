"""What ``pcs-ray simulate`` will run: the policies, the cluster (with its placement setup) and the jobs.

Everything a user can get wrong is found here, before any simulation starts,
and reported as one ``ValueError`` line.
"""

from __future__ import annotations

from dataclasses import dataclass

from pcs_ray.cluster import ClusterSpec, load_cluster_spec
from pcs_ray.commands.inputs import UsageError
from pcs_ray.data import locate
from pcs_ray.commands.policy_runs import PolicyRun, resolve_policies
from pcs_ray.commands.simulate_options import SimulateOptions
from pcs_ray.job import JobSpec
from pcs_ray.placement.configure import PlacementSetup, configure_placement
from pcs_ray.topology import read_topo
from workloads.generator import generate_workload
from workloads.traces import default_speedup, read_trace


@dataclass
class Plan:
    runs: list[PolicyRun]
    jobs: list[JobSpec]
    capacity: int
    setup: PlacementSetup | None  # None: every GPU equal
    about: dict  # what ran, for the JSON's "workload"
    title: str  # the same, for the table


def _cluster(opts: SimulateOptions) -> tuple[ClusterSpec, PlacementSetup | None]:
    """The cluster to simulate and its placement setup (None without --placement)."""
    if opts.placement is None and (opts.profile is not None or opts.topology is not None
                                   or opts.locality_penalty is not None):
        raise UsageError("--profile, --topology and --locality-penalty need --placement")
    topology = str(locate("topology", opts.topology)) if opts.topology is not None else None
    gpus_per_node = opts.gpus_per_node
    if topology is not None and gpus_per_node is None and opts.cluster is None:
        gpus_per_node = read_topo(topology).size  # one topology per node: nodes of its size
    spec = load_cluster_spec(opts.cluster) if opts.cluster is not None else ClusterSpec.homogeneous(opts.gpus, gpus_per_node)
    if opts.placement is None:
        return spec, None
    setup = configure_placement(spec, opts.placement, profile=opts.profile, profile_seed=opts.profile_seed,
                                topology=topology, locality_penalty=opts.locality_penalty)
    return setup.cluster, setup


def make_plan(opts: SimulateOptions) -> Plan:
    """The plan for checked ``SimulateOptions``."""
    runs = resolve_policies(opts.policy, opts.pcs_config)
    spec, setup = _cluster(opts)
    capacity = spec.num_gpus
    if opts.trace is not None:
        trace = locate("trace", opts.trace)
        speedup = opts.speedup.value if opts.speedup is not None else default_speedup(trace)
        jobs = read_trace(trace, speedup=speedup)
        about = {"source": "trace", "trace": str(trace), "speedup": speedup}
        title = f"{trace}"
    else:
        name = opts.workload
        jobs = generate_workload(name, opts.num_apps, capacity, load=opts.load, seed=opts.seed)
        about = {"source": "generated", "workload": name, "num_apps": opts.num_apps, "load": opts.load,
                 "seed": opts.seed}
        title = f"{name}: {opts.num_apps} apps at load {opts.load:g}, seed {opts.seed}"
    about.update({
        "jobs": len(jobs), "gpus": capacity, "nodes": len(spec.nodes), "gpus_per_node": spec.gpus_per_node,
        "cluster": str(opts.cluster) if opts.cluster is not None else None, "overhead": opts.overhead,
        "predict": opts.predict,
    })
    if setup is not None:
        about["placement"] = setup.about
        title += f", placement {setup.name}"
    title += f" on {capacity} GPUs ({len(spec.nodes)} node{'s' if len(spec.nodes) != 1 else ''})"
    return Plan(runs, jobs, capacity, setup, about, title)
