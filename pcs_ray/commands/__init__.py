"""Sub-commands of ``pcs-ray`` that live outside ``pcs_ray.cli``.

Each module here defines ``register(app)`` which adds its commands to the
Typer app; ``pcs_ray.cli`` calls every one at import time. Keeping commands in
their own modules lets the solver and the live system grow their CLIs without
touching the simulator's.
"""

from __future__ import annotations

import importlib
import pkgutil


def register_all(app) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
