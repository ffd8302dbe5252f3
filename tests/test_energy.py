"""Energy: power records, TSMVA, power profiles, the energy meter, VAHRM and its baselines, energy placement, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pcs_ray.cli import run
from pcs_ray.cluster import ClusterSpec
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.placement import create_placement
from pcs_ray.policies import build_policy
from pcs_ray.policies.base import validate_allocation
from pcs_ray.power.meter import EnergyMeter
from pcs_ray.power.profile import GPUPower, PowerProfile, load_power_profile
from pcs_ray.power.records import PowerDataError, Records, read_csv, write_rows
from pcs_ray.power.tsmva import evaluate, split_gpus
from pcs_ray.sim.run import simulate
from pcs_ray.jobs.state import JobState, Snapshot


# -- records ---------------------------------------------------------------------------------------


def test_records_round_trip_and_malformed_line_named(tmp_path):
    path = tmp_path / "t.csv"
    write_rows(path, [{"app": "resnet", "device": "n0-0", "power_w": 180.5, "ts": 10, "sm_clock_mhz": 1530}])
    write_rows(path, [{"app": "bert", "device": "n0-1", "power_w": 150}])
    rec = read_csv(path)
    assert rec.app.tolist() == ["resnet", "bert"] and rec.power.tolist() == [180.5, 150.0]
    assert rec.sm_clock[0] == 1530 and np.isnan(rec.sm_clock[1]) and rec.runtime.tolist() == [1.0, 1.0]
    bad = tmp_path / "bad.csv"
    bad.write_text("app,device,power_w\nresnet,g0,180\nresnet,g1,hot\n")
    with pytest.raises(PowerDataError, match=r"bad.csv line 3: 'power_w' is not a number"):
        read_csv(bad)
    (tmp_path / "neg.csv").write_text("app,device,power_w\nresnet,g0,-5\n")
    with pytest.raises(PowerDataError, match="line 2"):
        read_csv(tmp_path / "neg.csv")
    (tmp_path / "cols.csv").write_text("app,power_w\nresnet,5\n")
    with pytest.raises(PowerDataError, match="missing column"):
        read_csv(tmp_path / "cols.csv")


# -- TSMVA -----------------------------------------------------------------------------------------


def synthetic(devices=40, runs=4, seed=0) -> Records:
    """Each GPU draws its own multiple (+-10 %) of each app's fleet power, 1 % noise, and runs two of three apps."""
    rng = np.random.default_rng(seed)
    base = {"a": 100.0, "b": 200.0, "c": 280.0}
    rows = []
    for d in range(devices):
        k = 1 + rng.uniform(-0.1, 0.1)
        for app in rng.choice(list(base), size=2, replace=False):
            for _ in range(runs):
                rows.append((app, f"g{d}", base[app] * k * (1 + rng.normal(0, 0.01))))
    app, dev, p = zip(*rows)
    n = len(rows)
    return Records(np.asarray(app), np.asarray(dev), np.asarray(p), np.full(n, 1500.0), np.full(n, 877.0),
                   np.full(n, 50.0), np.ones(n), np.arange(n, dtype=float))


def test_held_out_gpu_split_hides_one_app_per_chosen_gpu():
    rec = synthetic()
    test = split_gpus(rec, seed=1)
    held = {(d, a) for d, a in zip(rec.device[test], rec.app[test])}
    assert held and len({d for d, _ in held}) == len(held)  # one app per held-out GPU
    for d, a in held:  # every run of that pair is held out, and the GPU is still seen on its other app
        assert test[(rec.device == d) & (rec.app == a)].all()
        assert (~test[rec.device == d]).any()


def test_tsmva_beats_per_device_single_stage_models_on_held_out_gpus():
    out = evaluate(synthetic(), seed=0, models=("LR", "RF", "TSMVA(LR+RF)", "TSMVA(RF+RF)"), trees=12)
    gpus = out["held_out_gpus"]
    worst_tsmva = max(gpus["TSMVA(LR+RF)"]["mean"], gpus["TSMVA(RF+RF)"]["mean"])
    assert worst_tsmva < 6.0  # the device offset is learnt from its other app
    assert worst_tsmva < min(gpus["LR"]["mean"], gpus["RF"]["mean"])
    assert out["held_out_runs"]["TSMVA(RF+RF)"]["mean"] < 6.0


