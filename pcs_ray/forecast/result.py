"""What a whole forward play gives: each job's finish, and when a job that held no GPUs first gets some."""

from __future__ import annotations


class Forecast(dict):
    """Finish time per job id (a plain dict to every reader), plus ``starts``: per job that held no GPUs when
    the play began, the time the play first gives it GPUs (its predicted start; jobs it never starts are absent).
    Plays that keep only some finishes (a branch of a whole play) are plain dicts."""

    __slots__ = ("starts",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.starts: dict[int, float] = {}


def starts_of(finish: dict) -> dict[int, float] | None:
    """The predicted starts a whole play's result carries; None for a play that keeps finishes only."""
    return getattr(finish, "starts", None)
