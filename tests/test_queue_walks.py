"""Work that a long queue would multiply: relaxing a queue's leftover share walks only the jobs that can
still take GPUs, and the metrics count wait reasons without writing one text per waiting job."""

from __future__ import annotations

import random

from pcs_ray.cluster import ClusterSpec
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.policies import build_policy
from builders import placed_core, submit_random, unequal_cluster


class CountingAlloc(dict):
    """An allocation that counts the reads of a job's count (one per job a relax round visits)."""

    reads = 0

    def get(self, key, default=None):
        self.reads += 1
        return super().get(key, default)


def plain_relax(policy, queue: list[JobState], left: int, alloc: dict) -> None:
    """The rule as written: every round walks the whole queue."""
    zeta = policy.config.zeta_min
    while left > 0 and zeta > 0:
        zeta = max(0.0, zeta - policy.config.delta) if policy.config.delta > 0 else 0.0
        for job in queue:
            spec = job.spec
            have = alloc.get(spec.job_id, 0)
            cap = job.cap(zeta) if zeta > 0 else spec.max_gpus
            extra = min(cap - have, left)
            if extra <= 0 or have + extra < spec.min_gpus or (spec.rigid and have + extra < spec.max_gpus):
                continue
            alloc[spec.job_id] = have + extra
            left -= extra
            if not left:
                return


def random_queue(rng: random.Random, n: int) -> list[JobState]:
    jobs = []
    for jid in range(n):
        most = rng.choice([1, 1, 2, 4, 8])
        speedup = [0.0] + [min(k, 1.0 + rng.uniform(0.0, 0.9) * (k - 1)) for k in range(1, most + 1)]
        spec = JobSpec(job_id=jid, submit_time=float(jid), service=rng.uniform(10.0, 1000.0), max_gpus=most,
                       speedup=speedup, min_gpus=rng.choice([1, most // 2 or 1, most]))
        jobs.append(JobState.new(spec, 0.0))
    return jobs


def test_relax_gives_what_the_plain_rule_gives_and_skips_jobs_that_hold_all_they_can_use():
    policy = build_policy("pcs-bal")
    rng = random.Random(7)
    for _ in range(200):
        queue = random_queue(rng, rng.randint(1, 60))
        start = {j.spec.job_id: j.spec.min_gpus for j in queue if rng.random() < 0.7}
        left = rng.randint(1, 80)
        want = dict(start)
        plain_relax(policy, queue, left, want)
        got = CountingAlloc(start)
        policy.relax(queue, left, got)
        assert got == want
    # One-GPU jobs that hold their GPU are visited once in all, not once per zeta round.
    queue = [JobState.new(JobSpec(job_id=j, submit_time=0.0, service=10.0, max_gpus=1, speedup=[0.0, 1.0]), 0.0)
             for j in range(500)]
    queue.append(JobState.new(JobSpec(job_id=500, submit_time=0.0, service=10.0, max_gpus=8,
                                      speedup=[0.0] + [1.0 + 0.1 * k for k in range(8)]), 0.0))
    alloc = CountingAlloc({j: 1 for j in range(500)} | {500: 1})
    policy.relax(queue, 7, alloc)
    assert alloc[500] == 8
    rounds = 1 + int(policy.config.zeta_min / policy.config.delta)
    assert rounds >= 2 and alloc.reads <= 501 + rounds


def test_the_metrics_count_the_reasons_status_gives_without_their_texts():
    for cluster, policy in ((unequal_cluster(), "pcs-bal"), (ClusterSpec.homogeneous(8, 4), "fifo"),
                            (unequal_cluster(), "srsf")):
        core, clock = placed_core(cluster, policy)
        submit_random(core, clock, random.Random(3), count=40, gap=2.0)
        waiting = core.waiting()
        assert len(waiting) > 10
        assert core.waiting_codes() == {jid: why["code"] for jid, why in waiting.items()}


def test_a_wfq_policy_names_each_waiting_job_without_writing_why():
    policy = build_policy("pcs-bal")
    jobs = random_queue(random.Random(1), 50)
    snap = Snapshot(0.0, 16, jobs, policy.make_index(jobs))
    alloc = policy.allocate(snap)
    assert policy.waiting_codes(snap, alloc) == {jid: why.code for jid, why in policy.why_waiting(snap, alloc).items()}


def test_a_queue_allocation_kept_by_membership_and_share_is_what_walking_the_queue_gives():
    """WFQ gives a queue whose jobs and share are those of its last round that round's allocation again; its
    index and forks of it change apart (a fork's change must not pass for the original's), and every round
    must equal the allocation of an index built afresh from the same jobs."""
    from pcs_ray.policies import WFQConfig, WFQPolicy

    rng = random.Random(11)
    policy = WFQPolicy(WFQConfig((300.0, float("inf")), (0.7, 0.3), 0.8, 0.2))
    jobs = random_queue(rng, 60)
    active = {j.spec.job_id: j for j in jobs[:20]}
    index = policy.make_index(active.values())
    copies = [(active, index)]
    reused = walked = 0
    for step in range(300):
        mine, idx = rng.choice(copies)
        if rng.random() < 0.3 and mine:
            gone = mine.pop(rng.choice(list(mine)))
            idx.remove(gone)
        elif rng.random() < 0.4:
            new = rng.choice(jobs)
            if new.spec.job_id not in mine:
                mine[new.spec.job_id] = new
                idx.add(new)
        if rng.random() < 0.05:  # a forward play's copy, changed apart from then on
            other = {jid: j.clone() for jid, j in mine.items()}
            copies.append((other, policy.fork_index(idx, other)))
        capacity = rng.choice([16, 16, 16, 24])
        for q, share in enumerate(policy.shares(idx.queues, idx.usable, capacity)):
            if share:
                last = idx.served[q]
                reused += last is not None and last[0] == (idx.versions[q], share)
                walked += not (last is not None and last[0] == (idx.versions[q], share))
        fresh = policy.allocate(Snapshot(0.0, capacity, tuple(mine.values())))  # no index: built afresh
        kept = policy.allocate(Snapshot(0.0, capacity, tuple(mine.values()), idx))
        assert kept == fresh and list(kept) == list(fresh), step
    assert reused > 50 and walked > 50  # both ways were taken
