"""The options of ``pcs-ray simulate`` as one value, checked before anything is read or run."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from pcs_ray.commands.inputs import UsageError

DEFAULT_WORKLOAD = "themis1"
DEFAULT_NUM_JOBS = 500
DEFAULT_LOAD = 0.9
DEFAULT_SEED = 4567


class Speedup(str, Enum):
    linear = "linear"
    model = "model"


class Semantics(str, Enum):
    """How decisions become a schedule (``pcs_ray.sim.semantics``)."""

    continuous = "continuous"
    blox = "blox"


@dataclass(frozen=True)
class SimulateOptions:
    """The command's options as given (``None``: not given); ``checked`` validates them and fills defaults."""

    trace: str | None
    workload: str | None
    num_jobs: int | None
    load: float | None
    seed: int | None
    gpus: int
    gpus_per_node: int | None
    cluster: Path | None
    policy: list[str] | None
    pcs_config: list[str] | None
    speedup: Speedup | None
    overhead: float
    predict: bool
    per_job: Path | None
    placement: str | None
    profile: str | None
    profile_seed: int
    topology: str | None
    locality_penalty: float | None
    workers: int
    semantics: Semantics | None
    run_variability: str | None
    skip_threshold: int | None
    as_json: bool
    power: str | None = None
    power_budget_kw: float | None = None
    pcr: float | None = None
    energy_unit: str | None = None

    def checked(self) -> "SimulateOptions":
        """These options with defaults filled in; ``UsageError`` for combinations or values that cannot work."""
        if self.trace is not None and self.workload is not None:
            raise UsageError("--trace and --workload are mutually exclusive")
        if self.trace is not None:
            given = [n for n, v in (("--num-jobs", self.num_jobs), ("--load", self.load), ("--seed", self.seed))
                     if v is not None]
            if given:
                verb = "apply" if len(given) > 1 else "applies"
                raise UsageError(f"{', '.join(given)} {verb} only to generated workloads, not to --trace")
        elif self.speedup is not None:
            raise UsageError("--speedup applies to --trace files; generated workloads scale linearly")
        opts = replace(
            self,
            num_jobs=DEFAULT_NUM_JOBS if self.num_jobs is None else self.num_jobs,
            load=DEFAULT_LOAD if self.load is None else self.load,
            seed=DEFAULT_SEED if self.seed is None else self.seed,
            speedup=self.speedup,  # None: the trace format's own default (model curves for PCS/Philly)
            workload=None if self.trace is not None else self.workload or DEFAULT_WORKLOAD,
            policy=self.policy or ["all"],
            pcs_config=list(self.pcs_config or []),
            semantics=self.semantics or Semantics.continuous,
        )
        if opts.num_jobs < 1:
            raise UsageError(f"--num-jobs must be >= 1, got {opts.num_jobs}")
        if not (opts.load > 0 and math.isfinite(opts.load)):
            raise UsageError(f"--load must be a number > 0, got {opts.load}")
        if opts.gpus < 1:
            raise UsageError(f"--gpus must be >= 1, got {opts.gpus}")
        if opts.gpus_per_node is not None and opts.gpus_per_node < 1:
            raise UsageError(f"--gpus-per-node must be >= 1, got {opts.gpus_per_node}")
        if not (opts.overhead >= 0 and math.isfinite(opts.overhead)):
            raise UsageError(f"--overhead must be a number of seconds >= 0, got {opts.overhead}")
        if opts.per_job is not None and not opts.per_job.parent.is_dir():
            raise UsageError(f"--per-job: folder {opts.per_job.parent} does not exist")
        if opts.per_job is not None and opts.per_job.is_dir():
            raise UsageError(f"--per-job: {opts.per_job} is a folder")
        if opts.skip_threshold is not None and opts.skip_threshold < 0:
            raise UsageError(f"--skip-threshold must be >= 0, got {opts.skip_threshold}")
        if opts.run_variability is not None:
            from pcs_ray.variability.run_replay import SOURCES

            if opts.run_variability not in SOURCES:
                raise UsageError(f"unknown --run-variability {opts.run_variability!r}; valid: {', '.join(SOURCES)}")
            if opts.placement is None:
                raise UsageError("--run-variability needs --placement (runs vary per GPU)")
        if opts.workers < 1:
            raise UsageError(f"--workers must be >= 1, got {opts.workers}")
        if opts.power_budget_kw is not None and opts.pcr is not None:
            raise UsageError("--power-budget-kw and --pcr are two ways to set one budget: give one")
        if opts.power_budget_kw is not None and not (opts.power_budget_kw > 0 and math.isfinite(opts.power_budget_kw)):
            raise UsageError(f"--power-budget-kw must be a number of kW > 0, got {opts.power_budget_kw}")
        if opts.pcr is not None and not (opts.pcr > 0 and math.isfinite(opts.pcr)):
            raise UsageError(f"--pcr must be a fraction of the summed TDP > 0, got {opts.pcr}")
        from pcs_ray.policies.power_aware import ENERGY_UNITS

        if opts.energy_unit is not None and opts.energy_unit not in ENERGY_UNITS:
            raise UsageError(f"--energy-unit must be one of {', '.join(ENERGY_UNITS)}, got {opts.energy_unit!r}")
        if (opts.power_budget_kw is not None or opts.pcr is not None) and opts.power is None:
            raise UsageError("--power-budget-kw and --pcr need --power (a power profile)")
        if opts.workers > 1 and opts.power is not None:
            raise UsageError("--workers > 1 does not combine with --power (energy is accounted in one process)")
        return opts
