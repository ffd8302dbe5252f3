"""Many calls of one function, in this process or as Ray tasks, each result handed back as it finishes.

The solver's evaluations and ``pcs-ray simulate``'s combinations both fan out
through here: ``run_in_process`` calls the function one call after another,
``RayFanOut`` runs every call as a ``ray.remote`` task on the cluster this
process is connected to (one CPU each, no pool of its own) and hands results
back in the order they finish. Both call the same function on the same
arguments, so they return the same values.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable
from typing import Any

#: One call: a key that names it, and the function's positional arguments.
Call = tuple[Hashable, tuple]
OnResult = Callable[[Hashable, Any], None]


def run_in_process(fn: Callable, calls: Iterable[Call], on_result: OnResult) -> None:
    """``fn(*args)`` for each call in order, each result to ``on_result(key, result)``."""
    for key, args in calls:
        on_result(key, fn(*args))


class RayFanOut:
    """``fn`` as a Ray task on the connected cluster (``ray.init`` first: the caller decides which one).

    A value many calls share goes into the object store once (``put``) and is passed by reference; Ray
    hands each task the value itself.
    """

    def __init__(self, fn: Callable, *, num_cpus: float = 1, max_retries: int = 2) -> None:
        import ray

        self._ray = ray
        self._num_cpus = num_cpus
        self._task = ray.remote(num_cpus=num_cpus, max_retries=max_retries)(fn)

    def put(self, value):
        """A reference to ``value`` in the object store, to pass to many calls."""
        return self._ray.put(value)

    def cluster_cpus(self) -> float:
        return float(self._ray.cluster_resources().get("CPU", 0.0))

    def run(self, calls: Iterable[Call], on_result: OnResult) -> None:
        """``on_result(key, result)`` for every call, as each finishes; a call that raised raises its own
        exception here (not Ray's wrapper of it), after which the others are cancelled.

        No more calls are in flight than the cluster has CPUs for (counted again as each finishes, so a
        cluster that grows gets more), so that the next call goes to whichever worker frees up first rather
        than waiting behind a busy one while another sits idle (``bench/sim_fanout.py`` measures both)."""
        ray = self._ray
        todo = iter(calls)
        pending: dict = {}
        try:
            while True:
                room = max(1, int(self.cluster_cpus() // self._num_cpus)) - len(pending)
                for key, args in itertools.islice(todo, max(room, 0)):
                    pending[self._task.remote(*args)] = key
                if not pending:
                    return
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    key = pending.pop(ref)
                    on_result(key, self._get(ref))
        finally:
            for ref in pending:
                ray.cancel(ref)

    def _get(self, ref):
        from ray.exceptions import RayTaskError

        try:
            return self._ray.get(ref)
        except RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise
