"""Does the hostile-markup test (tests/test_dashboard_hostile.py) notice when any one escape is removed?

An escape point is each place a value meets markup in the dashboard's modules:
an argument of ``Markup(...).format``, a value given to ``attrs``, what ``join``
joins, an operand of ``+`` where one side is markup. Each mutant removes one:
the value, where it is a string, is passed as ``Markup(value)`` (trusted as
HTML) instead. The test runs against every mutant in a forked child; a mutant
is caught when the test fails.

Literal constants and module constants (``PREFIX``, ``BOUND_MEANING``, ...)
are not mutated. A first run with probes records what each point carried
while the test ran, so that a mutant the test cannot catch is explained: its
value was never a string that escaping changes (a number, a time the code
formats, or markup already). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from markupsafe import Markup, escape

ROOT = Path(__file__).resolve().parent.parent
MODULES = ("markup", "pages", "jobs_table", "timeline", "charts")
TESTS = (("test_every_page_turns_every_hostile_field_into_text", False),
         ("test_the_static_report_turns_every_hostile_field_into_text", True))


def _constant(node: ast.AST) -> bool:
    if isinstance(node, ast.IfExp):
        return _constant(node.body) and _constant(node.orelse)
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Name) and node.id.isupper())


def _call_to(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


class Sites(ast.NodeTransformer):
    """Numbers the escape points of a module in a fixed order; wraps each (``target`` None) or one of them.

    A wrapped point calls ``wrap(i, value)``: a probe, or the mutation (``_mut_raw``) at the target only.
    """

    def __init__(self, source: str, target: int | None = None, wrap: str = "_mut_probe") -> None:
        self.source, self.target, self.wrap = source, target, wrap
        self.found: list[dict] = []

    def _site(self, node: ast.expr, kind: str, where: ast.AST, code: str) -> ast.expr:
        i = len(self.found)
        self.found.append({"site": i, "kind": kind, "line": where.lineno, "code": code})
        if self.target is not None and i != self.target:
            return node
        return ast.Call(ast.Name(self.wrap, ast.Load()), [ast.Constant(i), node], [])

    def visit_Call(self, node: ast.Call) -> ast.AST:
        codes = [self._code(a) for a in node.args]  # before the arguments' own points are wrapped
        kw_codes = [f"{kw.arg}={self._code(kw.value)}" if kw.arg else f"**{self._code(kw.value)}" for kw in node.keywords]
        self.generic_visit(node)
        fmt = (isinstance(node.func, ast.Attribute) and node.func.attr == "format"
               and (_call_to(node.func.value, "Markup") or isinstance(node.func.value, ast.Name)))
        if fmt:
            node.args = [a if _constant(a) else self._site(a, "format", node, c) for a, c in zip(node.args, codes)]
            for kw, c in zip(node.keywords, kw_codes):
                if not _constant(kw.value):
                    kw.value = self._site(kw.value, "format", node, c)
        elif _call_to(node, "attrs"):
            for kw, c in zip(node.keywords, kw_codes):
                if kw.arg is None or not _constant(kw.value):  # **extra: each value it holds
                    kw.value = self._site(kw.value, "attrs", node, c)
        elif _call_to(node, "join"):
            node.args = [self._site(a, "join", node, c) for a, c in zip(node.args, codes)]
        return node

    def _code(self, node: ast.AST) -> str:
        return " ".join((ast.get_source_segment(self.source, node) or "?").split())[:90]

    def _add(self, left: ast.expr, right: ast.expr, where: ast.AST) -> ast.expr | None:
        """``left + right`` as ``wrap_add(i, left, right)`` (the probe tells which additions meet markup)."""
        i = len(self.found)
        self.found.append({"site": i, "kind": "+", "line": where.lineno, "code": self._code(where)})
        if self.target is not None and i != self.target:
            return None
        return ast.Call(ast.Name(self.wrap + "_add", ast.Load()), [ast.Constant(i), left, right], [])

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            return self._add(node.left, node.right, node) or node
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
            call = self._add(ast.Name(node.target.id, ast.Load()), node.value, node)
            if call is not None:
                return ast.Assign([ast.Name(node.target.id, ast.Store())], call, lineno=node.lineno)
        return node


def _raw(value):
    """The mutation: a string is trusted as markup, unescaped."""
    if isinstance(value, str) and not hasattr(value, "__html__"):
        return Markup(value)
    if isinstance(value, dict):
        return {k: _raw(v) for k, v in value.items()}
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        return (_raw(v) for v in value)
    return value


def _raw_add(_: int, left, right):
    return _raw(left) + _raw(right)


def _transformed(module: str, target: int | None, wrap: str) -> tuple[ast.Module, list[dict]]:
    path = ROOT / "pcs_ray" / "dashboard" / f"{module}.py"
    source = path.read_text()
    tree = ast.parse(source, str(path))
    sites = Sites(source, target, wrap)
    tree = ast.fix_missing_locations(sites.visit(tree))
    return tree, sites.found


def _load(module: str, tree: ast.Module, extra: dict) -> None:
    """``pcs_ray.dashboard.<module>`` from ``tree``, registered before anything imports it."""
    import pcs_ray.dashboard as package

    name = f"pcs_ray.dashboard.{module}"
    path = str(ROOT / "pcs_ray" / "dashboard" / f"{module}.py")
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None, origin=path))
    mod.__file__ = path
    mod.__dict__.update(extra)
    sys.modules[name] = mod
    setattr(package, module, mod)
    exec(compile(tree, path, "exec"), mod.__dict__)


def _run_tests() -> str | None:
    """None when the hostile test passes, else what failed."""
    import test_dashboard_hostile as t

    for name, needs_folder in TESTS:
        with tempfile.TemporaryDirectory() as folder:
            try:
                getattr(t, name)(*([Path(folder)] if needs_folder else []))
            except AssertionError as e:
                return f"{name}: {str(e).splitlines()[0][:120]}"
            except Exception as e:  # a crash counts, but is reported apart
                return f"crash {type(e).__name__}: {e}"
    return None


def _in_child(work) -> object:
    """``work()`` in a forked child (the parent never imports the dashboard's modules); its JSON result."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            out = json.dumps(work())
        except BaseException as e:
            out = json.dumps({"error": f"{type(e).__name__}: {e}"})
        with os.fdopen(write, "w") as w:
            w.write(out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as r:
        data = r.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def probe(module: str) -> list[dict]:
    """What each escape point of ``module`` carried while the test ran: the kinds of values, and whether
    escaping ever changed one."""
    tree, found = _transformed(module, None, "_mut_probe")

    def work():
        seen: dict[int, dict] = {}

        def note(i: int, value) -> None:
            s = seen.setdefault(i, {"types": set(), "escaped": False})
            if isinstance(value, str) and not hasattr(value, "__html__"):
                s["types"].add("str")
                s["escaped"] |= str(escape(value)) != value
            else:
                s["types"].add("markup" if hasattr(value, "__html__") else type(value).__name__)

        def _mut_probe_add(i, left, right):
            if hasattr(left, "__html__") or hasattr(right, "__html__"):
                for side in (left, right):
                    note(i, side)
            else:
                seen.setdefault(-i - 1, {})  # reached, but never markup: an addition, not an escape point
            return left + right

        def _mut_probe(i, value):
            if isinstance(value, dict):
                for v in value.values():
                    note(i, v)
                return value
            if hasattr(value, "__iter__") and not isinstance(value, str):
                value = list(value)
                for v in value:
                    note(i, v)
                return value
            note(i, value)
            return value

        _load(module, tree, {"_mut_probe": _mut_probe, "_mut_probe_add": _mut_probe_add})
        failed = _run_tests()
        return {"failed": failed, "seen": {i: {"types": sorted(s["types"]), "escaped": s["escaped"]}
                                          for i, s in seen.items() if i >= 0},
                "plain_additions": [-i - 1 for i in seen if i < 0]}

    result = _in_child(work)
    if result.get("failed") or result.get("error"):
        raise SystemExit(f"the test fails on the unmutated {module}: {result}")
    plain = set(result["plain_additions"])
    for site in found:
        got = result["seen"].get(str(site["site"]))
        if site["kind"] == "+" and got is None:  # never met markup (or never ran): arithmetic, a URL, a title
            site["kind"] = "+ unreached" if site["site"] not in plain else "+ plain"
        site["reached"] = got is not None or site["kind"] == "+ plain"
        site["carried"] = got["types"] if got else []
        site["escaping_mattered"] = bool(got and got["escaped"])
    return found


def mutate(module: str, site: int) -> str | None:
    tree, _ = _transformed(module, site, "_mut_raw")

    def work():
        _load(module, tree, {"_mut_raw": lambda _, value: _raw(value), "_mut_raw_add": _raw_add})
        return {"failed": _run_tests()}

    return _in_child(work).get("failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", nargs="*", default=list(MODULES))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    began = time.perf_counter()
    mutants, constants, unreached = [], 0, []
    for module in args.modules:
        for site in probe(module):
            if site["kind"] == "+ unreached" or not site["reached"]:
                unreached.append(f'{module}:{site["line"]} {site["code"]}')
            if site["kind"] in ("+ plain", "+ unreached"):  # not an escape point (or, unreached, not known to be one)
                continue
            failed = mutate(module, site["site"])
            mutants.append({"module": module, **site, "caught": failed is not None,
                            "crash": bool(failed and failed.startswith("crash")), "failure": failed})
        constants += _count_constants(module)
    missed = [m for m in mutants if not m["caught"]]
    carried = Counter("+".join(m["carried"]) or "nothing" for m in missed)
    print(json.dumps({
        "mutants": len(mutants), "caught": len(mutants) - len(missed),
        "caught_by_a_crash": sum(m["crash"] for m in mutants),
        "escaping_mattered": sum(m["escaping_mattered"] for m in mutants),
        "escaping_mattered_and_caught": sum(m["escaping_mattered"] and m["caught"] for m in mutants),
        "not_reached_by_the_test": unreached,
        "constants_not_mutated": constants,
        "not_caught_by_what_they_carried": dict(carried.most_common()),
        "not_caught": [{"where": f'{m["module"]}:{m["line"]}', "kind": m["kind"], "code": m["code"],
                        "carried": m["carried"], "escaping_mattered": m["escaping_mattered"]} for m in missed],
        "wall_s": round(time.perf_counter() - began, 1),
    }, indent=1))


def _count_constants(module: str) -> int:
    """Literal and module-constant values that meet markup (not mutated: the code writes them)."""
    path = ROOT / "pcs_ray" / "dashboard" / f"{module}.py"
    count = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
                and (_call_to(node.func.value, "Markup") or isinstance(node.func.value, ast.Name)):
            count += sum(_constant(a) for a in node.args) + sum(_constant(k.value) for k in node.keywords)
        elif _call_to(node, "attrs"):
            count += sum(k.arg is not None and _constant(k.value) for k in node.keywords)
    return count


if __name__ == "__main__":
    main()
