"""Ray Tune's own examples as they ship in the installed wheel, with their tuner lines changed as
``examples/user-code/TUNE.md`` changes them (``tests/test_ray_tune_examples.py``)."""

from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path

EXAMPLES = Path(importlib.util.find_spec("ray").submodule_search_locations[0]) / "tune" / "examples"

IMPORTS = ["from pcs_ray.executors.tune import PCSTuner", "from pcs_ray.client import Client"]
TUNER = re.compile(r"(\s*)tuner = tune\.Tuner\(")
OWN_RAY = re.compile(r"ray\.init\(num_cpus=[^()]*\)")


def port(source: str, extra: str = "") -> str:
    """``source`` with its tuner lines changed as TUNE.md does, every other line as it was."""
    out: list[str] = []
    client_line = None
    for line in source.splitlines():
        if client_line is not None:  # the trainable, Tuner's first argument: the client goes after it
            assert line.rstrip().endswith(","), f"the trainable argument is not one line: {line!r}"
            out += [line, client_line]
            client_line = None
            continue
        tuner = TUNER.fullmatch(line)
        if tuner:
            out.append(f"{tuner[1]}tuner = PCSTuner(")
            client_line = f"{tuner[1]}    client=Client(),{extra}"
        elif line == "from ray import tune":
            out += [line, *IMPORTS]
        else:
            out.append(OWN_RAY.sub("ray.init()", line))
    return "\n".join(out) + "\n"


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines, stripped."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))[2:]
    return ([d[1:].strip() for d in diff if d.startswith("-")], [d[1:].strip() for d in diff if d.startswith("+")])
