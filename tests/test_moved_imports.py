"""Imports the README and examples/ show keep working; an old name warns once, naming the new one, and never
shadows a user's own package of that name (``_pcs_ray_moved``)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("pcs_ray", "executors", "solver", "workloads")
WARNING = ("FutureWarning: executors.tune moved to pcs_ray.executors.tune: use pcs_ray.executors.tune "
           "(the old name goes in the next release)")
OLD_SWEEP = """\
from executors.tune import PCSTuner, count_trials
import pcs_ray.executors.tune
from ray import tune

assert PCSTuner is pcs_ray.executors.tune.PCSTuner
print(count_trials({"lr": tune.grid_search([0.01, 0.1])}, num_samples=2))
try:
    PCSTuner(lambda config: None, client=None)  # refused before it reaches Ray: no iterations
except ValueError as exc:
    print("refused:", exc)
"""


def run(python: Path | str, script: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), script.name], capture_output=True, text=True, cwd=script.parent, timeout=300)


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "Warning:" in line]


def test_the_finder_is_installed_at_start_and_consulted_last():
    code = "import sys; f = sys.meta_path[-1]; print(type(f).__name__ if not isinstance(f, type) else f.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "MovedFinder"


def test_an_old_sweep_script_runs_with_one_warning_naming_the_new_import(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(OLD_SWEEP)
    out = run(sys.executable, script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "4" and "refused: PCSTuner needs iterations=N" in out.stdout
    assert warnings_in(out.stderr) == [f"{script}:1: {WARNING}"]


def test_a_users_own_executors_package_wins(tmp_path):
    (tmp_path / "executors").mkdir()
    (tmp_path / "executors" / "__init__.py").write_text("")
    (tmp_path / "executors" / "tune.py").write_text("PCSTuner = 'mine'\n")
    script = tmp_path / "sweep.py"
    script.write_text("from executors.tune import PCSTuner\nprint(PCSTuner)\n"
                      "try:\n    import executors.launch\nexcept ModuleNotFoundError as exc:\n    print(exc)\n")
    out = run(sys.executable, script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["mine", "No module named 'executors.launch'"]  # never pcs-ray's beside it
    assert not warnings_in(out.stderr)


def test_an_old_package_name_gives_the_new_modules(tmp_path):
    script = tmp_path / "old.py"
    script.write_text("from workloads import catalog\nimport pcs_ray.workloads.catalog as new\n"
                      "import workloads\nprint(catalog is new, workloads.catalog is new)\n")
    out = run(sys.executable, script)
    assert out.stdout.split() == ["True", "True"], out.stderr
    assert warnings_in(out.stderr) == [f"{script}:1: FutureWarning: workloads.catalog moved to pcs_ray.workloads.catalog: "
                                       "use pcs_ray.workloads.catalog (the old name goes in the next release)"]


def documented_imports() -> list[str]:
    """The import statements of our packages that README.md and examples/ show: in code (a diff's added lines
    too) and inline, wrapped lines joined."""
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "examples").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.py"))]:
        text = path.read_text()
        if path.suffix == ".py":
            nodes = list(ast.walk(ast.parse(text)))
        else:
            shown = re.findall(r"`((?:from|import) [^`]+)`", text) + re.findall(r"^[+ ]?\s*((?:from|import) .+)$", text, re.M)
            nodes = []
            for statement in shown:
                try:
                    nodes += ast.parse(" ".join(statement.split("#")[0].split())).body
                except SyntaxError:
                    continue  # prose
        found |= {ast.unparse(n) for n in nodes if imported_package(n) in OURS}
    return sorted(found)


def imported_package(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        return node.names[0].name.split(".")[0]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return node.module.split(".")[0]
    return None


def test_the_docs_show_imports_to_check():
    assert {"from pcs_ray.executors.tune import PCSTuner", "import pcs_ray.train as train"} <= set(documented_imports())


@pytest.mark.parametrize("statement", [
    pytest.param(s, id=s, marks=[pytest.mark.slow] if re.search(r"\.(lightning|huggingface)\b", s) else [])
    for s in documented_imports()])  # lightning and transformers take seconds to import
def test_a_documented_import_works(statement):
    exec(statement, {})


@pytest.mark.slow
def test_a_regular_install_carries_the_finder(tmp_path):
    """``pip install .`` (a wheel): the nested packages inside pcs_ray only, the finder and its ``.pth`` at the top."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "_pcs_ray_moved.py"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run(["cp", "-a", *(str(ROOT / d) for d in ("pcs_ray", "executors", "solver", "workloads")), str(src)],
                   check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("pcs_ray-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"pcs_ray/executors/tune.py", "pcs_ray/workloads/joblists/demo.csv", "_pcs_ray_moved.py"} <= set(names)
    assert [n for n in names if n.endswith(".pth")] == ["pcs_ray_moved.pth"]
    assert not {n.split("/")[0] for n in names} & {"executors", "solver", "workloads"}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "ray").is_dir())
    (site / "zz_deps.pth").write_text(f"{deps}\n")  # Ray and the rest, after the installed pcs_ray
    script = tmp_path / "sweep.py"
    script.write_text(OLD_SWEEP + "print(pcs_ray.executors.tune.__file__)\n")
    out = run(venv / "bin" / "python", script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == str(site / "pcs_ray" / "executors" / "tune.py")
    assert warnings_in(out.stderr) == [f"{script}:1: {WARNING}"]
