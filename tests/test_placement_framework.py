"""The placement framework: plugins, the registry, explanations, and what every configuration guarantees."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.placement import (
    PLACEMENTS, Reason, Unplaceable, create_placement, placement_help, register,
)
from pcs_ray.placement.plugin import Candidates, Context, Filter, Score
from pcs_ray.placement.pal import PAL
from pcs_ray.variability.profiles import apply_profile, load_profile
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.jobs.state import Snapshot
from builders import holding


def spec_with_scores(scores: list[list[float]], penalty: float = 1.0) -> ClusterSpec:
    nodes = [NodeSpec(name=f"n{k}", gpus=[GPUSpec(index=i, uuid=f"g{k}-{i}", scores={"A": s}) for i, s in enumerate(row)])
             for k, row in enumerate(scores)]
    return ClusterSpec(nodes=nodes, locality_penalty=penalty)


def place(p, jobs):
    return p.place(Snapshot(0.0, p.num_gpus, jobs), jobs, {j.spec.job_id: j.alloc for j in jobs})


# -- a toy plugin of each kind: how energy or slow-run prediction will plug in ----------------

DRAINED = Reason("drained", "the candidate uses a GPU taken out of service")


class ToyPower(Score):
    """Predicted power of the candidate's GPUs relative to the median GPU (a stand-in for an energy model)."""

    name = "toy-power"

    def __init__(self, power: dict[int, float]) -> None:
        self.power = power

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        return np.asarray([np.mean([self.power.get(int(g), 1.0) for g in row]) for row in batch.gpus])


class Drained(Filter):
    """Rejects candidates that use any of ``gpus``."""

    name = "drained"
    reason = DRAINED

    def __init__(self, gpus: set[int]) -> None:
        self.gpus = list(gpus)

    def candidates(self, ctx: Context, batch: Candidates) -> np.ndarray:
        return ~np.isin(batch.gpus, self.gpus).any(axis=1)


@pytest.fixture
def registry():
    """Restore the registry after a test registers configurations."""
    saved = dict(PLACEMENTS)
    yield PLACEMENTS
    PLACEMENTS.clear()
    PLACEMENTS.update(saved)


def test_a_toy_score_plugin_changes_the_decision_and_is_explained(registry):
    # Two nodes of two equal GPUs; GPUs 0 and 1 draw twice the power. PAL alone packs on node 0.
    cluster = spec_with_scores([[1.0, 1.0], [1.0, 1.0]], penalty=1.5)
    a = holding(1, 2)
    place(create_placement("pal", cluster), [a])
    assert a.gpus == (0, 1)
    register(PAL.with_score(ToyPower({0: 2.0, 1: 2.0}), weight=0.5, name="pal-power", help="PAL and toy power"))
    assert placement_help("pal-power") == "PAL and toy power"
    p = create_placement("pal-power", cluster)
    b = holding(1, 2)
    place(p, [b])
    assert b.gpus == (2, 3)  # node 1: power 1 beats node 0's 2 ** 0.5; across would pay L = 1.5
    why = p.explain(1)
    assert why["placement"] == "pal-power" and why["gpus"] == [2, 3] and why["source"] == "best-nodes"
    assert [s["plugin"] for s in why["scores"]] == ["variability", "locality", "toy-power"]
    assert [s["weight"] for s in why["scores"]] == [1.0, 1.0, 0.5]
    assert why["total"] == pytest.approx(1.0) and all(s["share"] == 0.0 for s in why["scores"])


def test_a_toy_filter_rejects_with_its_reason_and_every_rejection_is_counted(registry):
    cluster = spec_with_scores([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]], penalty=1.2)
    register(PAL.with_filter(Drained({0}), name="pal-drained", help="PAL without GPU 0"))
    p = create_placement("pal-drained", cluster)
    busy = holding(9, 3)
    busy.gpus = (4, 5, 6)
    p.adopt(busy)  # node 1 keeps one free GPU: too few for the next job
    a = holding(1, 2)
    p.place(Snapshot(0.0, 12, [busy, a]), [a], {9: 3, 1: 2})
    # Node 0's candidate {0, 1} and the across candidate {0, 1} use the drained GPU: node 2 (score 2.0) is left.
    assert a.gpus == (8, 9)
    why = p.explain(1)
    assert why["rejections"] == {"not-enough-gpus": 1, "drained": 2}
    assert why["source"] == "best-nodes" and why["candidates"] == 1
    assert {s["plugin"]: (s["value"], s["share"]) for s in why["scores"]} == {
        "variability": (2.0, 1.0), "locality": (1.0, 0.0)}
    assert why["total"] == 2.0


