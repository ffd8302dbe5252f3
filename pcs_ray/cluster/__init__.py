"""The cluster a scheduler places jobs on: its spec, intra-node topology, NVML, discovery, per-GPU resources.

The spec's names are re-exported here, so ``from pcs_ray.cluster import ClusterSpec`` stays short;
modules inside this package import each other directly, never through this file.
"""

from pcs_ray.cluster.spec import (MAX_GPUS_PER_NODE, ClusterSpec, ClusterSpecError, GPUSpec, NodeSpec,
                                  cluster_spec_from_dict, discover_cluster, format_validation_error,
                                  load_cluster_spec, sim_uuid)

__all__ = ["MAX_GPUS_PER_NODE", "ClusterSpec", "ClusterSpecError", "GPUSpec", "NodeSpec", "cluster_spec_from_dict",
           "discover_cluster", "format_validation_error", "load_cluster_spec", "sim_uuid"]