# -- power profiles and the meter ------------------------------------------------------------------


def profile() -> PowerProfile:
    return PowerProfile("t", power={"A": np.array([100.0, 200.0, 300.0])}, predicted={"A": np.array([110.0, 190.0, 310.0])},
                        runtime={"A": np.array([1.0, 1.5, 0.8])})


def test_power_sampling_is_seeded_and_follows_speed_scores():
    cluster = ClusterSpec.homogeneous(3)
    a, b = profile().sample(cluster, seed=3), profile().sample(cluster, seed=3)
    assert a.true["A"].tolist() == b.true["A"].tolist() and sorted(a.true["A"]) == [100, 200, 300]
    scored = ClusterSpec.model_validate({"nodes": [{"name": "n", "gpus": [
        {"index": 0, "uuid": "u0", "scores": {"A": 1.45}}, {"index": 1, "uuid": "u1", "scores": {"A": 0.7}}]}]})
    s = profile().sample(scored, seed=0)
    assert s.true["A"].tolist() == [200.0, 300.0]  # the measured GPU nearest each score
    assert s.predicted["A"].tolist() == [190.0, 310.0]
    spec = s.onto(scored)
    assert [g.power for g in spec.nodes[0].gpus] == [{"A": 190.0}, {"A": 310.0}]


def test_bundled_longhorn_power_profile():
    p = load_power_profile("longhorn")
    assert p.classes == ["A", "B", "C", "D"]
    assert p.power["A"].mean() == pytest.approx(181, abs=3) and p.power["C"].mean() == pytest.approx(81, abs=2)
    assert p.power["D"].mean() == pytest.approx(297, abs=2)
    err = np.abs(p.predicted["A"] - p.power["A"]) / p.power["A"]
    assert 0 < err.mean() < 0.1  # real predictions: neither copies of the truth nor wild


def rigid(jid, n, runtime, submit=0.0, cls="A", model="m"):
    return JobSpec(jid, submit, runtime * n, n, linear_speedup(n), min_gpus=n, model=model, job_class=cls)


def test_energy_meter_integrates_busy_and_idle_power_exactly():
    power = GPUPower(true={"A": np.array([100.0, 200.0, 300.0, 400.0])}, predicted={"A": np.full(4, 250.0)}, idle_w=50.0)
    cluster = ClusterSpec.homogeneous(4)
    jobs = [rigid(1, 2, 100.0), rigid(2, 1, 50.0, submit=10.0)]
    meter = EnergyMeter(power, 4)
    result = simulate(jobs, 4, build_policy("vu-fcfs"), predict=False,
                      placement=create_placement("packed-sticky", cluster), energy=meter)
    # job 1 on GPUs 0,1 for 0..100 (300 W); job 2 on GPU 2 for 10..60 (300 W); idle 50 W per free GPU
    expected = 100 * 300 + 50 * 300 + 50 * (2 * 10 + 1 * 50 + 2 * 40)
    assert meter.joules == pytest.approx(expected)
    e = result.extra["energy"]
    assert e["kwh"] == pytest.approx(expected / 3.6e6) and e["jobs_per_kwh"] == pytest.approx(2 / e["kwh"])
    assert e["peak_kw"] == pytest.approx((300 + 300 + 50) / 1e3) and e["avg_kw"] == pytest.approx(expected / 100 / 1e3)
    assert meter.job_joules == pytest.approx({1: 30000.0, 2: 15000.0})
    plain = simulate(jobs, 4, build_policy("vu-fcfs"), predict=False, placement=create_placement("packed-sticky", cluster))
    assert "energy" not in plain.extra and [r.finish for r in plain.records] == [r.finish for r in result.records]


# -- policies ---------------------------------------------------------------------------------------


def state(spec, alloc=0):
    j = JobState.new(spec)
    j.alloc, j.start_time = alloc, (0.0 if alloc else None)
    return j


def decide(name, jobs, capacity, now=0.0, **kw):
    policy = build_policy(name, **kw)
    snap = Snapshot(now, capacity, tuple(jobs))
    alloc = policy.allocate(snap)
    validate_allocation(snap, alloc, policy.name)
    return {k: v for k, v in alloc.items() if v}


