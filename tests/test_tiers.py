"""Packages in tiers, ground first, and no import cycles, on grimp's import graph of the installed package.

The tiers, the Ray- and torch-free core, the trainer's place and acyclic rooms are import-linter contracts
(``[tool.importlinter]`` in ``pyproject.toml``; ``lint-imports`` checks them). Kept here, because a contract
cannot say it:

- which rooms a core package may import: a whitelist, where a forbidden contract lists what is forbidden
  and would miss a room added later;
- an import cycle through a package's own ``__init__``: ``acyclic_siblings`` compares siblings only;
- underscore names read from another module: attributes, not imports;
- the nested packages' old top-level names in tests, benchmarks and examples, which are not in the package.
"""

from __future__ import annotations

import ast
import copy
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import grimp
import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
NESTED = ("workloads", "solver", "executors")  # folders at the root, linked into pcs_ray


def within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


@cache
def package_files() -> dict[str, Path]:
    """Module name -> file, for every module of pcs_ray, through the links to the nested packages."""
    out = {}
    for folder, subfolders, names in os.walk(ROOT / "pcs_ray", followlinks=True):
        subfolders[:] = [s for s in subfolders if s != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                parts = list(Path(folder, name).relative_to(ROOT).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                out[".".join(parts)] = Path(folder, name)
    return out


@cache
def graph() -> grimp.ImportGraph:
    """The import graph of pcs_ray as Python finds it (the editable install: this checkout)."""
    return grimp.build_graph("pcs_ray", cache_dir=None)


@cache
def graph_with_external_packages() -> grimp.ImportGraph:
    """The graph the contracts are checked on: Ray and torch are nodes in it."""
    return grimp.build_graph("pcs_ray", include_external_packages=True, cache_dir=None)


def edges(g: grimp.ImportGraph) -> set[tuple[str, str]]:
    return {(a, b) for a in g.modules for b in g.find_modules_directly_imported_by(a)}


def test_the_import_contracts_hold():
    out = subprocess.run([Path(sys.executable).with_name("lint-imports"), PYPROJECT, "--no-cache", "--no-logo"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def contract_kept(contract_id: str, g: grimp.ImportGraph) -> bool:
    from importlinter.api import read_configuration
    from importlinter.contracts import acyclic_siblings, forbidden, layers, protected

    config = read_configuration(str(PYPROJECT))
    options = next(c for c in config["contracts_options"] if c["id"] == contract_id)
    kinds = {"layers": layers.LayersContract, "forbidden": forbidden.ForbiddenContract,
             "protected": protected.ProtectedContract, "acyclic_siblings": acyclic_siblings.AcyclicSiblingsContract}
    contract = kinds[options["type"]](name=options["name"], session_options=config["session_options"],
                                      contract_options=options)
    return contract.check(g, verbose=False).kept


@pytest.mark.parametrize("contract_id, importer, imported", [
    ("tiers", "pcs_ray.placement.framework", "pcs_ray.coordinator.core"),
    ("tiers", "pcs_ray.solver.search", "pcs_ray.executors.launch"),
    ("tiers", "pcs_ray.workloads.catalog", "pcs_ray.train.session"),
    ("tiers", "pcs_ray.client", "pcs_ray.cli"),
    ("acyclic-rooms", "pcs_ray.cluster.spec", "pcs_ray.jobs.spec"),
    ("trainer-below-cli", "pcs_ray.train.trainer", "pcs_ray.commands"),
    ("trainer-above-the-rest", "pcs_ray.executors.tune", "pcs_ray.train.trainer"),
    ("trainer-above-the-rest", "pcs_ray.train.session", "pcs_ray.train.trainer.torch_trainer"),
    ("core-without-ray-or-torch", "pcs_ray.sim.engine", "ray"),
    ("core-without-ray-or-torch", "pcs_ray.policies.base", "torch"),
    ("user-contract-without-ray", "pcs_ray.workloads.catalog", "ray"),
])
def test_a_contract_sees_the_import_it_forbids(contract_id, importer, imported):
    """Each contract is kept on the package as it is and broken by one added import."""
    assert contract_kept(contract_id, copy.deepcopy(graph_with_external_packages()))
    wrong = copy.deepcopy(graph_with_external_packages())
    wrong.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    assert not contract_kept(contract_id, wrong)


def resolved_imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules a file's import statements name, as Python resolves them: ``from a import b`` is
    ``a.b`` where that is a module, else ``a``; relative imports from the file's package."""
    def nearest(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {nearest(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else nearest(base) for a in node.names}
    return found - {"", module}


def test_grimp_sees_every_import_the_code_has():
    """The static graph misses no import: the pairs parsed from every file (imports in functions too) are
    grimp's edges, also those into the nested packages, which are subpackages on disk."""
    known = package_files()
    parsed = {(m, dst) for m, path in known.items() for dst in resolved_imports(m, path, known)}
    into_nested = {(m, d) for m, d in parsed if within(d, *(f"pcs_ray.{n}" for n in NESTED))}
    g = graph()
    assert set(g.modules) == set(known)
    assert edges(g) == parsed, (f"grimp {len(edges(g))} edges, parsed {len(parsed)} pairs; only parsed: "
                                f"{sorted(parsed - edges(g))[:10]}, only grimp's: {sorted(edges(g) - parsed)[:10]}")
    assert into_nested <= edges(g) and len(into_nested) > 50


def test_no_import_cycles_between_files():
    """Also through a package's own ``__init__``, which the contract's comparison of siblings cannot see."""
    g = nx.DiGraph(list(edges(graph())))
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def imports_outside(package: str, ground: tuple[str, ...]) -> list[str]:
    g = graph()
    return [f"{m} imports {dst}" for m in sorted(g.modules) if within(m, package)
            for dst in sorted(g.find_modules_directly_imported_by(m)) if dst != "pcs_ray" and not within(dst, *ground)]


#: What the forecast package may build on: the state, the policy and placement interfaces, itself.
FORECAST_GROUND = ("pcs_ray.forecast", "pcs_ray.jobs.state", "pcs_ray.jobs.spec", "pcs_ray.jobs.moves", "pcs_ray.policies.base",
                   "pcs_ray.placement.base")


def test_the_forecast_package_stands_on_the_policy_and_placement_interfaces():
    """Forecasting is a package of its own: it never imports the simulator (which imports it) or any
    module but the state, the rule that settles and charges a move (the engine's too), and the policy
    and placement interfaces."""
    assert "pcs_ray.forecast" in graph().modules
    assert not imports_outside("pcs_ray.forecast", FORECAST_GROUND)


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
    assert package in graph().modules
    assert not imports_outside(package, (package, *PACKAGE_GROUND[package]))


def top_level_imports_of_nested(path: Path) -> list[str]:
    """Imports of ``workloads``, ``solver`` or ``executors`` as top-level packages: those names are the user's."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
        found += [f"{path}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in NESTED]
    return found


def test_the_nested_packages_are_imported_only_under_pcs_ray():
    """Product, tests, benchmarks and examples import ``pcs_ray.workloads`` and its siblings, never a top-level
    ``workloads``: that name is left to a user's own folder (and an import under it would escape the tier checks)."""
    files = [*package_files().values(), *(p for top in ("tests", "bench", "examples", "cloudlab")
                                          for p in (ROOT / top).rglob("*.py"))]
    bad = [hit for path in files for hit in top_level_imports_of_nested(path)]
    assert files and not bad, "\n".join(bad)


def test_the_nested_packages_are_links_inside_pcs_ray():
    """``pcs_ray/<name>`` links to the repository's ``<name>/``: what a static tool reads from the package's folder is
    what Python imports."""
    import pcs_ray.executors
    import pcs_ray.solver
    import pcs_ray.workloads

    for name, pkg in zip(NESTED, (pcs_ray.workloads, pcs_ray.solver, pcs_ray.executors)):
        assert os.readlink(ROOT / "pcs_ray" / name) == f"../{name}"
        assert Path(pkg.__file__).resolve() == ROOT / name / "__init__.py"


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
                found.append(f"{path}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("pcs_ray", *NESTED):
            found += [f"{path}:{node.lineno} from {node.module} import {a.name}"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_reads_another_modules_underscore_names():
    bad = [hit for path in package_files().values() for hit in underscore_reads(path)]
    assert not bad, "underscore names read from another module:\n" + "\n".join(sorted(bad))


def test_the_underscore_checker_sees_a_private_read(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("from pcs_ray.cluster import _hidden\n\nclass A:\n    def f(self, other):\n"
                   "        self._mine = 1\n        return other._mine + other._theirs\n")
    hits = sorted(h.split(" ", 1)[1] for h in underscore_reads(mod))
    assert hits == ["from pcs_ray.cluster import _hidden", "other._theirs"]  # other._mine: this module's own
