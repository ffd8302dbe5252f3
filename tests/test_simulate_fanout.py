"""``pcs-ray simulate`` of several placements and seeds: the combinations, their output, one-line errors, and
the same numbers whether the runs go one after another in this process or as Ray tasks (``--address``)."""

from __future__ import annotations

import csv
import json

import pytest
from builders import invoke

from pcs_ray.commands.inputs import UsageError
from pcs_ray.commands.simulate_grid import combinations, integers, listed
from pcs_ray.sim.metrics import without_wall

SMALL = ["simulate", "--workload", "themis1", "--num-jobs", "30", "--gpus", "16"]
PLACED = [*SMALL, "--gpus-per-node", "4", "--profile", "longhorn"]


def given(**values) -> dict:
    """The command's options as the CLI passes them, nothing else given."""
    unset = ("trace", "workload", "num_jobs", "load", "seed", "cluster", "policy", "pcs_config", "speedup", "per_job",
             "placement", "profile", "profile_seed", "topology", "locality_penalty", "semantics", "run_variability",
             "skip_threshold", "power", "power_budget_kw", "pcr", "energy_unit")
    return {**dict.fromkeys(unset), "gpus": 16, "gpus_per_node": 4, "overhead": 0.0, "predict": True, "workers": 1,
            "as_json": False, **values}


def run_json(capsys, *args) -> dict:
    code, out, err = invoke(capsys, *args, "--json")
    assert code == 0, err
    assert err == ""
    return json.loads(out)


# --- the combinations --------------------------------------------------------------


def test_values_are_repeatable_comma_separated_and_deduplicated():
    assert listed(["pal, packed-sticky", "pal", "mapa-greedy"], "--placement") == ["pal", "packed-sticky", "mapa-greedy"]
    assert listed(None, "--placement") == []
    assert integers(["3,1", "3", "01"], "--seed") == [3, 1]


def test_every_placement_seed_and_profile_seed_combination_in_order():
    grid = combinations(given(placement=["pal,packed-sticky"], seed=["1,2"], profile_seed=["5"], profile="longhorn"))
    picked = [(c.options.placement, c.options.seed, c.options.profile_seed) for c in grid]
    assert picked == [("pal", 1, 5), ("pal", 2, 5), ("packed-sticky", 1, 5), ("packed-sticky", 2, 5)]
    # only what varies names a combination
    assert [c.tag for c in grid] == ["placement pal, seed 1", "placement pal, seed 2",
                                     "placement packed-sticky, seed 1", "placement packed-sticky, seed 2"]
    assert grid[1].label("fifo") == "fifo (placement pal, seed 2)"


def test_one_combination_keeps_todays_defaults_and_labels():
    (only,) = combinations(given())
    assert (only.options.placement, only.options.seed, only.options.profile_seed) == (None, 4567, 0)
    assert only.tag == "" and only.label("srsf") == "srsf"


@pytest.mark.parametrize("values, fragment", [
    ({"seed": ["1,x"]}, "--seed takes integers, got 'x'"),
    ({"profile_seed": ["1.5"]}, "--profile-seed takes integers, got '1.5'"),
    ({"seed": [" , "]}, "--seed is empty"),
    ({"placement": [","]}, "--placement is empty"),
])
def test_bad_values_are_usage_errors(values, fragment):
    with pytest.raises(UsageError, match=fragment.replace(".", r"\.")):
        combinations(given(**values))


