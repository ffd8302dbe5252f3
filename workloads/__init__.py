"""Workloads: traces and generators for the simulator, and the training workloads jobs name.

``pcs_ray.workloads.catalog`` declares each training workload's name and the ``params``
it reads with their bounds, without torch, so jobs are validated cheaply;
``pcs_ray.workloads.models`` builds the models and data sets (torch) for the runners.
"""