W = {"A": 150.0, "B": 100.0}


@pytest.mark.parametrize("jobs,capacity,now,kw,expected", [
    # the most energy first: job 2 (4 GPUs x 1000 s) before job 1, though it came later
    pytest.param([rigid(1, 2, 100.0), rigid(2, 4, 1000.0, submit=1.0)], 4, 10.0, {}, {2: 4}, id="energy-first"),
    # waiting time outweighs energy when beta is 0: arrival order, then what still fits
    pytest.param([rigid(1, 2, 100.0), rigid(2, 4, 1000.0, submit=1.0), rigid(3, 2, 5.0, submit=2.0)], 4, 10.0,
                 {"beta": 0.0}, {1: 2, 3: 2}, id="beta-0-waiting-first-skips-misfit"),
    # the budget (W) holds back what would exceed it; first runs count at TDP (300 W per GPU)
    pytest.param([rigid(1, 2, 100.0), rigid(2, 2, 90.0, model="n")], 4, 10.0, {"budget_w": 700.0}, {1: 2},
                 id="budget-at-tdp-for-first-runs"),
    # a job past the waiting cap is served first and stops the walk until it fits
    pytest.param([rigid(1, 4, 10.0), rigid(2, 1, 1000.0, submit=5.0)], 4, 100.0, {"wait_cap": 50.0}, {1: 4},
                 id="overdue-first"),
])
def test_vahrm_decisions(jobs, capacity, now, kw, expected):
    assert decide("vahrm", [state(j) for j in jobs], capacity, now, power=W, **kw) == expected


def test_vahrm_overdue_job_that_does_not_fit_blocks_the_rest():
    jobs = [state(rigid(1, 2, 10.0), alloc=2), state(rigid(2, 4, 10.0)), state(rigid(3, 1, 10.0, submit=90.0))]
    assert decide("vahrm", jobs, 4, 100.0, power=W, wait_cap=50.0) == {1: 2}
    assert decide("vahrm", jobs, 4, 100.0, power=W) == {1: 2, 3: 1}


def test_vahrm_profiles_a_workload_after_its_first_run():
    policy = build_policy("vahrm", power=W, budget_w=1000.0)
    first = state(rigid(1, 2, 10.0))
    assert policy.gpu_watts(first) == 300.0
    policy.allocate(Snapshot(0.0, 8, (state(rigid(9, 1, 10.0), alloc=1),)))  # model "m" has run
    assert policy.gpu_watts(first) == 150.0


def test_fcfs_baselines_block_or_backfill():
    jobs = [state(rigid(1, 2, 100.0), alloc=2), state(rigid(2, 4, 10.0)), state(rigid(3, 1, 10.0))]
    assert decide("vu-fcfs", jobs, 4) == {1: 2}
    assert decide("vu-fcfs-b", jobs, 4) == {1: 2, 3: 1}
    # a budget that holds the head back: strict FCFS blocks everyone behind it; with backfilling, job 3 runs
    small = [state(rigid(1, 1, 100.0), alloc=1), state(rigid(2, 2, 10.0, model="x")), state(rigid(3, 1, 10.0))]
    assert decide("cgva-fcfs", small, 4, power=W, budget_w=500.0) == {1: 1}
    assert decide("cgva-fcfs-b", small, 4, power=W, budget_w=500.0) == {1: 1, 3: 1}
    with pytest.raises(ValueError, match="budget"):
        build_policy("vahrm", budget_w=-1.0)


# -- placement --------------------------------------------------------------------------------------


def powered_cluster(watts, scores=None) -> ClusterSpec:
    gpus = [{"index": i, "uuid": f"u{i}", "power": {"A": w}, **({"scores": {"A": scores[i]}} if scores else {})}
            for i, w in enumerate(watts)]
    return ClusterSpec.model_validate({"nodes": [{"name": "n0", "gpus": gpus[:4]}, {"name": "n1", "gpus": gpus[4:]}]})


