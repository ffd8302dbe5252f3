"""Workloads: traces and generators for the simulator, and the training workloads jobs name.

``workloads.catalog`` declares each training workload's name and the ``params``
it reads with their bounds, without torch, so jobs are validated cheaply;
``workloads.models`` builds the models and data sets (torch) for the runners.
"""
