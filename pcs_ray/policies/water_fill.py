"""Weighted water-filling over whole GPUs: the one split by weight that WFQ's queues and the tenant
level share, so the two levels of a tenants-over-PCS cluster divide GPUs by the same rule."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def water_fill(amount: int, wants: Sequence[int], weights: Sequence[float],
               rank: Callable[[int], Any] = lambda i: i) -> tuple[list[int], list[int], int, float, int]:
    """Split ``amount`` GPUs by weight, none above its want.

    Those that want less than their weighted portion get what they want and drop out; the rest get the
    floor of their portion, and single GPUs left go to the lowest ``(got + 1) / weight``, ties to the
    lowest ``rank(i)``. Returns ``(got, still_open, spare, open_weight, singles)``: how it ended (those
    left below their want, the GPUs they split, their summed weight, how many singles went out), which
    an incremental forecast compares to tell whether a new arrival changes the split.
    """
    got = [0] * len(wants)
    still_open = [i for i, w in enumerate(wants) if w > 0]
    left = amount
    wsum = 0.0
    while still_open:
        wsum = sum(weights[i] for i in still_open)
        full = [i for i in still_open if wants[i] <= left * weights[i] / wsum]
        if not full:
            break
        for i in full:
            got[i] = wants[i]
            left -= wants[i]
        still_open = [i for i in still_open if i not in full]
    spare, singles = left, 0
    if still_open and left > 0:
        wsum = sum(weights[i] for i in still_open)
        for i in still_open:
            got[i] = int(left * weights[i] / wsum + 1e-9)
        left -= sum(got[i] for i in still_open)
        while left > 0:
            best = min((i for i in still_open if got[i] < wants[i]), key=lambda i: ((got[i] + 1) / weights[i], rank(i)),
                       default=None)
            if best is None:
                break
            got[best] += 1
            left -= 1
            singles += 1
    return got, still_open, spare, (wsum if still_open else 0.0), singles
