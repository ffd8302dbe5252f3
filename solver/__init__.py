"""PCS's preference solver: SPEA2 search of WFQ configurations, evaluated by simulation.

Modules, one job each:

* the job-history format the live coordinator writes is ``pcs_ray.workloads.history`` (a trace format)
* ``workload``: independent train/test samples of a CDF workload, trace or history
* ``objectives``: ``<metric, measure>`` objectives measured on a simulation
* ``space``: WFQ(T, W, zeta_min[, delta]) genomes decoded into ``WFQConfig``s
* ``spea2``: SPEA2 with deap's operators, resumable per generation
* ``cache``, ``evaluate``: each (configuration, sample) simulated once, serially or as Ray tasks
* ``checkpoint``: population + evaluations on disk, so a killed search resumes
* ``search``: one solver run end to end; ``front``: fronts as tables, JSON, plots, hypervolume
* ``preference``: ``set_preference`` / ``update_pareto_front`` / ``set_wfq_config`` (PCS §3.2)
"""
