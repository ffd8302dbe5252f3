"""pcs-ray: predictable, variability- and topology-aware GPU scheduling on Ray.

The modules of this package that hold policies, the simulator and the
predictor never import Ray: they are shared by the live coordinator, the
simulator, the predictor and the solver.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # ``from pcs_ray import Client`` without importing Ray for users of the pure core.
    if name == "Client":
        from pcs_ray.client import Client

        return Client
    raise AttributeError(f"module 'pcs_ray' has no attribute {name!r}")
