"""pcs-ray: predictable, variability- and topology-aware GPU scheduling on Ray.

The core modules of this package (jobs, cluster, topology, contract, policies,
placement, simulator, metrics) never import Ray: the live coordinator, the
simulator, the predictor and the solver share them. The client is
``pcs_ray.client.Client``; the coordinator and the CLI sit on top.

``pcs_ray/workloads``, ``pcs_ray/solver`` and ``pcs_ray/executors`` are links to the repository's
folders of those names: they are this package's subpackages, never top-level packages, so a user's
own ``workloads`` or ``executors`` in a run's working_dir is what that run's ``import`` finds.
"""

__version__ = "0.1.0"
