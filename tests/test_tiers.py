"""Packages in tiers, ground first, and no import cycles between files.

Tiers: the pure core (``pcs_ray`` minus the coordinator, client, CLI, training contract and the nested
packages) < ``pcs_ray.workloads`` and ``pcs_ray.train`` (the contract user code runs against: torch, never Ray) < ``pcs_ray.solver`` and ``pcs_ray.executors`` <
``pcs_ray.coordinator`` and
``pcs_ray.client`` < the CLI (``pcs_ray.cli``, ``pcs_ray.commands``). A module
may import its own tier or lower ones, never a higher one (a same-tier import
between ``solver`` and ``executors`` is not allowed either: they are siblings).
Every import counts, also those inside functions, because a lazy import is
still a dependency. The core and ``workloads`` must not import Ray, and the
core must not import torch.

The repository's ``workloads/``, ``solver/`` and ``executors/`` folders are the packages
``pcs_ray.workloads``, ``pcs_ray.solver`` and ``pcs_ray.executors``, and are imported by those names only.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
NESTED = ("workloads", "solver", "executors")  # folders at the root, installed inside pcs_ray
PACKAGES = ("pcs_ray", *NESTED)


def within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def tier_of(module: str) -> tuple[int, str]:
    """(rank, group): a module may import groups of lower rank, or its own group."""
    if within(module, "pcs_ray.cli", "pcs_ray.commands", "pcs_ray.__main__"):
        return 4, "cli"
    if within(module, "pcs_ray.coordinator", "pcs_ray.client", "pcs_ray.train.trainer"):
        return 3, "coordinator"
    if within(module, "pcs_ray.train"):
        return 1, "train"
    if within(module, "pcs_ray.solver", "pcs_ray.executors"):
        return 2, module.split(".")[1]
    if within(module, "pcs_ray.workloads"):
        return 1, "workloads"
    return 0, "core"


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[0] in NESTED:
                parts.insert(0, "pcs_ray")
            out[".".join(parts)] = path
    return out


def imports_of(module: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported project module, line) for every import statement in the file.

    Only what the statement names counts: the parent packages Python initialises on the way
    are not edges, or every package whose ``__init__`` re-exports its modules would be a cycle.
    """
    is_pkg = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            target = name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append((target, node.lineno))
    return found


def graph() -> tuple[nx.DiGraph, dict[tuple[str, str], int]]:
    known = modules()
    g = nx.DiGraph()
    lines = {}
    for mod, path in known.items():
        g.add_node(mod)
        for target, line in imports_of(mod, path, known):
            g.add_edge(mod, target)
            lines.setdefault((mod, target), line)
    return g, lines


