"""A submission is answered from a play that stops at the new job's finish, and the queue's
forecasts are refreshed by a play that runs outside the host's lock: both give the numbers the
whole play under the lock gives."""

from __future__ import annotations

import math
import random

from pcs_ray.cluster import ClusterSpec
from builders import placed_core, random_submission, submit_random, unequal_cluster, whole_play


def test_a_submissions_forecast_is_the_whole_plays_and_the_rest_follow_outside_the_lock():
    for cluster, policy in ((unequal_cluster(), "pcs-bal"), (ClusterSpec.homogeneous(16, 4), "pcs-jct"),
                            (unequal_cluster(), "fifo")):
        core, clock = placed_core(cluster, policy)
        rng = random.Random(policy)
        for _ in range(60):
            clock.t += rng.uniform(0.0, 30.0)
            jid, _ = core.submit(random_submission(rng))
            assert core.jobs[jid].predicted == whole_play(core)[jid]
        assert core._predictions_stale  # the other jobs wait for a refresh
        began, play = core.begin_play_refresh()  # a queue play, detached from the model
        clock.t += 1.0
        late, _ = core.submit(random_submission(rng))  # the model moves on while the play runs
        newer = {jid: core.jobs[jid].predicted for jid in core._forecast_at}  # the late job and all finishing first
        old = play()
        core.end_play_refresh(began, old)
        assert {jid: core.jobs[jid].predicted for jid in newer} == newer and core._predictions_stale
        assert late in newer and late not in old and len(newer) > 1
        began, play = core.begin_play_refresh()
        core.end_play_refresh(began, play())
        whole = whole_play(core)
        assert not core._predictions_stale
        assert {jid: j.predicted for jid, j in core.active.items()} == whole and len(whole) > 30


def test_a_refresh_that_needs_the_model_runs_under_the_lock():
    """Lease-based policies re-decide on reviews: no detached play, the caller refreshes in place."""
    core, clock = placed_core(unequal_cluster(), "themis")
    submit_random(core, clock, random.Random(5), count=20, gap=10.0)
    assert core.begin_play_refresh() is None
    core.play_refresh()
    assert not core._predictions_stale and core.begin_play_refresh() is None


def test_a_refreshs_forecasts_go_in_parts_and_a_submission_between_them_keeps_its_own():
    core, clock = placed_core(unequal_cluster(), "pcs-bal")
    rng = random.Random(11)
    submit_random(core, clock, rng, count=45, gap=5.0)
    began, play = core.begin_play_refresh()
    finish = play()
    parts = core.end_play_refresh_in_parts(began, finish, part=10)
    next(parts)  # the first ten jobs' forecasts, then the caller may let a call in
    clock.t += 1.0
    late, _ = core.submit(random_submission(rng))
    newer = {jid: core.jobs[jid].predicted for jid in core._forecast_at}
    pauses = 1 + sum(1 for _ in parts)
    assert pauses == math.ceil(len(finish) / 10) - 1 and len(finish) > 30
    assert late in newer and {jid: core.jobs[jid].predicted for jid in newer} == newer
    assert all(core.jobs[jid].predicted == t for jid, t in finish.items() if jid not in newer)
    assert core._predictions_stale  # a call came in after the play began: the next refresh makes all fresh
    began, play = core.begin_play_refresh()
    core.end_play_refresh(began, play())
    assert not core._predictions_stale
    assert {jid: j.predicted for jid, j in core.active.items()} == whole_play(core)
