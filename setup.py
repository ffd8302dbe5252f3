"""Installs the repository's ``workloads/``, ``solver/`` and ``executors/`` as ``pcs_ray.workloads``,
``pcs_ray.solver`` and ``pcs_ray.executors`` (everything else is in ``pyproject.toml``): top-level
packages of those names would shadow a user's own in every run of the user's code."""

from setuptools import find_packages, setup

NESTED = ("workloads", "solver", "executors")

setup(
    packages=find_packages(include=["pcs_ray", "pcs_ray.*"])
    + [f"pcs_ray.{p}" for p in find_packages(include=[*NESTED, *(f"{n}.*" for n in NESTED)])],
    package_dir={"pcs_ray": "pcs_ray", **{f"pcs_ray.{n}": n for n in NESTED}},
)
