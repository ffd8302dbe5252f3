"""The reference data the product ships, addressable by name.

The files (PCS traces, CDFs, configurations and speedup curves; PAL's
variability profiles and Sia-Philly traces; MAPA's regression; ``nvidia-smi
topo -m`` outputs) live in this folder with their licences and
``PROVENANCE.md``. ``$PCS_RAY_DATA`` points at another folder of the same
layout. A value that names an existing file is used as that file, so every
option that takes a name also takes a path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BUNDLED = Path(__file__).resolve().parent

# Bundled PCS configurations are named <workload>-<kind>; the three kinds of the paper (Fig. 6).
PCS_CONFIG_KINDS = ("jct", "bal", "pred")


class DataError(ValueError):
    """A data name that is not bundled and not a file."""


def data_dir() -> Path:
    """The reference data folder: ``$PCS_RAY_DATA`` when set, else the bundled copy."""
    env = os.environ.get("PCS_RAY_DATA")
    return Path(env) if env else BUNDLED


@dataclass(frozen=True)
class Kind:
    """One kind of data: how a name maps to a file, and what it is."""

    name: str
    folder: str
    pattern: str  # glob under ``folder``; ``{}`` is the name
    about: str

    def path(self, name: str) -> Path:
        return data_dir() / self.folder / self.pattern.replace("*", name)

    def names(self) -> list[str]:
        base = data_dir() / self.folder
        head, _, tail = self.pattern.partition("*")
        return sorted(p.name[len(head): len(p.name) - len(tail)] for p in base.glob(self.pattern))


# A trace name is <family>/<name>; each family is one folder and file pattern.
TRACE_FAMILIES = {
    "philly": Kind("philly", "pcs/traces", "trace_*.csv", "PCS/Philly trace of one virtual cluster"),
    "sia-philly": Kind("sia-philly", "pal/sia-philly", "*.csv", "Sia-Philly trace of PAL's simulations"),
    "testbed": Kind("testbed", "pcs/testbed", "trace_*.csv", "PCS testbed trace"),
}
KINDS = {
    "workload": Kind("workload", "pcs/workloads", "cdf-app-service-times-*.csv", "CDF workload for --workload"),
    "pcs-config": Kind("pcs-config", "pcs/configs", "PCS_config_*.json", "PCS WFQ configuration"),
    "topology": Kind("topology", "topology", "*.topo", "nvidia-smi topo -m output of a real system"),
}
# Named variability profiles are read by ``pcs_ray.placement.profiles`` from several files each.
PROFILES = {
    "longhorn": "TACC Longhorn V100s (4 applications, per-run records)",
    "frontera": "TACC Frontera RTX 5000s",
    "ls6": "TACC Lonestar6",
    "32gpu": "32 Frontera GPUs with per-class scores",
    "pal-sim64": "the PAL artifact's simulated 64-GPU cluster (16 x 4): its per-GPU draw and its bins",
}


def resolve(kind: str, value: str | Path) -> Path:
    """The file a name (or a path) stands for; ``DataError`` lists the names when it is neither."""
    path = Path(value)
    if path.is_file():
        return path
    text = str(value)
    if kind == "trace":
        family, _, name = text.partition("/")
        if family in TRACE_FAMILIES and name:
            candidate = TRACE_FAMILIES[family].path(name)
            if candidate.is_file():
                return candidate
        if text == "themis1-artifact":
            return data_dir() / "pcs/reference/themis1-artifact/trace.csv"
    elif kind in KINDS:
        key = text.replace("-", "_") if kind == "pcs-config" else text
        candidate = KINDS[kind].path(key)
        if candidate.is_file():
            return candidate
    else:
        raise DataError(f"unknown kind of data {kind!r}")
    shown = names(kind)
    listed = ", ".join(shown[:12]) + (f", ... ({len(shown)} in all; `pcs-ray data` lists them)" if len(shown) > 12 else "")
    raise DataError(f"{kind} {text!r} is neither a file nor a bundled name ({listed})")


def locate(kind: str, value: str | Path) -> Path:
    """Like :func:`resolve`, but a value that looks like a path (a suffix, a folder) and is no file
    comes back as is, so its reader reports it missing in its own words; only a bare word that
    is neither fails here, with the bundled names of that kind."""
    try:
        return resolve(kind, value)
    except DataError:
        path = Path(value)
        if path.suffix or path.is_absolute() or (len(path.parts) > 1 and path.parent.is_dir()):
            return path
        raise


def names(kind: str) -> list[str]:
    """Every bundled name of a kind."""
    if kind == "trace":
        out = [f"{fam}/{n}" for fam, k in TRACE_FAMILIES.items() for n in k.names()]
        return out + ["themis1-artifact"]
    if kind == "profile":
        return list(PROFILES)
    if kind == "pcs-config":
        return [n.replace("_", "-") for n in KINDS[kind].names()]
    return KINDS[kind].names()


def pcs_config(workload: str = "themis1", kind: str = "jct") -> Path:
    """The PCS authors' configuration for ``workload`` (best JCT, balanced or best predictability)."""
    return resolve("pcs-config", f"{workload}-{kind}")


def catalog() -> dict[str, dict]:
    """Every kind with its description and names, for ``pcs-ray data``."""
    about = {"trace": "job trace for --trace (" + "; ".join(f"{f}/: {k.about}" for f, k in TRACE_FAMILIES.items())
                      + "; themis1-artifact: the PCS artifact's themis1 sample)",
             "profile": "GPU variability profile for --profile (" + "; ".join(f"{k}: {v}" for k, v in PROFILES.items()) + ")"}
    about |= {k: v.about for k, v in KINDS.items()}
    return {kind: {"about": about[kind], "names": names(kind)} for kind in ("trace", "workload", "pcs-config",
                                                                             "profile", "topology")}
