"""Checks of a job's own code at submission, without running any of it.

A job names its code as ``entrypoint: FILE.py:FUNCTION`` (a file inside ``working_dir``) or
``package.module:FUNCTION`` (found in ``working_dir``, else on this Python's path), or brings a
function by value (``Trainer`` without a file: cloudpickle, as Ray does). Everything here reads
files and parses them with :mod:`ast`; nothing is imported or executed. A problem is one line
naming what to fix.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import sys
from pathlib import Path

#: Ray ships a working_dir through its object store as one package; larger ones are refused there.
WORKING_DIR_MAX_B = 500 * 2**20
#: A function sent by value travels inside the journaled job spec.
FUNCTION_MAX_B = 4 * 2**20
#: ``runtime_env`` keys a job may set: they change only its own processes.
ALLOWED_RUNTIME_ENV = frozenset({"env_vars", "pip", "uv", "excludes", "config"})
#: Refused, with why: a job must not escape its pinning or run outside its own worker processes.
REFUSED_RUNTIME_ENV = {
    "working_dir": "use the job file's working_dir field",
    "py_modules": "put the modules in working_dir",
    "conda": "conda environments are not offered on this cluster; use pip",
    "container": "containers would run outside the pinned worker", "image_uri": "containers would run outside the pinned worker",
    "py_executable": "the runner's Python is fixed", "worker_process_setup_hook": "runs code in shared processes",
    "java_jars": "not a Python job", "nsight": "profilers are set by the operator",
}
#: Environment variables pcs-ray sets itself for the GPU pinning and the cluster connection.
RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "RAY_", "PCS_RAY_")


class CodeError(ValueError):
    """A job's code cannot be run as named; the message is one line."""


def split_entrypoint(entrypoint: str) -> tuple[str, str]:
    """``(target, function)`` of ``FILE.py:FUNCTION`` or ``package.module:FUNCTION``."""
    target, sep, function = entrypoint.rpartition(":")
    if not sep or not target or not function.isidentifier():
        raise CodeError(f"entrypoint: {entrypoint!r} is not FILE.py:FUNCTION or package.module:FUNCTION")
    if not target.endswith(".py") and not all(part.isidentifier() for part in target.split(".")):
        raise CodeError(f"entrypoint: {target!r} is neither a .py file nor a dotted module name")
    return target, function


def is_file_target(target: str) -> bool:
    return target.endswith(".py")


def _module_file(module: str, roots: list[Path]) -> Path | None:
    parts = module.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def entry_file(entrypoint: str, working_dir: str | None) -> Path:
    """The source file the entrypoint's function lives in (checked to exist, and for a file target,
    to lie inside ``working_dir``)."""
    target, _ = split_entrypoint(entrypoint)
    root = Path(working_dir).resolve() if working_dir else None
    if is_file_target(target):
        if root is None:
            raise CodeError(f"entrypoint: {target} needs a working_dir to be found in")
        path = (root / target).resolve()
        if not path.is_relative_to(root):
            raise CodeError(f"entrypoint: {target} is outside working_dir {root}")
        if not path.is_file():
            raise CodeError(f"entrypoint: no file {target} in working_dir {root}")
        return path
    roots = ([root] if root else []) + [Path(p) for p in sys.path if p and Path(p).is_dir()]
    path = _module_file(target, roots)
    if path is None:
        where = f"working_dir {root} or " if root else ""
        raise CodeError(f"entrypoint: module {target} not found in {where}this Python's path")
    return path


def check_function(path: Path, function: str) -> None:
    """``function`` must be defined at the top level of ``path`` (read with ast, not imported)."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except SyntaxError as e:
        raise CodeError(f"entrypoint: {path.name} line {e.lineno}: syntax error ({e.msg})") from None
    except (OSError, ValueError) as e:
        raise CodeError(f"entrypoint: cannot read {path}: {e}") from None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            if isinstance(node, ast.AsyncFunctionDef):
                raise CodeError(f"entrypoint: {function} in {path.name} is async; pcs-ray calls a plain function")
            return
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == function for t in node.targets):
            return  # ``train = make_loop(...)``: bound at the top level, checked when it runs
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name.split(".")[0]) == function for a in node.names):
            return
    raise CodeError(f"entrypoint: no top-level function {function!r} in {path.name}")


def folder_size(root: Path, limit: int) -> int:
    """Bytes under ``root`` (stops counting past ``limit``)."""
    total = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__")]
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
            if total > limit:
                return total
    return total


def check_working_dir(working_dir: str) -> Path:
    root = Path(working_dir)
    if not root.is_dir():
        raise CodeError(f"working_dir: no such directory {working_dir}")
    size = folder_size(root, WORKING_DIR_MAX_B)
    if size > WORKING_DIR_MAX_B:
        raise CodeError(f"working_dir: {working_dir} holds over {WORKING_DIR_MAX_B // 2**20} MiB, more than Ray ships; "
                        "move data out of it (read data from shared storage) or list it under runtime_env.excludes")
    return root


def check_config(config) -> None:
    try:
        json.dumps(config, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise CodeError(f"config: not JSON ({e}); use strings, numbers, booleans, lists and mappings") from None


def check_runtime_env(runtime_env: dict) -> None:
    for key in runtime_env:
        if key in REFUSED_RUNTIME_ENV:
            raise CodeError(f"runtime_env.{key}: refused ({REFUSED_RUNTIME_ENV[key]})")
        if key not in ALLOWED_RUNTIME_ENV:
            raise CodeError(f"runtime_env.{key}: not allowed; allowed keys: {', '.join(sorted(ALLOWED_RUNTIME_ENV))}")
    env = runtime_env.get("env_vars") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise CodeError("runtime_env.env_vars: must map names to strings")
    for name in env:
        if any(name == r or (r.endswith("_") and name.startswith(r)) for r in RESERVED_ENV):
            raise CodeError(f"runtime_env.env_vars.{name}: set by pcs-ray itself (GPU pinning, cluster access)")


def check_function_blob(blob: str) -> None:
    try:
        raw = base64.b64decode(blob, validate=True)
    except ValueError:
        raise CodeError("function: not base64 (it is made by pcs_ray.train.Trainer)") from None
    if len(raw) > FUNCTION_MAX_B:
        raise CodeError(f"function: {len(raw) // 2**20} MiB pickled, over {FUNCTION_MAX_B // 2**20} MiB; "
                        "put the loop in a file under working_dir and name it as entrypoint")


def check_code(entrypoint: str | None, function: str | None, working_dir: str | None, config, runtime_env: dict | None,
               *, files: bool = True) -> None:
    """Every static check of a job's code; ``files=False`` skips those that read the disk."""
    if entrypoint is None and function is None:
        raise CodeError("entrypoint: missing (or name a built-in workload)")
    if entrypoint is not None:
        target, name = split_entrypoint(entrypoint)
        if files:
            if working_dir is not None:
                check_working_dir(working_dir)
            check_function(entry_file(entrypoint, working_dir), name)
    elif files and working_dir is not None:
        check_working_dir(working_dir)
    if function is not None:
        check_function_blob(function)
    check_config(config)
    if runtime_env:
        check_runtime_env(runtime_env)