def third_party(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_every_import_goes_down_a_tier():
    g, lines = graph()
    known = modules()
    bad = []
    for src, dst in g.edges:
        (rs, gs), (rd, gd) = tier_of(src), tier_of(dst)
        if rd > rs or (rd == rs and gs != gd):
            bad.append(f"{known[src].relative_to(ROOT)}:{lines[(src, dst)]} imports {dst} ({gd} tier) from the {gs} tier")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def test_no_import_cycles_between_files():
    g, lines = graph()
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_core_and_workloads_need_neither_ray_nor_torch_in_the_core():
    known = modules()
    bad = defaultdict(set)
    for mod, path in known.items():
        rank, _ = tier_of(mod)
        deps = third_party(path)
        if rank <= 1 and "ray" in deps:
            bad[mod].add("ray")
        if rank == 0 and deps & {"torch", "torchvision"}:
            bad[mod] |= deps & {"torch", "torchvision"}
    assert not bad, "\n".join(f"{m} imports {sorted(d)}" for m, d in sorted(bad.items()))


def top_level_imports_of_nested(path: Path) -> list[str]:
    """Imports of ``workloads``, ``solver`` or ``executors`` as top-level packages: those names are the user's."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
        found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in NESTED]
    return found


def test_the_nested_packages_are_imported_only_under_pcs_ray():
    """Product, tests, benchmarks and examples import ``pcs_ray.workloads`` and its siblings, never a top-level
    ``workloads``: that name is left to a user's own folder (and an import under it would escape the tier checks)."""
    files = [p for top in (*PACKAGES, "tests", "bench", "examples", "cloudlab") for p in (ROOT / top).rglob("*.py")]
    bad = [hit for path in files for hit in top_level_imports_of_nested(path)]
    assert files and not bad, "\n".join(bad)


def test_the_nested_packages_are_subpackages_of_pcs_ray():
    import pcs_ray
    import pcs_ray.executors
    import pcs_ray.solver
    import pcs_ray.workloads

    assert pcs_ray.NESTED_PACKAGES == NESTED
    for name, pkg in zip(NESTED, (pcs_ray.workloads, pcs_ray.solver, pcs_ray.executors)):
        assert Path(pkg.__file__).resolve() == ROOT / name / "__init__.py"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The parser resolves relative and absolute imports, so a violation cannot hide."""
    pkg = tmp_path / "pcs_ray" / "placement"
    pkg.mkdir(parents=True)
    (tmp_path / "pcs_ray" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .x import y\n")
    (pkg / "x.py").write_text("def f():\n    from pcs_ray.coordinator import core\n")
    known = {"pcs_ray": tmp_path / "pcs_ray/__init__.py", "pcs_ray.placement": pkg / "__init__.py",
             "pcs_ray.placement.x": pkg / "x.py", "pcs_ray.coordinator": tmp_path / "c.py",
             "pcs_ray.coordinator.core": tmp_path / "cc.py"}
    assert ("pcs_ray.placement.x", 1) in imports_of("pcs_ray.placement", pkg / "__init__.py", known)
    assert ("pcs_ray.coordinator.core", 2) in imports_of("pcs_ray.placement.x", pkg / "x.py", known)


#: What the forecast package may build on: the state, the policy and placement interfaces, itself.
FORECAST_GROUND = ("pcs_ray.forecast", "pcs_ray.jobs.state", "pcs_ray.jobs.spec", "pcs_ray.jobs.moves", "pcs_ray.policies.base",
                   "pcs_ray.placement.base")


def test_the_forecast_package_stands_on_the_policy_and_placement_interfaces():
    """Forecasting is a package of its own: it never imports the simulator (which imports it) or any
    module but the state, the rule that settles and charges a move (the engine's too), and the policy
    and placement interfaces."""
    known = modules()
    bad = [f"{mod} imports {dst}" for mod, path in known.items() if within(mod, "pcs_ray.forecast")
           for dst, _ in imports_of(mod, path, known) if not within(dst, *FORECAST_GROUND)]
    assert any(within(m, "pcs_ray.forecast") for m in known) and not bad, bad


#: What each package of the core may build on besides itself: its rooms below it, nothing sideways.
PACKAGE_GROUND = {
    "pcs_ray.cluster": ("pcs_ray.data",),
    "pcs_ray.jobs": ("pcs_ray.contract", "pcs_ray.cluster"),
    "pcs_ray.api": ("pcs_ray.contract",),
    "pcs_ray.tenants": ("pcs_ray.contract", "pcs_ray.cluster", "pcs_ray.jobs"),
    "pcs_ray.variability": ("pcs_ray.data", "pcs_ray.cluster", "pcs_ray.jobs"),
    "pcs_ray.power": ("pcs_ray.data", "pcs_ray.cluster", "pcs_ray.jobs", "pcs_ray.variability"),
    "pcs_ray.sim": ("pcs_ray.jobs", "pcs_ray.policies", "pcs_ray.forecast", "pcs_ray.tenants"),
}


@pytest.mark.parametrize("package", sorted(PACKAGE_GROUND))
def test_each_core_package_stands_on_its_ground(package):
    """A concern's folder imports only the rooms its ground names (``pcs_ray`` itself, whose ``__init__``
    imports nothing, aside): a new arrow between rooms is a decision, made here, not an accident."""
    known = modules()
    ground = (package, *PACKAGE_GROUND[package])
    bad = [f"{mod} imports {dst}" for mod, path in known.items() if within(mod, package)
           for dst, _ in imports_of(mod, path, known) if dst != "pcs_ray" and not within(dst, *ground)]
    assert any(within(m, package) for m in known) and not bad, bad


def defined_names(tree: ast.AST) -> set[str]:
    """Underscore names a module defines: functions, classes, module and class attributes, ``self.x``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return {n for n in out if n.startswith("_")}


def underscore_reads(path: Path) -> list[str]:
    """Where a module reads an underscore name it does not define: ``x._name`` on another object, or
    ``from project.module import _name``."""
    tree = ast.parse(path.read_text(), str(path))
    own = defined_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) and node.attr not in own:
                found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno} "
                             f"{ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            found += [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno} "
                      f"from {node.module} import {a.name}"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_reads_another_modules_underscore_names():
    bad = [hit for path in modules().values() for hit in underscore_reads(path)]
    assert not bad, "underscore names read from another module:\n" + "\n".join(sorted(bad))


def test_the_underscore_checker_sees_a_private_read(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("from pcs_ray.cluster import _hidden\n\nclass A:\n    def f(self, other):\n"
                   "        self._mine = 1\n        return other._mine + other._theirs\n")
    hits = sorted(h.split(" ", 1)[1] for h in underscore_reads(mod))
    assert hits == ["from pcs_ray.cluster import _hidden", "other._theirs"]  # other._mine: this module's own
