"""pcs-ray: predictable, variability- and topology-aware GPU scheduling on Ray.

The modules of this package that hold policies, the simulator and the
predictor never import Ray: they are shared by the live coordinator, the
simulator, the predictor and the solver.
"""

__version__ = "0.1.0"