def place(name, cluster, n, cls="A"):
    p = create_placement(name, cluster)
    j = state(JobSpec(1, 0.0, 10.0, n, linear_speedup(n), min_gpus=n, job_class=cls))
    j.alloc = n
    p.place(Snapshot(0.0, cluster.num_gpus, (j,)), [j])
    return sorted(j.gpus)


def test_lowest_power_and_lowest_energy_placements():
    cluster = powered_cluster([200, 150, 190, 210, 120, 300, 130, 250], scores=[1, 1, 1, 1, 1.6, 1, 1, 1])
    assert place("lowest-power", cluster, 2) == [4, 6]
    assert place("lowest-energy", cluster, 2) == [1, 6]  # GPU 4 draws least but runs 1.6x slower
    assert place("energy", cluster, 1) == [6]
    assert place("lowest-power", cluster, 2, cls="B") == [0, 1]  # no power data for B: by id


WATTS = [200, 150, 190, 210, 120, 300, 130, 250]
SCORES = [1, 1, 1, 1, 1.6, 1, 1, 1]


def vahrm_round(policy, placement, jobs, capacity=8, now=0.0):
    """One decision as the engine makes it: the policy's counts, then the placement."""
    snap = Snapshot(now, capacity, tuple(jobs))
    alloc = policy.allocate(snap)
    validate_allocation(snap, alloc, policy.name)
    started = [j for j in jobs if not j.alloc and alloc.get(j.spec.job_id)]
    for j in started:
        j.alloc, j.start_time = alloc[j.spec.job_id], now
    placement.place(snap, started, alloc)
    return alloc


def test_vahrm_places_profiled_jobs_by_predicted_power_alone_and_first_runs_at_random():
    # Step 5: a profiled job gets the lowest predicted power (GPU 4 draws least, though it runs 1.6x slower);
    # a workload's first run gets random GPUs. The placement takes what the policy chose.
    cluster = powered_cluster(WATTS, scores=SCORES)
    firsts = set()
    for seed in range(12):
        policy = build_policy("vahrm", gpu_power={"A": WATTS}, seed=seed)
        placement = create_placement("vahrm", cluster, seed=0)
        first = state(JobSpec(1, 0.0, 10.0, 2, linear_speedup(2), min_gpus=2, job_class="A", model="resnet"))
        alloc = vahrm_round(policy, placement, [first])
        assert sorted(first.gpus) == sorted(alloc.gpus[1])
        firsts.add(tuple(sorted(first.gpus)))
        placement.release(first)
        second = state(JobSpec(2, 0.0, 10.0, 2, linear_speedup(2), min_gpus=2, job_class="A", model="resnet"))
        vahrm_round(policy, placement, [second])
        assert sorted(second.gpus) == [4, 6]
        assert placement.explain(2)["source"] == "policy"
    assert len(firsts) > 3  # first runs are drawn, seeded per policy


def test_vahrm_costs_and_places_a_second_new_workload_job_in_one_round_alike():
    # One first-run memory: two jobs of a new workload started in one decision are both first runs, costed
    # at TDP and placed at random, and the placement takes the GPUs the policy costed.
    seconds = set()
    for seed in range(8):
        policy = build_policy("vahrm", gpu_power={"A": WATTS}, seed=seed)
        placement = create_placement("vahrm", powered_cluster(WATTS, scores=SCORES))
        jobs = [state(rigid(1, 2, 10.0, model="new")), state(rigid(2, 2, 9.0, model="new"))]
        assert [policy.gpu_watts(j) for j in jobs] == [300.0, 300.0]
        alloc = vahrm_round(policy, placement, jobs)
        assert sorted(alloc.gpus) == [1, 2] and all(tuple(sorted(j.gpus)) == alloc.gpus[j.spec.job_id] for j in jobs)
        seconds.add(alloc.gpus[2])
        assert policy.gpu_watts(jobs[0]) == pytest.approx(np.mean(WATTS))  # profiled from the next decision on
    assert len(seconds) > 2
    # with a budget (idle GPUs at 60 W) that holds one 2-GPU first run at TDP, the second waits
    policy = build_policy("vahrm", gpu_power={"A": WATTS}, budget_w=8 * 60 - 2 * 60 + 600 + 100)
    jobs = [state(rigid(1, 2, 10.0, model="new")), state(rigid(2, 2, 9.0, model="new"))]
    assert {k: v for k, v in vahrm_round(policy, create_placement("vahrm", powered_cluster(WATTS)), jobs).items()
            if v} == {1: 2}


