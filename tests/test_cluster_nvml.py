"""NVML has one reader (``pcs_ray.cluster.nvml``): no other module of the project imports ``pynvml``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READER = ROOT / "pcs_ray" / "cluster" / "nvml.py"


def pynvml_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"{path.relative_to(path.parents[1])}:{node.lineno}" for n in names if n.split(".")[0] == "pynvml"]
    return found


def test_only_the_nvml_module_imports_pynvml():
    files = [p for pkg in ("pcs_ray", "executors", "solver", "workloads", "bench") for p in (ROOT / pkg).rglob("*.py")]
    assert READER in files and pynvml_imports(READER)
    assert [hit for p in files if p != READER for hit in pynvml_imports(p)] == []


def test_the_import_check_sees_a_lazy_import(tmp_path):
    module = tmp_path / "pkg" / "reader.py"
    module.parent.mkdir()
    module.write_text("def f():\n    import pynvml\n    from pynvml import nvmlInit\n")
    assert pynvml_imports(module) == ["pkg/reader.py:2", "pkg/reader.py:3"]
