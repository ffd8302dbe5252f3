"""Old import names of pcs-ray's packages, kept working for a release with a warning naming the new import.

``from executors.tune import PCSTuner`` gets ``pcs_ray.executors.tune`` (the same module object, not a copy)
and warns once per place: ``FutureWarning: executors.tune moved to pcs_ray.executors.tune: use
pcs_ray.executors.tune (the old name goes in the next release)``. ``pcs_ray_moved.pth`` appends the finder
to ``sys.meta_path`` at interpreter start, so it answers only names no other finder found: a user's own
``executors``, ``solver`` or ``workloads`` anywhere on ``sys.path`` (a script's folder, a run's working_dir)
is what ``import`` finds, and this finder then stays out of its submodules too. Every interpreter of the
environment imports this module at start, so it imports more only when an old name is asked for.
"""

import sys
from types import ModuleType

#: Old package name -> where it lives now; the package's modules follow it.
MOVED = {"executors": "pcs_ray.executors", "solver": "pcs_ray.solver", "workloads": "pcs_ray.workloads"}


def new_name(old: str) -> str | None:
    root, dot, rest = old.partition(".")
    return MOVED[root] + dot + rest if root in MOVED else None


def warn_moved(old: str, new: str) -> None:
    import warnings

    # FutureWarning is shown by default (DeprecationWarning only in __main__); level 3 is the importing
    # code: warnings skips importlib's own frames.
    warnings.warn(f"{old} moved to {new}: use {new} (the old name goes in the next release)", FutureWarning,
                  stacklevel=3)


class MovedFinder:
    """A meta path finder for the old names, consulted last."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        parent = fullname.rpartition(".")[0]
        if parent and not isinstance(sys.modules.get(parent), MovedPackage):
            return None  # a submodule of the user's own package of that name
        from importlib.machinery import ModuleSpec
        from importlib.util import find_spec

        try:
            found = find_spec(new)
        except ModuleNotFoundError:
            return None
        if found is None:
            return None
        return ModuleSpec(fullname, MovedLoader(new), origin=found.origin,
                          is_package=found.submodule_search_locations is not None)


class MovedLoader:
    """Loads an old name as the new module: a plain module is the new one itself; a package is a
    ``MovedPackage`` whose attributes are the new package's."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):
        return MovedPackage(spec.name, self.new) if spec.submodule_search_locations is not None else None

    def exec_module(self, module) -> None:
        from importlib import import_module

        real = import_module(self.new)
        if not isinstance(module, MovedPackage):
            warn_moved(module.__name__, self.new)
            sys.modules[module.__name__] = real  # what the import statement returns


class MovedPackage(ModuleType):
    """An old package name. Its ``__path__`` is empty, so its modules come through this finder and are
    never imported a second time under the old name; reading an attribute warns and reads the new package's."""

    def __init__(self, name: str, new: str) -> None:
        super().__init__(name)
        self.__moved_to__ = new

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        from importlib import import_module

        value = getattr(import_module(self.__moved_to__), name)
        warn_moved(f"{self.__name__}.{name}", f"{self.__moved_to__}.{name}")
        return value


def install() -> None:
    """Appends the finder to the end of ``sys.meta_path`` (the ``.pth`` file's one line)."""
    if MovedFinder not in sys.meta_path:
        sys.meta_path.append(MovedFinder)
