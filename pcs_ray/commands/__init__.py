"""The commands of ``pcs-ray``, one module per command group, and the views and inputs they share.

A command group's module defines ``register(app)``, which adds its commands
to the Typer app; ``pcs_ray.cli.COMMAND_GROUPS`` lists the groups
explicitly. Helper modules carry their group's name as a prefix
(``simulate_plan``, ``demo_ray``); ``views``, ``inputs`` and ``catalog`` are
shared. Nothing here imports ``pcs_ray.cli``.
"""
