"""pcs-ray: predictable, variability- and topology-aware GPU scheduling on Ray.

The core modules of this package (jobs, cluster, topology, contract, policies,
placement, simulator, metrics) never import Ray: the live coordinator, the
simulator, the predictor and the solver share them. The client is
``pcs_ray.client.Client``; the coordinator and the CLI sit on top.

The repository's ``workloads/``, ``solver/`` and ``executors/`` folders are this package's
``pcs_ray.workloads``, ``pcs_ray.solver`` and ``pcs_ray.executors``: installed inside it (``setup.py``),
never as top-level packages, so a user's own ``workloads`` or ``executors`` in a run's working_dir is
what that run's ``import`` finds. Run from a source checkout they sit beside this folder, whose
parent then joins the package's search path.
"""

from pathlib import Path

__version__ = "0.1.0"

#: The repository folders installed as subpackages of this one.
NESTED_PACKAGES = ("workloads", "solver", "executors")


def source_checkout_root() -> Path | None:
    """The repository root when this package runs from a source checkout (its nested packages beside it)."""
    here = Path(__file__).resolve().parent
    if (here / NESTED_PACKAGES[0]).is_dir():
        return None  # installed: they are inside
    root = here.parent
    return root if all((root / name / "__init__.py").is_file() for name in NESTED_PACKAGES) else None


if source_checkout_root() is not None:
    __path__.append(str(source_checkout_root()))
