"""``--policy`` and ``--pcs-config`` values as labelled policy runs (what ``simulate`` compares)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pcs_ray.commands.inputs import UsageError
from pcs_ray.data import locate
from pcs_ray.policies import BUNDLED, POLICIES, SchedulingPolicy, WFQConfig, build_policy
from pcs_ray.sim.semantics import ordered_policies, with_semantics


@dataclass
class PolicyRun:
    label: str
    policy: SchedulingPolicy


def _pcs_runs(pcs_configs: list[str]) -> list[PolicyRun]:
    """``pcs`` alone: the bundled configurations; with ``--pcs-config``: one run per value, by its stem."""
    if not pcs_configs:
        return [PolicyRun(name, build_policy(name)) for name in BUNDLED]
    stems = [Path(v).stem for v in pcs_configs]
    runs = []
    for value, stem in zip(pcs_configs, stems):
        label = f"pcs:{stem}" if stems.count(stem) == 1 else f"pcs:{value}"
        runs.append(PolicyRun(label, build_policy("pcs", config=WFQConfig.load(locate("pcs-config", value)))))
    return runs


def resolve_policies(names: list[str], pcs_configs: list[str], semantics: str = "continuous") -> list[PolicyRun]:
    """Expand ``--policy`` values (repeatable, comma-separated, ``all``) into labelled runs, repeats dropped,
    each run under ``semantics`` (``all`` under ``blox``: the policies that are a priority order)."""
    tokens = [t.strip().lower() for value in names for t in value.split(",") if t.strip()]
    if not tokens:
        raise UsageError("--policy is empty; give a policy name or 'all'")
    # ``tenants`` wraps another policy and only differs from it with tenants or a minimum runtime: named, not in all.
    every = ordered_policies() if semantics != "continuous" else [n for n in POLICIES if n != "tenants"]
    expanded: list[str] = []
    for t in tokens:
        expanded.extend(every if t == "all" else [t])
    if pcs_configs and "pcs" not in expanded:
        raise UsageError("--pcs-config needs the pcs policy (--policy pcs or all)")
    runs: list[PolicyRun] = []
    for name in dict.fromkeys(expanded):  # keep order, drop repeats
        runs.extend(_pcs_runs(pcs_configs) if name == "pcs" else [PolicyRun(name, build_policy(name))])
    unique: dict[str, PolicyRun] = {}
    for run in runs:
        unique.setdefault(run.label, run)
    try:
        return [PolicyRun(run.label, with_semantics(run.policy, semantics)) for run in unique.values()]
    except ValueError as e:
        raise UsageError(f"--semantics {semantics}: {e}") from None