def test_vahrm_budget_counts_the_chosen_gpus_and_idle_draw():
    # Step 6 on the chosen GPUs: a profiled 2-GPU job on GPUs 4 and 6 draws 250 W, with six idle GPUs at 60 W:
    # 610 W in all. A 609 W budget refuses it while another job runs; 610 W admits it.
    watts = {"A": WATTS}
    running = state(rigid(9, 1, 100.0, model="m"), alloc=1)
    running.gpus = (1,)  # 150 W
    for budget, admitted in ((150 + 250 + 5 * 60 - 1, False), (150 + 250 + 5 * 60, True)):
        job = state(rigid(1, 2, 10.0, model="m"))
        alloc = build_policy("vahrm", gpu_power=watts, budget_w=budget).allocate(Snapshot(0.0, 8, (running, job)))
        assert bool(alloc.get(1)) is admitted
        if admitted:
            assert alloc.gpus[1] == (4, 6)


def test_cva_gives_cpu_standins_the_lowest_power_gpus_and_others_random_ones():
    cluster = powered_cluster(WATTS)
    assert place("cva", cluster, 2, cls="A") == [4, 6]
    drawn = {tuple(place_seeded("cva", cluster, 2, "B", seed)) for seed in range(8)}
    assert len(drawn) > 2
    assert build_policy("cva-fcfs").placement == build_policy("cva-fcfs-b").placement == "cva"


def place_seeded(name, cluster, n, cls, seed):
    p = create_placement(name, cluster, seed=seed)
    j = state(JobSpec(1, 0.0, 10.0, n, linear_speedup(n), min_gpus=n, job_class=cls))
    j.alloc = n
    p.place(Snapshot(0.0, cluster.num_gpus, (j,)), [j])
    return sorted(j.gpus)


def test_vahrm_energy_unit_is_an_option():
    job = state(rigid(1, 2, 3600.0))
    joules = build_policy("vahrm").energy(job, 2)
    assert joules == pytest.approx(2 * 300.0 * 3600.0)
    assert build_policy("vahrm", energy_unit="kWh").energy(job, 2) == pytest.approx(joules / 3.6e6)
    with pytest.raises(ValueError, match="energy_unit"):
        build_policy("vahrm", energy_unit="Wh")


def test_energy_score_is_mean_power_over_median():
    cluster = powered_cluster([100, 100, 100, 100, 300, 300, 300, 300])
    p = create_placement("energy", cluster)
    j = state(JobSpec(1, 0.0, 10.0, 2, linear_speedup(2), min_gpus=2, job_class="A"))
    j.alloc = 2
    p.place(Snapshot(0.0, 8, (j,)), [j])
    assert sorted(j.gpus) in ([0, 1], [2, 3], [0, 2], [1, 3], [0, 3], [1, 2])
    explained = p.explain(1)
    assert "energy" in json.dumps(explained)


# -- CLI ---------------------------------------------------------------------------------------------


