"""pcs-ray executors: run real training on exactly the GPUs placement chose.

- the coordinator <-> runner contract (``GPUSlot``, ``RunRequest``, ``RunOutcome``) is ``pcs_ray.contract``, in the core.
- ``launch``: ``launch(request) -> RunHandle`` (``done``, ``request_stop()``, ``kill()``), ``stop(handle, grace_s)``.
- ``runner``: the Ray actor, one per GPU (``num_gpus=0`` + the GPU's custom resource; sets ``CUDA_VISIBLE_DEVICES``).
- ``training``: the deterministic, preemptible loop (``TrainingSession``, ``run_training``); DDP for several GPUs.
- ``checkpoint``: atomic, digest-verified checkpoints with fallback to the previous one.
- ``tune``: Ray Tune sweeps as one coordinator job (``PCSTuner``); ``tune_scheduler`` maps the sweep's
  GPU assignment onto trials, ``tune_pin`` pins each trial to its GPUs, ``tune_trial`` is a deterministic trainable.
- ``preflight``: a fresh process pinned to each GPU reports what it sees, for ``pcs_ray.cluster.preflight``'s checks.
- ``standin``: runners that step, report, checkpoint and stop without training (``launcher="pcs_ray.executors.standin:launch"``
  in a coordinator's config, for load tests whose hundreds of runners would not fit as real processes).

Workloads (models and data) are registered in ``pcs_ray.workloads.models``.
"""