BAD = {
    "non-integer seed": (["--seed", "1,two"], "--seed takes integers, got 'two'"),
    "seeds with a trace": (["--trace", "philly/51b7ef", "--seed", "1,2"], "--seed applies only to generated"),
    "one unknown placement": (["--gpus-per-node", "4", "--placement", "pal,nowhere"], "nowhere"),
    "profile without placement": (["-p", "fifo", "--profile", "longhorn", "--seed", "1,2"], "need --placement"),
    "address with tenants": (["--tenants", "philly/51b7ef=8", "--address", "127.0.0.1:1"],
                             "--tenants does not combine with --address"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_error_line_before_anything_runs(capsys, case):
    args, fragment = BAD[case]
    code, out, err = invoke(capsys, "simulate", *args)  # each fails before any simulation runs
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert fragment in lines[0]


# --- output ---------------------------------------------------------------------------


def test_json_of_several_combinations_is_each_run_as_it_prints_alone(capsys):
    both = run_json(capsys, *PLACED, "-p", "fifo,srsf", "--placement", "pal,packed-sticky", "--seed", "1,2")
    assert set(both) == {"runs"} and len(both["runs"]) == 8
    runs = iter(both["runs"])
    for placement in ("pal", "packed-sticky"):
        for seed in ("1", "2"):
            alone = run_json(capsys, *PLACED, "-p", "fifo,srsf", "--placement", placement, "--seed", seed)
            for expected in alone["runs"]:
                assert without_wall(next(runs)) == without_wall({**expected, "workload": alone["workload"]})


def test_table_per_combination_and_per_job_labels(capsys, tmp_path):
    per_job = tmp_path / "jobs.csv"
    code, out, err = invoke(capsys, *SMALL, "-p", "fifo", "--seed", "1,2", "--per-job", per_job)
    assert code == 0, err
    assert "seed 1 on 16 GPUs" in out and "seed 2 on 16 GPUs" in out
    with per_job.open() as f:
        labels = {row["policy"] for row in csv.DictReader(f)}
    assert labels == {"fifo (seed 1)", "fifo (seed 2)"}


# --- as Ray tasks -----------------------------------------------------------------


def test_ray_tasks_give_the_same_numbers_as_this_process(capsys, ray_local, monkeypatch, tmp_path):
    from pcs_ray.solver.fanout import RayFanOut

    submitted = []
    fan_out = RayFanOut.run

    def counted(self, calls, on_result):
        calls = list(calls)
        submitted.extend(key for key, _ in calls)
        return fan_out(self, calls, on_result)

    monkeypatch.setattr(RayFanOut, "run", counted)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    args = [*PLACED, "-p", "fifo,srsf,pcs-bal", "--placement", "pal", "--seed", "1,2"]
    here = run_json(capsys, *args, "--per-job", tmp_path / "here.csv")
    assert submitted == []
    on_ray = run_json(capsys, *args, "--per-job", tmp_path / "ray.csv",
                      "--address", ray_local.get_runtime_context().gcs_address)
    assert len(submitted) == len(on_ray["runs"]) == 6
    assert without_wall(on_ray) == without_wall(here)
    per_job = (tmp_path / "ray.csv").read_text()
    assert per_job == (tmp_path / "here.csv").read_text() and "variability=" in per_job  # placements explained


def test_a_ray_task_that_fails_raises_its_own_error(ray_local):
    import statistics

    from pcs_ray.solver.fanout import RayFanOut

    got = {}
    fan_out = RayFanOut(statistics.fmean)  # a function every worker imports as it is
    fan_out.run([("mean", ([1, 2],))], got.__setitem__)
    assert got == {"mean": 1.5}
    with pytest.raises(statistics.StatisticsError) as raised:
        fan_out.run([("none", ([],))], got.__setitem__)
    assert type(raised.value) is statistics.StatisticsError  # the task's own exception, not Ray's wrapper of it


class _FakeRay:
    """Just enough of Ray for ``RayFanOut.run``: tasks finish in submission order, one per ``wait``."""

    def __init__(self, cpus):
        self.cpus, self.order, self.in_flight, self.most, self.cancelled = list(cpus), [], [], 0, []

    def remote(self, *args):
        self.in_flight.append(args)
        self.most = max(self.most, len(self.in_flight))
        return args

    def cluster_resources(self):
        return {"CPU": self.cpus.pop(0) if len(self.cpus) > 1 else self.cpus[0]}

    def wait(self, refs, num_returns):
        assert num_returns == 1 and refs
        self.in_flight.remove(refs[0])
        self.order.append(refs[0])
        return [refs[0]], refs[1:]

    def get(self, ref):
        if ref == ("boom",):
            raise ValueError("boom")
        return ref[0] * 10

    def cancel(self, ref):
        self.cancelled.append(ref)


def test_a_fan_out_keeps_no_more_calls_in_flight_than_the_cluster_has_cpus():
    """The next call goes out as one finishes, so it runs on whichever worker frees up first; a cluster
    that grows gets more at once; a call that raises cancels those still in flight."""
    import statistics

    from pcs_ray.solver.fanout import RayFanOut

    fan_out = RayFanOut(statistics.fmean)
    fan_out._ray = fan_out._task = fake = _FakeRay([2, 2, 2, 3])
    got = {}
    fan_out.run([(k, (k,)) for k in range(9)], got.__setitem__)
    assert got == {k: 10 * k for k in range(9)} and fake.order == [(k,) for k in range(9)]
    assert fake.most == 3 and fake.cancelled == []  # two at a time, three once the cluster had three CPUs

    fan_out._ray = fan_out._task = fake = _FakeRay([2])
    with pytest.raises(ValueError, match="boom"):
        fan_out.run([(0, ("boom",)), (1, (1,)), (2, (2,))], got.__setitem__)
    assert fake.cancelled == [(1,)] and fake.most == 2  # the third call was never submitted