def test_simulate_with_power_prints_energy(capsys):
    rc = run(["simulate", "--num-jobs", "12", "--gpus", "8", "--gpus-per-node", "4", "-p", "vahrm,vu-fcfs-b",
              "--placement", "lowest-energy", "--profile", "longhorn", "--power", "longhorn", "--pcr", "0.8",
              "--no-predict", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    for r in out["runs"]:
        assert set(r["energy"]) >= {"kwh", "jobs_per_kwh", "avg_kw", "peak_kw"} and r["energy"]["kwh"] > 0
        assert r["config"]["budget_w"] == pytest.approx(0.8 * 8 * 300)
    assert out["workload"]["power"]["budget_kw"] == pytest.approx(1.92)


PAIRED = ["simulate", "--num-jobs", "20", "--gpus", "8", "--gpus-per-node", "4", "-p", "vu-fcfs-b,cgva-fcfs-b,vahrm,fifo",
          "--profile", "longhorn", "--power", "longhorn", "--pcr", "0.8", "--no-predict", "--json"]


def test_simulate_runs_each_vahrm_family_policy_on_its_paper_placement(capsys):
    assert run(PAIRED) == 0
    runs = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert {k: (r["placement"]["placement"], r["placement"]["chosen_by"]) for k, r in runs.items() if "placement" in r} == {
        "vu-fcfs-b": ("packed-sticky", "paper"), "cgva-fcfs-b": ("lowest-energy", "paper"), "vahrm": ("vahrm", "paper")}
    assert "placement" not in runs["fifo"]  # no paper pairing: every GPU equal, as without --placement
    # the two policies differ only in their GPUs: paired, they spend different energy
    assert runs["vu-fcfs-b"]["energy"]["kwh"] != runs["cgva-fcfs-b"]["energy"]["kwh"]


def test_placement_option_puts_every_policy_on_the_named_placement(capsys):
    assert run([*PAIRED, "--placement", "lowest-energy"]) == 0
    runs = {r["policy"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert {(r["placement"]["placement"], r["placement"]["chosen_by"]) for r in runs.values()} == {
        ("lowest-energy", "--placement")}
    assert runs["vu-fcfs-b"]["energy"] == runs["cgva-fcfs-b"]["energy"]  # same policy rule, same GPUs


@pytest.mark.parametrize("args,message", [
    (["simulate", "--power", "nosuch", "--num-jobs", "3"], "unknown power profile 'nosuch'"),
    (["simulate", "--power", "longhorn", "--power-budget-kw", "-1", "--num-jobs", "3"], "--power-budget-kw must be"),
    (["simulate", "--power", "longhorn", "--pcr", "0", "--num-jobs", "3"], "--pcr must be"),
    (["simulate", "--pcr", "1", "--num-jobs", "3"], "need --power"),
])
def test_energy_option_errors_are_one_line(capsys, args, message):
    assert run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_power_fit_on_a_csv(tmp_path, capsys):
    rec = synthetic(devices=12, runs=3)
    path = tmp_path / "records.csv"
    write_rows(path, [{"app": a, "device": d, "power_w": p} for a, d, p in zip(rec.app, rec.device, rec.power)])
    out = tmp_path / "model.json"
    assert run(["power", "fit", "--data", str(path), "--out", str(out), "--predictions", str(tmp_path / "p.csv"),
                "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["mape"]["held_out_gpus"]) >= {"LR", "RF", "TSMVA(LR+RF)", "TSMVA(RF+RF)"}
    model = json.loads(out.read_text())
    assert set(model["device_power_w"]["g0"]) == {"a", "b", "c"}
    assert load_power_profile(tmp_path / "p.csv").classes == ["a", "b", "c"]
    bad = tmp_path / "bad.csv"
    bad.write_text("app,device,power_w\nx,g0,1\nx,g1,oops\n")
    assert run(["power", "fit", "--data", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and len(err.strip().splitlines()) == 1


def test_simulate_energy_unit_option(capsys):
    base = ["simulate", "--num-jobs", "8", "--gpus", "8", "--gpus-per-node", "4", "--no-predict", "--json"]
    assert run([*base, "-p", "vahrm", "--energy-unit", "kWh"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["energy_unit"] == "kWh"
    assert run([*base, "-p", "vahrm"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["energy_unit"] == "J"  # the default
    for args, fragment in ((["-p", "vahrm", "--energy-unit", "Wh"], "--energy-unit must be one of J, kWh"),
                           (["-p", "fifo", "--energy-unit", "J"], "applies to the vahrm policy")):
        assert run([*base, *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err


def test_a_job_above_the_budget_starts_only_on_an_idle_system():
    # 4 GPUs at TDP (1,200 W) never fit a 1,000 W budget: alone it starts, else Step 6 would hold it forever;
    # beside a running job it waits
    big = state(rigid(1, 4, 10.0, model="new"))
    assert decide("vahrm", [big], 8, budget_w=1000.0) == {1: 4}
    running = state(rigid(9, 1, 10.0), alloc=1)
    assert decide("vahrm", [running, state(rigid(1, 4, 10.0, model="new"))], 8, budget_w=1000.0) == {9: 1}
    assert decide("vu-fcfs", [running, state(rigid(1, 4, 10.0, model="new"))], 8, budget_w=1000.0) == {9: 1}