def test_when_every_candidate_is_rejected_the_reasons_say_why(registry):
    register(PAL.with_filter(Drained({0, 1, 2, 3}), name="pal-none", help="nothing"))
    p = create_placement("pal-none", spec_with_scores([[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(Unplaceable, match="drained: 3") as err:
        place(p, [holding(1, 2)])
    assert err.value.rejections == {"drained": 3}  # both nodes and the across candidate


# -- explanations ------------------------------------------------------------------------------


def test_explain_after_a_simulation_matches_what_the_jobs_ran_on():
    cluster = apply_profile(ClusterSpec.homogeneous(16, 4, 1.7), load_profile("longhorn"), 1)
    jobs = [JobSpec(k, 10.0 * k, 500.0, n, linear_speedup(n), min_gpus=n, job_class="ABCD"[k % 4])
            for k, n in enumerate([2, 4, 1, 3, 8, 2, 4, 1])]
    p = create_placement("pal", cluster)
    placed: dict[int, tuple[int, ...]] = {}
    real_place = p.place

    def spy(snap, changed, alloc=None, settle=None):
        touched = real_place(snap, changed, alloc, settle)
        placed.update({j.spec.job_id: j.gpus for j in touched if j.gpus})
        return touched

    p.place = spy
    simulate(jobs, 16, build_policy("fifo"), placement=p, predict=False)  # forks would copy the spy
    for spec in jobs:
        why = p.explain(spec.job_id)
        assert why["placement"] == "pal" and sorted(why["gpus"]) == sorted(placed[spec.job_id])
        assert [s["plugin"] for s in why["scores"]] == ["variability", "locality"]
        shares = [s["share"] for s in why["scores"]]
        assert math.isclose(sum(shares), 1.0) or sum(shares) == 0.0
        assert why["total"] == pytest.approx(math.prod(s["value"] ** s["weight"] for s in why["scores"]))
        assert why["candidates"] >= 1 and why["tie_breaks"] == []
        assert set(why["rejections"]) <= {"not-enough-gpus"}
    assert create_placement("pal", cluster).explain(0) is None  # never placed there


def test_eight_gpu_job_spreads_and_says_so():
    p = create_placement("pal", ClusterSpec.homogeneous(16, 4, 1.7))
    a = holding(1, 8)
    place(p, [a])
    why = p.explain(1)
    assert why["source"] == "cluster-best" and {s["plugin"]: s["value"] for s in why["scores"]}["locality"] == 1.7


def test_forks_do_not_record_explanations():
    p = create_placement("pm-first", ClusterSpec.homogeneous(4, 4))
    a = holding(1, 2)
    place(p, [a])
    f = p.fork()
    b = holding(2, 2)
    place(f, [a, b])
    assert p.explain(2) is None and p.explain(1) is not None and f.explain(2) is None


def test_combined_keeps_tie_breaks_in_its_explanation():
    from pcs_ray.data import data_dir
    from pcs_ray.placement import read_topo

    p = create_placement("combined", ClusterSpec.homogeneous(8, 8), topology=read_topo(data_dir() / "topology" / "dgx1-v100.topo"))
    a = holding(1, 2)
    place(p, [a])
    why = p.explain(1)
    assert [t["plugin"] for t in why["tie_breaks"]] == ["keep-gpus", "preserved-bandwidth"]
    assert [s["plugin"] for s in why["scores"]] == ["variability", "locality", "topology"]


# -- the registry --------------------------------------------------------------------------------


def test_every_placement_has_a_one_line_help():
    for name, config in PLACEMENTS.items():
        assert config.name == name
        assert config.help and "\n" not in config.help and placement_help(name.upper()) == config.help
    with pytest.raises(ValueError, match="valid placements: packed-sticky"):
        placement_help("best")


def test_unknown_options_and_bad_registrations_fail_with_the_choices(registry):
    with pytest.raises(ValueError, match="unknown option.*tie_nodes.*valid: sticky"):
        create_placement("combined", ClusterSpec.homogeneous(4, 4), tie_nodes=2)
    with pytest.raises(ValueError, match="already registered"):
        register(PAL)
    with pytest.raises(ValueError, match="weight >= 0"):
        PAL.with_score(ToyPower({}), weight=-1.0)


# -- a contract every configuration keeps ---------------------------------------------------------


@pytest.mark.parametrize("name", list(PLACEMENTS))
def test_every_configuration_keeps_the_placement_contract(name):
    from pcs_ray.data import data_dir
    from pcs_ray.placement import read_topo

    cluster = apply_profile(ClusterSpec.homogeneous(32, 8, 1.5), load_profile("longhorn"), 2)
    topo = read_topo(data_dir() / "topology" / "dgx1-v100.topo")
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(2):  # twice: deterministic under the same seed
        p = create_placement(name, cluster, seed=3, topology=topo)
        widths = np.random.default_rng(1).choice([1, 2, 3, 4, 6, 8, 12], 12)
        jobs = [holding(k, int(n), job_class="ABCD"[k % 4]) for k, n in enumerate(widths)]
        chosen = []
        for r in range(4):
            alloc, free = {}, 32
            for j in jobs:
                want = j.spec.max_gpus if (r + j.spec.job_id) % 3 else 0
                j.alloc = want if want <= free else 0
                free -= j.alloc
                if j.alloc:
                    alloc[j.spec.job_id] = j.alloc
            p.place(Snapshot(float(r), 32, jobs), jobs, alloc)
            held = [g for j in jobs if j.alloc for g in j.gpus]
            assert len(held) == len(set(held)) == sum(alloc.values())  # no GPU twice, every count met
            assert all(len(j.gpus) == j.alloc for j in jobs)
            assert all(p.explain(jid)["placement"] == name for jid in alloc)
            chosen.append([j.gpus for j in jobs])
        runs.append(chosen)
    assert runs[0] == runs[1]
    del rng


def test_a_finished_jobs_explanation_is_kept_in_compact_form():
    p = create_placement("pal", spec_with_scores([[1.0, 1.3], [1.0, 1.0]], penalty=2.0))
    a = holding(1, 2)
    place(p, [a])
    before = p.explain(1)
    p.release(a)
    assert before["gpus"] == [2, 3] and p.explain(1) == before
    assert isinstance(p.decisions[1].gpus, tuple)


def test_a_placement_log_round_trips_through_pickle():
    """A Ray task hands a run's placement back pickled."""
    import pickle

    from pcs_ray.placement import create_placement
    from pcs_ray.placement.stats import PlacementLog

    log = PlacementLog(create_placement("pal", ClusterSpec.homogeneous(2, 4), seed=1))
    again = pickle.loads(pickle.dumps(log))
    assert type(again.inner) is type(log.inner)
