"""What ``pcs-ray simulate`` will run: the policies, the cluster (with its placement setup) and the jobs.

Everything a user can get wrong is found here, before any simulation starts,
and reported as one ``ValueError`` line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pcs_ray.cluster import ClusterSpec, load_cluster_spec
from pcs_ray.commands.inputs import UsageError
from pcs_ray.data import locate
from pcs_ray.commands.policy_runs import PolicyRun, resolve_policies
from pcs_ray.commands.simulate_options import SimulateOptions
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.placement.configure import PlacementSetup, configure_placement
from pcs_ray.cluster.topology import read_topo
from pcs_ray.workloads.generator import generate_workload
from pcs_ray.workloads.traces import default_speedup, read_trace


@dataclass
class Plan:
    runs: list[PolicyRun]
    jobs: list[JobSpec]
    capacity: int
    setup: PlacementSetup | None  # None: every GPU equal
    about: dict  # what ran, for the JSON's "workload"
    title: str  # the same, for the table
    power: object = None  # pcs_ray.power.profile.GPUPower with --power
    run_variability: str | None = None
    replay_seed: int = 0
    paired: dict[str, PlacementSetup] = field(default_factory=dict)  # run label -> its paper placement

    def setup_for(self, run: PolicyRun) -> PlacementSetup | None:
        """The placement ``run`` uses: ``--placement`` when given, else the one its paper pairs it with, else none."""
        return self.setup if self.setup is not None else self.paired.get(run.label)

    def chosen_by(self, run: PolicyRun) -> str | None:
        """Who chose ``run``'s placement: ``"--placement"``, ``"paper"`` (its paper's pairing), or None (none)."""
        if self.setup is not None:
            return "--placement"
        return "paper" if run.label in self.paired else None


def paper_placement(policy) -> str | None:
    """The placement a policy's paper pairs it with (the VAHRM family names one), or None."""
    return getattr(type(policy), "placement", None)


def _power(opts: SimulateOptions, spec: ClusterSpec, setup: PlacementSetup | None, runs: list[PolicyRun]):
    """The sampled power of the cluster's GPUs; placements and power-aware policies get the predictions."""
    from pcs_ray.policies import build_policy, policy_params
    from pcs_ray.power.profile import load_power_profile

    power = load_power_profile(opts.power).sample(spec, opts.profile_seed)
    if setup is not None:
        setup.cluster = power.onto(setup.cluster)
        setup.about["power"] = opts.power
    budget = opts.power_budget_kw * 1e3 if opts.power_budget_kw is not None else (
        opts.pcr * power.summed_tdp_w() if opts.pcr is not None else None)
    class_w = {c: float(v.mean()) for c, v in power.predicted.items()}
    for run in runs:
        if {"power", "budget_w"} <= set(policy_params(run.label)):
            unit = {"energy_unit": opts.energy_unit} if opts.energy_unit and "energy_unit" in policy_params(run.label) else {}
            run.policy = build_policy(run.label, power=class_w, tdp_w=power.tdp_w, budget_w=budget,
                                      gpu_power=power.predicted, idle_w=power.idle_w, **unit)
    return power, budget


def _cluster(opts: SimulateOptions, paired: bool = False) -> tuple[ClusterSpec, PlacementSetup | None]:
    """The cluster to simulate and its placement setup (None without --placement). ``paired``: some run
    brings its own paper placement, which the profile, topology and locality penalty then apply to."""
    if opts.placement is None and not paired and (opts.profile is not None or opts.topology is not None
                                                  or opts.locality_penalty is not None):
        raise UsageError("--profile, --topology and --locality-penalty need --placement")
    topology = str(locate("topology", opts.topology)) if opts.topology is not None else None
    gpus_per_node = opts.gpus_per_node
    if topology is not None and gpus_per_node is None and opts.cluster is None:
        gpus_per_node = read_topo(topology).size  # one topology per node: nodes of its size
    spec = load_cluster_spec(opts.cluster) if opts.cluster is not None else ClusterSpec.homogeneous(opts.gpus, gpus_per_node)
    if opts.placement is None:
        return spec, None
    setup = _configure(spec, opts.placement, opts, topology)
    return setup.cluster, setup


