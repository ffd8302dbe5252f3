"""pcs-ray: predictable, variability- and topology-aware GPU scheduling on Ray.

The core modules of this package (jobs, cluster, topology, contract, policies,
placement, simulator, metrics) never import Ray: the live coordinator, the
simulator, the predictor and the solver share them. The client is
``pcs_ray.client.Client``; the coordinator and the CLI sit on top.
"""

__version__ = "0.1.0"
