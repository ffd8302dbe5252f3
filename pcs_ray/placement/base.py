"""The one placement object: *which* GPUs each job gets, by a named configuration of plugins.

A scheduling policy decides how many GPUs each job gets; a placement turns
those counts into global GPU ids (``ClusterSpec.gpu_ids``) and sets each
job's ``slowdown``. The same object serves the simulator (``Engine``), the
predictor (``fork``) and the live coordinator, so it depends only on
``JobState``/``Snapshot`` and the ``ClusterSpec``::

    placement = create_placement("pal", cluster)
    touched = placement.place(snapshot, changed, alloc)   # sets job.gpus, job.slowdown
    placement.release(job)                                 # a job finished
    placement.explain(job_id)                              # why it got those GPUs

``alloc`` is the policy's allocation (job id -> GPU count) in the policy's
priority order. *Sticky* placements only place jobs whose count changed;
*non-sticky* ones re-place every running job each round, and a job whose new
GPUs differ from its old ones has migrated (the caller charges a checkpoint
and restore). Which GPUs one job gets is its :class:`Configuration`'s
decision (candidates -> filters -> scores, ``framework.py``); this class
keeps the books: who holds which GPU, slowdowns, forks, explanations.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from pcs_ray.cluster import ClusterSpec
from pcs_ray.placement.explain import explanation
from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.placement.framework import COUNTERS, Configuration, Decision, PlacementError
from pcs_ray.placement.round_record import BEFORE, NOWHERE, RoundRecord, bits_to_mask
from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.cluster.topology import TopoMatrix


#: a reuse table holds this over the number of GPUs in entries (50,000 on 256 GPUs): a larger cluster's keys
#: and decisions are larger, so it keeps fewer
_REUSE_BYTES = 50_000 * 256


def _forget_oldest(table: dict) -> None:
    """Drop the older half of a full reuse table: plays move on from the states they passed long ago,
    and clearing it all would make the next plays compute every decision again at once."""
    for key in list(itertools.islice(table, len(table) // 2)):
        del table[key]


class Placement:
    """Runs one :class:`Configuration` on one cluster and keeps the books.

    ``topology`` (a :class:`TopoMatrix`) applies to every node; without it,
    nodes use the ``topology`` file named in the cluster spec, if any.
    ``comm`` is the communication model that turns links into a slowdown
    (``pcs_ray.placement.bandwidth.CommModel``); by default it is built from
    the topologies and charges only bandwidth-sensitive jobs. ``binned``
    overrides the binned per-class scores variability-aware plugins decide on
    (otherwise K-means with ``bin_seed``). ``sticky`` overrides the
    configuration's; ``seed`` seeds random choices. ``cache``: reuse a
    decision when the same inputs come back (forward plays pass through the
    same cluster states again and again), where every plugin of the
    configuration declares what it reads and draws nothing at random
    (``Configuration.cache_fields``); off, every decision is computed afresh.
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        config: Configuration,
        *,
        sticky: bool | None = None,
        seed: int = 0,
        topology: TopoMatrix | None = None,
        locality_penalty: float | None = None,
        comm=None,
        binned: dict[str, np.ndarray] | None = None,
        bin_seed: int = 0,
        cache: bool = True,
    ) -> None:
        self.config = config
        self.name = config.name
        self.cluster = cluster
        self.sticky = config.sticky if sticky is None else bool(sticky)
        self.ranked = config.ranked
        facts = self.facts = ClusterFacts(cluster, topology=topology, locality_penalty=locality_penalty, comm=comm,
                                          binned=binned, bin_seed=bin_seed)
        for plugin in config.plugins():
            plugin.prepare(facts)
        self.locality_penalty = facts.locality_penalty
        self.num_gpus, self.node, self.local = facts.num_gpus, facts.node, facts.local
        self.topologies, self.comm = facts.topologies, facts.comm
        # Who holds what: job id -> its GPUs, and the held GPUs as one integer (bit g = GPU g), which a
        # forward play updates and looks decisions up by at every event, far cheaper than an array.
        self.held: dict[int, tuple[int, ...]] = {}
        self._held_bits: dict[int, int] = {}  # the same GPUs as bits, so that giving them back costs one operation
        self._busy = 0
        self._all = (1 << self.num_gpus) - 1
        self.rng = np.random.default_rng(seed)
        self.memory: dict = {}  # plugins' state between decisions (Context.memory)
        self._draws = any(plugin.stateful for plugin in config.plugins())  # reads rng or memory
        self.planned: Mapping[int, tuple[int, ...]] = {}  # this round's GPUs chosen by the policy, by job id
        #: job id -> the winner of its latest decision (None in forks: predictions explain nothing)
        self.decisions: dict[int, Decision] | None = {}
        # Shared with forks (static facts): (free GPUs' bits, n, home, declared job fields) -> (gpus, decision
        # or None where a fork made it, their bits).
        self._reuse: dict | None = {} if cache and config.cache_fields is not None else None
        # (class, GPUs) -> slowdown; only without a comm model, where nothing else of the job counts.
        self._slowdowns: dict | None = {} if cache and self.comm is None else None
        self._reuse_limit = max(1_000, _REUSE_BYTES // max(self.num_gpus, 1))
        self._score_lists: dict[str, tuple] = {}  # class -> (its raw scores, as a list), shared with forks
        self._node_list: list[int] = self.node.tolist()
        # A re-placing round keeps a job where it was without deciding again where the configuration allows it
        # (``Configuration.keeps``), by the last round's record (``RoundRecord``), shared with forks.
        self._keeps = not self.sticky and config.keeps(facts)
        self._last_round: RoundRecord | None = None
        # The last round's allocation (job id -> count, in order), while no GPU changed hands since it
        # (``keep_all``); None otherwise.
        self._last_alloc: dict[int, int] | None = None
        self._marked: set[int] = set()  # jobs whose GPUs changed outside a round since the last one
        self._class_codes: dict[str, int] = {}  # job class -> its code in round records, shared with forks
        self._class_of: dict[int, str] = {}  # job id -> class, for the jobs a keeping round orders (``_ordered_ids``)
        self._class_names: list[str] = []

    # -- cluster facts -------------------------------------------------------
    def raw_scores(self, job_class: str) -> np.ndarray:
        """Each GPU's measured slowdown for ``job_class`` (what the job really runs at)."""
        return self.facts.raw_scores(job_class)

    def free_mask(self) -> np.ndarray:
        """Which GPUs no job holds."""
        return self._mask(self._all & ~self._busy)

    def _mask(self, bits: int) -> np.ndarray:
        """``bits`` (bit g = GPU g) as a boolean array."""
        return bits_to_mask(bits, self.num_gpus)

    def spans(self, gpus: Sequence[int]) -> bool:
        """Whether ``gpus`` lie on more than one node (in Python numbers: a job has few GPUs)."""
        node = self._node_list
        first = node[gpus[0]] if len(gpus) else None
        return any(node[g] != first for g in gpus)

    def slowdown(self, job: JobState, gpus: Sequence[int]) -> float:
        """Slowest GPU's raw score x locality penalty if across nodes x topology slowdown."""
        if not gpus:
            return 1.0
        known = self._slowdowns
        if known is not None:
            key = (job.spec.job_class, gpus if type(gpus) is tuple else tuple(gpus))
            value = known.get(key)
            if value is None:
                if len(known) >= self._reuse_limit:
                    _forget_oldest(known)
                value = known[key] = self._slowdown(job, gpus)
            return value
        return self._slowdown(job, gpus)

    def _slowdown(self, job: JobState, gpus: Sequence[int]) -> float:
        # In Python numbers: a job's few GPUs cost less than numpy's per-call overhead (same floats).
        raw = self.raw_scores(job.spec.job_class)
        seen = self._score_lists.get(job.spec.job_class)
        if seen is None or seen[0] is not raw:
            seen = self._score_lists[job.spec.job_class] = (raw, raw.tolist())
        scores = seen[1]
        worst = max([scores[g] for g in gpus])
        if self.spans(gpus):
            return worst * self.locality_penalty
        if self.comm is not None and len(gpus) > 1:
            # rank order matters
            worst *= self.comm.slowdown(job.spec, self._node_list[gpus[0]], self.local[list(gpus)])
        return worst

    # -- the interface ---------------------------------------------------------
    def place(
        self, snap: Snapshot, changed: Iterable[JobState], alloc: Mapping[int, int] | None = None, settle=None,
    ) -> list[JobState]:
        """Give every job with GPUs its GPU ids; return each job whose GPUs or slowdown changed.

        ``changed`` are the jobs whose count changed this round (always returned).
        ``alloc`` is the policy's allocation in priority order; without it the
        counts are the jobs' ``alloc`` and the order is ``snap.jobs``'. An
        allocation with a ``gpus`` map (job id -> GPU ids, e.g.
        ``pcs_ray.policies.power_aware.PlannedAllocation``) names GPUs the policy chose.
        Jobs returned that are not in ``changed`` kept their count but moved.
        ``settle``: called with each such job before its GPUs and slowdown change (a caller that brings
        progress up to date only for the jobs whose rate changes settles it at its old rate there).
        """
        touched = self._round(snap, changed, alloc, settle)
        self._last_alloc = None if alloc is None or self.planned else dict(alloc)  # a copy: the caller's may change
        return touched

    def keep_all(self, alloc: Mapping[int, int]) -> bool:
        """Whether a round of ``alloc`` leaves every job where it is, known without walking the jobs: ``alloc`` is
        the last round's allocation (the same jobs and counts in the same order, no GPUs named by the policy) and
        no GPU changed hands since. A sticky placement then places nothing; a re-placing one that keeps
        (``Configuration.keeps``) keeps every job. True: the round is counted as ``place`` counts it, and the caller
        need not call ``place``."""
        last = self._last_alloc
        if last is None or getattr(alloc, "gpus", None):
            return False
        if not (self.sticky or (self._keeps and not self._custom())) or alloc != last or list(alloc) != list(last):
            return False
        COUNTERS.rounds += 1
        if not self.sticky:
            COUNTERS.kept += len(self.held)
            if self.decisions is not None and self._last_round is not None:
                # as a round that kept every job: each one's decision is the one made on its GPUs, when asked
                self._last_round.decided[:] = False
        return True

    def _round(self, snap: Snapshot, changed: Iterable[JobState], alloc: Mapping[int, int] | None,
               settle) -> list[JobState]:
        """``place``'s round."""
        changed = list(changed)
        # GPUs the policy chose itself (VAHRM's Step 5), which a configuration may follow (``Context.planned``)
        self.planned = getattr(alloc, "gpus", None) or {}
        if alloc is None:
            running = [j for j in snap.jobs if j.alloc > 0]
            counts = {j.spec.job_id: j.alloc for j in running}
        else:
            counts = alloc
            # The engine's snapshot is a view of its id -> job dict: use that dict rather than
            # rebuild it, which would cost O(all queued jobs) on every event of a forward play.
            by_id = getattr(snap.jobs, "mapping", None) or {j.spec.job_id: j for j in snap.jobs}
            # a sticky placement places only jobs without GPUs and never needs the running list: this runs
            # on every event of a forward play
            if self.sticky:
                running = None
            elif self._keeps and not self._custom():  # ids, ordered before any job is looked up (``_ordered_ids``)
                running = list(alloc) if 0 not in alloc.values() else [jid for jid, n in alloc.items() if n > 0]
            elif 0 in alloc.values():
                running = [by_id[jid] for jid, n in alloc.items() if n > 0]
            else:  # every job of the allocation runs: looked up without a loop of Python's own
                running = list(map(by_id.__getitem__, alloc))
        touched: dict[int, JobState] = {j.spec.job_id: j for j in changed}
        old: dict[int, tuple[int, ...]] = {}
        for job in changed:
            jid = job.spec.job_id
            if jid in self.held and counts.get(jid, 0) != len(self.held[jid]):
                old[jid] = self.give_back(jid)
        num_running = len(running) if running is not None else sum(1 for n in alloc.values() if n > 0)
        if alloc is not None and len(self.held) > num_running:
            # jobs the allocation leaves out lose their GPUs even if the caller did not list them
            for jid in [jid for jid in self.held if counts.get(jid, 0) == 0]:
                self.give_back(jid)
                job = by_id.get(jid)
                if job is not None:
                    touched[jid] = job
                    changed.append(job)
        if running is None and self.sticky:
            held = self.held
            todo = [by_id[jid] for jid, n in alloc.items() if n > 0 and jid not in held]
        elif self.sticky:
            todo = [j for j in running if j.spec.job_id not in self.held]
        elif self._keeps and not self._custom():
            # Jobs stay in ``held`` while the round walks them: it reads only where something changed.
            self._marked.update(j.spec.job_id for j in changed)
            if alloc is None:
                by_id = {j.spec.job_id: j for j in running}
                running = list(by_id)
            held_bits = self._held_bits
            if len(running) == len(counts):  # no job of the allocation has 0 GPUs: a set difference finds the others
                outside = [held_bits[jid] for jid in held_bits.keys() - counts.keys()]
            else:
                outside = [bits for jid, bits in held_bits.items() if not counts.get(jid, 0)]
            start = 0
            for bits in outside:
                start |= bits
            ids = self._ordered_ids(running, counts, changed, by_id)
            placed = self._replace_keeping(ids, by_id, counts, old, start)
            return self._settled(placed, changed, touched, counts, settle)
        else:
            held, held_bits, freed = self.held, self._held_bits, 0
            for job in running:  # every running job gives its GPUs back (give_back, in one pass)
                jid = job.spec.job_id
                gpus = held.pop(jid, None)
                if gpus is not None:
                    old[jid] = gpus
                    bits = held_bits.pop(jid, None)
                    freed |= _bits(gpus) if bits is None else bits
            self._busy &= ~freed
            todo = running
        ordered = self.order(todo, snap, counts)
        if self.sticky:
            placed = ((job, self.take(job, counts[job.spec.job_id], old.get(job.spec.job_id, ())),
                       old.get(job.spec.job_id, ())) for job in ordered)
        else:
            placed = ((job, gpus, old.get(job.spec.job_id, ())) for job, gpus in self.replace_all(ordered, counts, old))
        return self._settled(placed, changed, touched, counts, settle)

    def _settled(self, placed, changed: list[JobState], touched: dict[int, JobState], counts: Mapping[int, int],
                 settle) -> list[JobState]:
        """``place``'s end: each placed job ``(job, gpus, home)`` whose GPUs changed (or that changed) gets
        them and its slowdown, settled first where only its GPUs changed; jobs left without GPUs lose theirs.
        Counts the GPUs whose holder changed (``Counters.gpus_touched``)."""
        moved = 0
        for job, gpus, home in placed:
            jid = job.spec.job_id
            if gpus != home or jid in touched:
                if settle is not None and jid not in touched:
                    settle(job)
                if gpus != home:
                    moved += len(set(gpus).symmetric_difference(home))
                job.gpus = gpus
                job.slowdown = self.slowdown(job, gpus)
                touched[jid] = job
        for job in changed:
            if counts.get(job.spec.job_id, 0) == 0 and job.gpus:
                moved += len(job.gpus)
                job.gpus = ()
                job.slowdown = 1.0
        COUNTERS.rounds += 1
        COUNTERS.gpus_touched += moved
        return list(touched.values())

    def release(self, job: JobState) -> None:
        """``job`` finished: its GPUs are free again (its explanation stays, in a compact form; where a round
        kept the job without deciding, what the decision is made from, made only if someone asks)."""
        jid = job.spec.job_id
        self._last_alloc = None
        self._class_of.pop(jid, None)
        if self.decisions is not None and jid in self.decisions:
            decision = self._latest(jid, job)
            self.decisions[jid] = decision if type(decision) is _Kept else decision.compact()
        if jid in self.held:
            COUNTERS.gpus_touched += len(self.held[jid])
            self.give_back(jid)

    def forget(self, job_id: int) -> None:
        """A released job its owner no longer keeps (the coordinator's retention): its explanation goes too."""
        if self.decisions is not None and job_id not in self.held:
            self.decisions.pop(job_id, None)

    def adopt(self, job: JobState) -> None:
        """Record GPUs ``job`` already holds (``job.gpus``), e.g. when a coordinator restarts
        with jobs still running; its slowdown is set from them."""
        gpus = tuple(int(g) for g in job.gpus)
        jid = job.spec.job_id
        self._last_alloc = None
        if jid in self.held:
            self.give_back(jid)
        taken = [g for g in gpus if not 0 <= g < self.num_gpus or self._busy >> g & 1]
        if taken:
            raise PlacementError(f"{self.name}: job {jid} cannot adopt GPUs {taken}: out of range or held")
        if self._keeps:
            self._marked.add(jid)
        if gpus:
            self._held_bits[jid] = bits = _bits(gpus)
            self._busy |= bits
            self.held[jid] = gpus
        job.slowdown = self.slowdown(job, gpus)

    def plays_as(self) -> Placement:
        """The placement a forward play runs: this one. A wrapper that forwards what it does not define to
        the placement it wraps (``PlacementLog``) answers with that placement, whose forks are its own."""
        return self

    @staticmethod
    def count(rounds: int, touched: int) -> None:
        """Count placement work done step by step (``take``/``give_back``, as a queue play does): ``rounds``
        rounds and ``touched`` GPUs whose holder changed, as ``place`` and ``release`` count theirs."""
        COUNTERS.rounds += rounds
        COUNTERS.gpus_touched += touched

    def fork(self) -> "Placement":
        """An independent copy for playing forward (predictions); static tables are shared."""
        other = copy.copy(self)
        other.held = dict(self.held)
        other._held_bits = dict(self._held_bits)
        other._marked = set(self._marked)
        other._class_of = dict(self._class_of)
        if self._draws or self._custom():  # otherwise nothing draws from the generator or writes the memory
            other.rng = copy.deepcopy(self.rng)
            other.memory = copy.deepcopy(self.memory)
        other.decisions = None
        return other

    def assignment(self) -> dict[int, tuple[int, ...]]:
        """Job id -> global GPU ids, as placed now (what the live coordinator pins)."""
        return dict(self.held)

    def describe(self) -> dict:
        return {"placement": self.name, "sticky": self.sticky, "locality_penalty": self.locality_penalty,
                **self.config.about}

    def explain(self, job_id: int) -> dict | None:
        """Why ``job_id`` got its GPUs at its latest placement (``None`` if never placed here).

        ``{"job_id", "placement", "gpus", "source", "candidates", "total",
        "scores": [{"plugin", "value", "weight", "share"}, ...],
        "tie_breaks": [{"plugin", "value"}, ...], "rejections": {reason code: count}}``:
        ``value`` is the score's factor for the chosen GPUs (lower is better,
        1 = no penalty), ``total`` the weighted product of the values,
        ``share`` each score's part of ``ln(total)`` (``|w ln v| / sum |w ln v|``;
        0 when every value is 1), ``rejections`` what filters rejected on the
        way (nodes or candidates, by :class:`Reason` code), ``candidates``
        how many GPU sets were scored, ``source`` the candidate source of the
        winner. See ``pcs_ray.placement.explain``.
        """
        if job_id not in (self.decisions or {}):
            return None
        decision = self._decision(job_id)
        return explanation(self.config, job_id, decision, self.held.get(job_id))

    # -- one job's GPUs -------------------------------------------------------
    def order(self, jobs: list[JobState], snap: Snapshot | None, counts: Mapping[int, int]) -> list[JobState]:
        """Placement priority of the jobs to place: the policy's order, or variability class A first;
        with ``size_order`` the most GPUs this round (``counts``) first within a class."""
        key = self._order_key(_job_class, lambda j: counts[j.spec.job_id])
        return jobs if key is None else sorted(jobs, key=key)

    def _order_key(self, class_of, count_of):
        """``order``'s sort key over items whose class and count this round ``class_of`` and ``count_of`` give
        (jobs, or ids); None: the policy's order stands."""
        config = self.config
        if config.size_order:
            if config.class_order:
                return lambda x: (class_of(x), -count_of(x))
            return lambda x: -count_of(x)
        return class_of if config.class_order else None

    def _ordered_ids(self, ids: list[int], counts: Mapping[int, int], changed: list[JobState],
                     by_id: Mapping[int, JobState]) -> list[int]:
        """``order`` of the jobs of ``ids`` (the same sort, by the same keys), as ids: the class of each job comes from
        ``_class_of``, kept for the jobs this placement has seen (``changed`` brings the new ones), so a round does
        not read every running job's spec to sort it."""
        class_of = self._class_of
        key = self._order_key(class_of.__getitem__, counts.__getitem__)
        if key is None:
            return ids
        if self.config.class_order:
            for job in changed:
                class_of[job.spec.job_id] = job.spec.job_class
        try:
            return sorted(ids, key=key)
        except KeyError:  # a job that ran before this placement saw it change (adopted, or a new placement)
            for jid in ids:
                class_of[jid] = by_id[jid].spec.job_class
            return sorted(ids, key=key)

    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        """``n`` free global GPU ids for ``job`` by the configuration. ``free`` is a boolean mask with
        at least ``n`` True entries; ``home`` are the GPUs it held before this round (preferred on ties)."""
        return self._decide(job, n, free, home)[0]

    def _decide(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]):
        """``select``'s GPUs with the decision behind them (kept as the job's explanation, outside forks)."""
        ctx = self.config.context(self.facts, job, n, free, home, self.rng, self.memory,
                                  self.planned.get(job.spec.job_id))
        gpus, decision = self.config.decide(ctx)
        if self.decisions is not None:
            self.decisions[job.spec.job_id] = decision
        return gpus, decision

    def _decision(self, jid: int) -> Decision:
        """Job ``jid``'s latest decision, made now where a round kept the job without deciding (``_Kept``, or
        the last round's record); kept compact for a job that holds no GPUs any more."""
        decision = self._latest(jid)
        if type(decision) is _Kept:
            job, n, free_bits, home = decision
            decision = self.config.decide(self.config.context(self.facts, job, n, self._mask(free_bits), home,
                                                              self.rng, self.memory, self.planned.get(jid)))[1]
            self.decisions[jid] = decision if jid in self.held else decision.compact()
        return decision

    def _latest(self, jid: int, job: JobState | None = None) -> Decision | _Kept:
        """Job ``jid``'s latest decision, or what to make it from where a round kept the job without deciding
        (taken from the last round's record, which the next round replaces; ``job``: the job, where the caller
        has it, as a job being released has left the record's map already)."""
        last = self._last_round
        q = None if last is None else last.position(jid)
        if q is not None and not last.decided[q]:
            job, gpus = job if job is not None else last.job_at(q), last.gpus[q]
            self.decisions[jid] = _Kept(job, len(gpus), self._all & ~last.held_before(q), gpus)
            last.decided[q] = True
        return self.decisions[jid]

    def replace_all(self, jobs: Sequence[JobState], counts: Mapping[int, int],
                    home: Mapping[int, tuple[int, ...]]) -> list[tuple[JobState, tuple[int, ...]]]:
        """A re-placing round that decides for every job: each of ``jobs`` (none holding GPUs now), in order,
        takes ``counts`` GPUs (``take``, preferring ``home``); returns each job with its GPUs."""
        out = []
        for job in jobs:
            jid = job.spec.job_id
            out.append((job, self._take(job, counts[jid], home.get(jid, ()))[0]))
        self._last_round = None
        return out

    def _replace_keeping(self, ids: list[int], by_id: Mapping[int, JobState], counts: Mapping[int, int],
                         home: Mapping[int, tuple[int, ...]],
                         start: int) -> list[tuple[JobState, tuple[int, ...], tuple[int, ...]]]:
        """A re-placing round where the configuration keeps (``Configuration.keeps``): the same GPUs as
        ``replace_all`` would give, deciding only for jobs that are new, changed, or could prefer what moved.

        ``ids`` are the round's jobs in order (``by_id``: each one's job, looked up only for the jobs walked), still
        in ``held`` where they hold GPUs (``home``: the GPUs of those that gave theirs back); ``start``, the GPUs
        held by jobs outside the round. A job whose count and GPUs are what it had at its position ``p`` of the
        last round takes them again without a decision when, against the GPUs held at ``p`` then, none of its GPUs
        was taken since (``taken``: held now, not then) and none of the GPUs freed since (``freed``: held then, not
        now) scores better for its class than its total. Over jobs at the last round's next positions that keep,
        ``taken`` and ``freed`` do not change, so such a stretch is checked with array operations on the last
        round's record and skipped; the rule runs job by job only where the stretch ends. Returns ``(job, gpus,
        home)`` for the jobs walked one by one (the others kept their GPUs); records the round for the next one."""
        last = self._last_round
        if last is None:
            last = RoundRecord.empty(self.num_gpus, start)
        r = len(ids)
        id_array = np.fromiter(ids, dtype=np.int64, count=r)
        at = last.positions(id_array)
        n_now = np.fromiter(map(counts.__getitem__, ids), dtype=np.int64, count=r)
        # whether a job can be part of a stretch: it held a position of the last round, with as many GPUs,
        # and its GPUs did not change outside the rounds since
        plain = at >= 0
        if len(last.n):
            plain &= last.n[np.where(plain, at, 0)] == n_now
        else:
            plain[:] = False
        for jid in self._marked:  # a few jobs: one comparison each costs less than np.isin
            plain[id_array == jid] = False
        self._marked = set()
        # a stretch (jobs at consecutive positions of the last round, each plain) ends before the next break
        shift = at - np.arange(r)
        brk = ~plain
        brk[1:] |= shift[1:] != shift[:-1]
        breaks = np.flatnonzero(brk).tolist()
        breaks.append(r)
        holders_of: dict[int, np.ndarray] = {}
        freed, taken = last.start & ~start, start & ~last.start
        held, held_bits = self.held, self._held_bits
        floors: dict[tuple[int, str], float] = {}
        names = self._class_names
        decided: dict[int, tuple[tuple[int, ...], float, bool]] = {}  # new position -> its decision
        out = []
        k = j = kept = 0  # k: the last round's next position not passed; j: this round's next job
        while j < r:
            if plain[j] and at[j] == k:
                length = breaks[bisect.bisect_right(breaks, j)] - j
                stop = length  # the first job of the stretch that does not keep
                if taken:
                    holders = holders_of.get(taken)
                    if holders is None:
                        holders = holders_of[taken] = last.holders(taken)
                    inside = holders[(holders >= k) & (holders < k + length)]
                    if len(inside):
                        stop = int(inside.min()) - k
                if freed and stop:
                    classes = last.cls[k : k + stop]
                    floor = np.array([self._floor_of(floors, freed, name) for name in names])
                    bound, total = floor[classes], last.total[k : k + stop]
                    worse = np.where(last.strict[k : k + stop], bound <= total + 1e-12, bound < total)
                    if worse.any():
                        stop = int(worse.argmax())
                kept += stop
                j += stop
                k += stop
                if stop == length:
                    continue
            # one job by the rule itself
            jid, n, p = ids[j], int(n_now[j]), int(at[j])
            job = by_id[jid]
            mine = home.get(jid)
            if mine is None:
                mine = held.get(jid, ())
            keep = False
            if p >= k:
                if p > k:  # the jobs passed over (gone or moved later) held these at their positions then
                    passed = last.held_between(k, p)
                    freed |= passed & ~taken
                    taken &= ~passed
                k = p + 1
                gpus = last.gpus[p]
                bits = _bits(gpus)
                if mine == gpus and len(gpus) == n and not (taken & bits):
                    keep = not freed or self._keeps_against(floors, freed, job.spec.job_class,
                                                            float(last.total[p]), bool(last.strict[p]))
                freed |= bits & ~taken  # held then: freed unless taken again below
                taken &= ~bits
            if keep:
                kept += 1
                held[jid], held_bits[jid] = gpus, bits
            else:
                held.pop(jid, None)
                held_bits.pop(jid, None)
                self._busy = (last.held_before(k) & ~freed) | taken
                gpus, total, strict = self._take(job, n, mine)
                bits = held_bits[jid]
                decided[j] = (gpus, total, strict)
            taken |= bits & ~freed
            freed &= ~bits
            out.append((job, gpus, mine))
            j += 1
        self._busy = (last.held_before(k) & ~freed) | taken
        COUNTERS.kept += kept
        if self.decisions is not None:
            self._explain_dropped(last, at)
        self._last_round = self._record(last, by_id, id_array, at, n_now, decided, start)
        return out

    def _keeps_against(self, floors: dict, freed: int, job_class: str, total: float, strict: bool) -> bool:
        """Whether a job of ``total`` keeps its GPUs with ``freed`` freed since (``Configuration.keeps``)."""
        floor = self._floor_of(floors, freed, job_class)
        return floor > total + 1e-12 if strict else floor >= total

    def _floor_of(self, floors: dict, freed: int, job_class: str) -> float:
        key = (freed, job_class)
        floor = floors.get(key)
        if floor is None:
            floor = floors[key] = self._floor(freed, job_class)
        return floor

    def _explain_dropped(self, last: RoundRecord, at: np.ndarray) -> None:
        """Jobs the last round kept that this round does not hold: their decision is made from that round
        when asked (``_Kept``), as the record that could make it is replaced."""
        stays = np.zeros(len(last.n), dtype=bool)
        stays[at[at >= 0]] = True
        for q in np.flatnonzero(~stays & ~last.decided).tolist():
            job, gpus = last.job_at(q), last.gpus[q]
            self.decisions[job.spec.job_id] = _Kept(job, len(gpus), self._all & ~last.held_before(q), gpus)

    def _record(self, last: RoundRecord, by_id: Mapping[int, JobState], ids: np.ndarray, at: np.ndarray,
                n_now: np.ndarray, decided: dict, start: int) -> RoundRecord:
        """This round's record, from the last one for the jobs that kept their GPUs."""
        r = len(ids)
        was_decided = np.zeros(r, dtype=bool)
        rows = np.fromiter(decided, dtype=np.int64, count=len(decided))
        was_decided[rows] = True
        from_last = np.where(was_decided, 0, at)
        if len(last.n):
            gpus, total, strict, cls = last.gpus[from_last], last.total[from_last], last.strict[from_last], last.cls[from_last]
        else:
            gpus, total = np.empty(r, dtype=object), np.zeros(r)
            strict, cls = np.zeros(r, dtype=bool), np.zeros(r, dtype=np.int64)
        if len(last.n):
            keeps = ~was_decided
            # each GPU's holder then, at its new position: moved[p + 1] for position p; BEFORE and NOWHERE read the
            # ends, both NOWHERE (this round's own GPUs held before it are set below)
            held = len(last.n)
            moved = np.full(held + 2, NOWHERE, dtype=np.int64)
            moved[at[keeps] + 1] = np.flatnonzero(keeps)
            owner = moved[np.minimum(last.owner, held) + 1]
        else:
            owner = np.full(self.num_gpus, NOWHERE, dtype=np.int64)
        if start:  # most rounds have no job outside them
            owner[bits_to_mask(start, self.num_gpus)] = BEFORE
        code = self._class_codes
        for row, (g, t, s) in decided.items():
            gpus[row], total[row], strict[row] = g, t, s
            name = by_id[int(ids[row])].spec.job_class
            c = code.get(name)
            if c is None:
                c = code[name] = len(self._class_names)
                self._class_names.append(name)
            cls[row] = c
            owner[list(g)] = row
        return RoundRecord(self.num_gpus, start, by_id, ids, gpus, n_now, total, strict, cls, owner, was_decided)

    # -- helpers ---------------------------------------------------------------
    def _floor(self, bits: int, job_class: str) -> float:
        """The best binned score for ``job_class`` among the GPUs of ``bits``."""
        return float(self.facts.decision_scores(job_class)[self._mask(bits)].min())

    def _custom(self) -> bool:
        """Whether ``select`` is replaced (a subclass, a test): then its answers are its own."""
        return getattr(self.select, "__func__", None) is not Placement.select

    def give_back(self, jid: int) -> tuple[int, ...]:
        """Free the GPUs job ``jid`` holds and return them (the first half of a move; ``take`` is the second)."""
        gpus = self.held.pop(jid)
        bits = self._held_bits.pop(jid, None)
        self._last_alloc = None
        if self._keeps:
            self._marked.add(jid)
        self._busy &= ~(_bits(gpus) if bits is None else bits)
        return gpus

    def take(self, job: JobState, n: int, home: tuple[int, ...]) -> tuple[int, ...]:
        """Give ``job`` ``n`` free GPUs (preferring ``home``, what it held before) and return them; the
        step ``place`` runs per job, which a forward play (``pcs_ray.forecast``) runs in the same order."""
        self._last_alloc = None
        if self._keeps:
            self._marked.add(job.spec.job_id)
        return self._take(job, n, home)[0]

    def _take(self, job: JobState, n: int, home: tuple[int, ...]) -> tuple[tuple[int, ...], float, bool]:
        """``take``'s GPUs, with the decision's total and whether a freed GPU must score strictly above it
        to leave the decision as it is (an across-nodes winner a node could have tied; ``Configuration.keeps``)."""
        free_bits = self._all & ~self._busy
        reuse, jid = self._reuse, job.spec.job_id
        hit = key = None
        custom = self._custom()
        if custom:
            reuse = None  # ``select`` replaced (a subclass, a test): its answers are its own, never reused
        if reuse is not None:
            spec = job.spec
            fields = self.config.cache_fields
            key = (free_bits, n, home, *[getattr(spec, f) for f in fields]) if fields else (free_bits, n, home)
            hit = reuse.get(key)
            if hit is not None and hit[1] is None and self.decisions is not None:
                hit = None  # a fork's entry, without the explanation this placement keeps
        if hit is not None:  # the same inputs as a decision that passed the checks below
            COUNTERS.reused += 1
            gpus, decision, taken, total, strict = hit
            if self.decisions is not None:
                self.decisions[jid] = decision
        else:
            if free_bits.bit_count() < n:
                raise PlacementError(f"{self.name}: job {jid} needs {n} GPUs, {free_bits.bit_count()} are free")
            free = self._mask(free_bits)
            if custom or (reuse is None and not self._keeps):
                chosen, total, strict = self.select(job, n, free, home), 0.0, False
            else:
                chosen, decision = self._decide(job, n, free, home)
                total = decision.total
                strict = decision.across and (n > 1 or self.facts.has_topology) and n <= self.facts.gpus_per_node
            ids = np.asarray(chosen, dtype=np.int64).tolist()
            taken = _bits(ids)
            if len(ids) != n or taken.bit_count() != n or taken & ~free_bits:
                raise PlacementError(f"{self.name}: job {jid} got {ids} for {n} free GPUs")
            if set(home) == set(ids):
                gpus = home  # the same GPUs: keep the rank order, nothing moves
            elif self.ranked:
                gpus = tuple(ids)
            else:
                gpus = tuple(sorted(ids))
            if key is not None:
                if len(reuse) >= self._reuse_limit:
                    _forget_oldest(reuse)
                # Forks keep no explanation: their entries hold only numbers, which the garbage
                # collector stops tracking, so a full table does not slow its collections.
                reuse[key] = (gpus, decision if self.decisions is not None else None, taken, total, strict)
        self._busy |= taken
        self.held[jid] = gpus
        self._held_bits[jid] = taken
        return gpus, total, strict


class _Kept(NamedTuple):
    """A decision a round did not make (the job kept its GPUs): what it is made from, when it is asked for."""

    job: JobState
    n: int
    free_bits: int
    home: tuple[int, ...]


_job_class = operator.attrgetter("spec.job_class")


def _bits(gpus) -> int:
    """GPU ids as an integer with their bits set."""
    bits = 0
    for g in gpus:
        bits |= 1 << g
    return bits


__all__ = ["Placement", "PlacementError"]