def _configure(spec: ClusterSpec, name: str, opts: SimulateOptions, topology: str | None) -> PlacementSetup:
    return configure_placement(spec, name, profile=opts.profile, profile_seed=opts.profile_seed,
                               topology=topology, locality_penalty=opts.locality_penalty)


def _paired(opts: SimulateOptions, spec: ClusterSpec, power, runs: list[PolicyRun]) -> dict[str, PlacementSetup]:
    """Without --placement, each run whose paper names a placement gets a setup of it (with the
    profile, topology, locality penalty and power the options give)."""
    if opts.placement is not None:
        return {}
    topology = str(locate("topology", opts.topology)) if opts.topology is not None else None
    out = {}
    for run in runs:
        name = paper_placement(run.policy)
        if name is None:
            continue
        setup = _configure(spec, name, opts, topology)
        if power is not None:
            setup.cluster = power.onto(setup.cluster)
            setup.about["power"] = opts.power
        out[run.label] = setup
    return out


def make_plan(opts: SimulateOptions) -> Plan:
    """The plan for checked ``SimulateOptions``."""
    runs = resolve_policies(opts.policy, opts.pcs_config, opts.semantics.value)
    if opts.skip_threshold is not None:
        from pcs_ray.policies.rush import RushPolicy

        if not any(isinstance(run.policy, RushPolicy) for run in runs):
            raise UsageError("--skip-threshold applies to the rush policy (--policy rush)")
        for run in runs:
            if isinstance(run.policy, RushPolicy):
                run.policy = RushPolicy(skip_threshold=opts.skip_threshold, retry=run.policy.retry)
    if opts.energy_unit is not None:
        from pcs_ray.policies import build_policy

        vahrm = [run for run in runs if run.label == "vahrm"]
        if not vahrm:
            raise UsageError("--energy-unit applies to the vahrm policy (--policy vahrm)")
        for run in vahrm:
            run.policy = build_policy("vahrm", energy_unit=opts.energy_unit)
    spec, setup = _cluster(opts, paired=any(paper_placement(run.policy) for run in runs))
    capacity = spec.num_gpus
    power, budget = _power(opts, spec, setup, runs) if opts.power is not None else (None, None)
    if opts.trace is not None:
        trace = locate("trace", opts.trace)
        speedup = opts.speedup.value if opts.speedup is not None else default_speedup(trace)
        jobs = read_trace(trace, speedup=speedup)
        about = {"source": "trace", "trace": str(trace), "speedup": speedup}
        title = f"{trace}"
    else:
        name = opts.workload
        jobs = generate_workload(name, opts.num_jobs, capacity, load=opts.load, seed=opts.seed)
        about = {"source": "generated", "workload": name, "num_jobs": opts.num_jobs, "load": opts.load,
                 "seed": opts.seed}
        title = f"{name}: {opts.num_jobs} jobs at load {opts.load:g}, seed {opts.seed}"
    about.update({
        "jobs": len(jobs), "gpus": capacity, "nodes": len(spec.nodes), "gpus_per_node": spec.gpus_per_node,
        "cluster": str(opts.cluster) if opts.cluster is not None else None, "overhead": opts.overhead,
        "predict": opts.predict, "semantics": opts.semantics.value,
    })
    if power is not None:
        about["power"] = {"profile": opts.power, "profile_seed": opts.profile_seed, "idle_w": power.idle_w,
                          "tdp_w": power.tdp_w, "budget_kw": None if budget is None else budget / 1e3}
    paired = _paired(opts, spec, power, runs)
    if setup is not None:
        about["placement"] = setup.about
        title += f", placement {setup.name}"
    elif paired:
        about["placements"] = {label: p.name for label, p in paired.items()}  # details: each run's "placement"
        title += ", " + ", ".join(f"{label} on {p.name}" for label, p in paired.items())
    title += f" on {capacity} GPUs ({len(spec.nodes)} node{'s' if len(spec.nodes) != 1 else ''})"
    if opts.semantics.value != "continuous":
        title += f", {opts.semantics.value} semantics"
    if opts.run_variability is not None:
        about["run_variability"] = {"source": opts.run_variability, "seed": opts.profile_seed}
    return Plan(runs, jobs, capacity, setup, about, title, power, opts.run_variability, opts.profile_seed, paired)
