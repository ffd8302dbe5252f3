"""Folding forward plays into each job's record: its first and last prediction and how often it changed.

A run's forecasts arrive in arrival order (serially) or in shares (in parallel); either way each is
folded into the records it names, so a long trace never holds them all at once.
"""

from __future__ import annotations

from pcs_ray.sim.engine import JobRecord, SimResult


def apply_forecasts(result: SimResult, forecasts: list[dict[int, float]]) -> None:
    """Fold the forecasts, in arrival order, into each job's first/last prediction and refresh count."""
    records = {rec.job_id: rec for rec in result.records}
    for forecast in forecasts:
        fold(records, forecast)
    result.predictions += len(forecasts)


def fold(records: dict[int, JobRecord], forecast: dict[int, float]) -> None:
    for jid, when in forecast.items():
        rec = records[jid]
        if rec.first_pred is None:
            rec.first_pred = when
        elif abs(when - rec.last_pred) > 1e-6 * max(1.0, when):
            rec.refreshes += 1
        rec.last_pred = when


class FoldedForecasts:
    """The serial run's forecasts, folded into the records as soon as every earlier one is known
    (a play in a chain completes later than it is listed), so that a long trace never holds them
    all: 6214e9 makes 51,258 plays of up to thousands of jobs each."""

    def __init__(self, records: dict[int, JobRecord]) -> None:
        self.records, self.count, self.next = records, 0, 0
        self.pending: dict[int, dict[int, float]] = {}

    def __len__(self) -> int:
        return self.count

    def append(self, forecast: dict[int, float] | None) -> None:
        self.count += 1
        self[self.count - 1] = forecast

    def __setitem__(self, k: int, forecast: dict[int, float] | None) -> None:
        if forecast is None:  # a place kept for a play still under way
            return
        self.pending[k % self.count] = forecast
        while self.next in self.pending:
            fold(self.records, self.pending.pop(self.next))
            self.next += 1
