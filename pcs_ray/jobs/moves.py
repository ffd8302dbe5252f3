"""The rule that settles a job's progress and charges a change of its GPUs.

The simulator's engine applies it to ``JobState`` objects; a forecast's queue play applies it to its
own copies of the same numbers, so that its finish times are the engine's bit for bit. Both call these
functions and nothing else computes them.
"""

from __future__ import annotations


def service_left(rate: float, finish: float, now: float, stall_until: float) -> float:
    """Service (GPU-seconds at one GPU) a job running at ``rate`` and due to finish at ``finish`` has
    left at ``now``; it makes no progress before ``stall_until``."""
    return max(0.0, rate * (finish - (now if now > stall_until else stall_until)))


def charged_stall(now: float, stall_until: float, started: bool, start_cost: float, move_cost: float | None,
                  overhead: float) -> float:
    """``stall_until`` of a job that takes GPUs at ``now``: its first start costs ``start_cost``, and every
    later change (a resize, a move, a restart after preemption) its own ``move_cost``, or the cluster's
    ``overhead`` where it has none. A change that costs nothing leaves ``stall_until`` as it was."""
    cost = (overhead if move_cost is None else move_cost) if started else start_cost
    return now + cost if cost else stall_until


def finish_time(now: float, stall_until: float, remaining: float, rate: float) -> float:
    """When a job with ``remaining`` service finishes at ``rate``, starting from ``now`` or its stall's end."""
    return (now if now > stall_until else stall_until) + remaining / rate


__all__ = ["charged_stall", "finish_time", "service_left"]
