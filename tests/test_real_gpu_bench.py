"""bench/real_gpu.py off a GPU machine: its verdicts, its exit status, and the checks CPU processes can run.

The GPU runs themselves are reported in the closing notes; here every verdict is shown able to fail.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a bench in a subprocess

BENCH = Path(__file__).resolve().parent.parent / "bench" / "real_gpu.py"
UUID = "GPU-6a7b0c1d-2e3f-4a5b-8c9d-0e1f2a3b4c5d"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("real_gpu_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH.parent))  # as `python bench/real_gpu.py` has it: bench/common.py beside it
        spec.loader.exec_module(module)
        yield module
    sys.modules.pop(spec.name, None)
    sys.modules.pop("common", None)


def _run(status="finished", step=10, start_step=0, emulated=False, error=None) -> dict:
    return {"status": status, "step": step, "start_step": start_step, "emulated": emulated, "error": error}


def test_without_a_gpu_every_check_fails_on_its_own_line_and_the_exit_is_1():
    import pcs_ray.cluster.discovery

    if pcs_ray.cluster.discovery.nvml_inventory() is not None:
        pytest.skip("this machine has NVIDIA GPUs: the bench runs for real here")
    proc = subprocess.run([sys.executable, str(BENCH), "--workloads", "tiny_cnn,vgg11"], capture_output=True,
                          text=True, timeout=120)
    lines = proc.stdout.splitlines()
    verdicts = [line for line in lines if line.startswith(("PASS ", "FAIL ", "SKIP "))]
    assert proc.returncode == 1
    assert [v.split()[1] for v in verdicts] == ["builtin_resume:tiny_cnn", "builtin_resume:vgg11", "preflight",
                                                "user_pinning", "pinned_uuid", "user_resume", "energy_builtin",
                                                "energy_user"]
    assert all(v.startswith("FAIL ") and "no NVIDIA GPU found through NVML" in v for v in verdicts)
    assert lines[-1].startswith("FAIL: 0 passed, 8 failed, 0 skipped of 8 checks")


def test_an_unknown_workload_is_a_usage_error(bench, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--cpu", "--workloads", "tiny_cnn,nope"])
    assert exit_.value.code == 2 and "unknown workload(s) nope" in capsys.readouterr().err


def test_one_failed_check_makes_the_exit_1_and_skips_never_count_as_passes(bench, monkeypatch, capsys):
    checks = [bench.Check("user_pinning", "PASS", "ok", 1.0), bench.Check("pinned_uuid", "SKIP", "needs CUDA"),
              bench.Check("user_resume", "FAIL", "run 1 started at step 3, run 0 stopped at 5", 2.5)]
    monkeypatch.setattr(bench, "run_checks", lambda *a, **k: (checks, {}))
    assert bench.main(["--cpu"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "FAIL user_resume (2.5 s): run 1 started at step 3, run 0 stopped at 5" in out
    assert out[-1].startswith("FAIL: 1 passed, 1 failed, 1 skipped of 3 checks")
    rc, line = bench.summarise(checks[:2], 3.0, "CPU (rehearsal)", rehearsal=True)
    assert rc == 0 and line.startswith("REHEARSAL PASS (CPU: not a real-GPU result): 1 passed, 0 failed, 1 skipped")
    assert bench.summarise(checks[:1], 1.0, "H100", rehearsal=False) == (0, "PASS: 1 passed, 0 failed, 0 skipped of 1 checks in 1.0 s on H100")


def test_a_job_views_energy_must_come_from_nvml(bench):
    view = {"id": 4, "state": "finished", "steps": 300, "total_steps": 300, "emulated": False,
            "energy": {"joules": 812.5, "source": "nvml", "modelled": False, "gpus_read": 1}}
    assert bench.energy_problems("user", view) == []
    modelled = {**view, "energy": {"joules": 900.0, "modelled": True, "source": "model"}}
    assert bench.energy_problems("user", modelled) == [
        'user job 4 energy is {"joules": 900.0, "modelled": true, "source": "model"}, want source \'nvml\' and joules > 0']
    assert len(bench.energy_problems("user", {**view, "energy": {**view["energy"], "joules": 0.0}})) == 1
    assert len(bench.energy_problems("user", {**view, "energy": None})) == 1
    assert bench.energy_problems("user", {**view, "state": "failed", "steps": 12})[0].startswith(
        "user job 4 ended failed at step 12, want finished at 300")
    assert bench.energy_problems("user", None) == ["no user job in status"]


def test_a_resume_must_stop_mid_run_lose_no_step_and_end_bitwise_equal(bench):
    good = [_run("preempted", 4), _run("finished", 10, start_step=4)]
    assert bench.resume_problems(10, _run(), good, [], 6, want_cuda=True, loop_resumed=[None, 4]) == []
    lost = [_run("preempted", 4), _run("finished", 10, start_step=3)]
    assert bench.resume_problems(10, _run(), lost, [], 6, want_cuda=True) == [
        "run 1 started at step 3, run 0 stopped at 4"]
    assert bench.resume_problems(10, _run(), good, [], 6, want_cuda=True, loop_resumed=[None, 2]) == [
        "run 1's loop loaded the checkpoint of step 2, want 4"]
    assert bench.resume_problems(10, _run(), good, ["fc.weight"], 6, want_cuda=True) == [
        "final weights differ from the uninterrupted run's in 1 of 6 tensors (fc.weight)"]
    late = [_run("finished", 10), _run("finished", 10, start_step=10)]
    assert bench.resume_problems(10, _run(), late, [], 6, want_cuda=True)[0] == (
        "stopped run 0 ended finished at step 10, want preempted")
    on_cpu = [_run("preempted", 4, emulated=True), _run("finished", 10, start_step=4)]
    assert bench.resume_problems(10, _run(), on_cpu, [], 6, want_cuda=True) == [
        "stopped run 0 was not on CUDA (emulated=True)"]
    assert bench.resume_problems(10, _run(), on_cpu, [], 6, want_cuda=False) == []


def test_the_user_job_stopped_and_resumed_on_cpu_passes_and_a_changed_resume_fails(bench, tmp_path):
    from pcs_ray.contract import GPUSlot

    slot = GPUSlot("bench", 0)
    check = bench.user_resume(bench.InProcessLauncher(), slot, tmp_path / "a", 24, 9, 0.0, want_cuda=False)
    assert check.status == "PASS", check.line()
    runs = check.figures["runs"]
    assert (runs[0]["status"], runs[0]["step"], runs[1]["start_step"]) == ("preempted", 10, 10)
    assert check.figures["loop_resumed_from"] == [None, 10] and check.figures["tensors"] == 4

    class DriftingResume(bench.InProcessLauncher):
        """Resumes on other data (another seed): the weights can no longer match."""

        def run(self, request, stop_at=None):
            if request.job_id == "parts" and request.attempt == 1:
                request = replace(request, code={**request.code, "config": {**request.code["config"], "seed": 4}})
            return super().run(request, stop_at)

    drift = bench.user_resume(DriftingResume(), slot, tmp_path / "b", 24, 9, 0.0, want_cuda=False)
    assert drift.status == "FAIL" and "final weights differ from the uninterrupted run's in 4 of 4 tensors" in drift.detail
    on_gpu = bench.user_resume(bench.InProcessLauncher(), slot, tmp_path / "c", 24, 9, 0.0, want_cuda=True)
    assert on_gpu.status == "FAIL" and "was not on CUDA (emulated=True)" in on_gpu.detail  # this machine has none


def test_the_pinned_user_run_reads_its_environment_and_fails_off_its_gpu(bench, tmp_path, monkeypatch):
    from pcs_ray.contract import GPUSlot

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # what UserRank sets in its own process
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    pinning, uuid = bench.pinned_user_run(bench.InProcessLauncher(), GPUSlot("bench", 0), tmp_path / "a", 5,
                                          want_cuda=False, nvml_uuid=None)
    assert pinning.status == "PASS" and uuid.status == "SKIP", (pinning.line(), uuid.line())
    assert pinning.figures["seen_in_run"]["cuda_visible_devices"] == "0"
    pinning, uuid = bench.pinned_user_run(bench.InProcessLauncher(), GPUSlot("bench", 2), tmp_path / "b", 5,
                                          want_cuda=True, nvml_uuid=UUID)
    assert pinning.status == "FAIL" and "CUDA_VISIBLE_DEVICES in the pinned process is '0', want '2'" in pinning.detail
    assert uuid.status == "FAIL" and "no UUID readable in the pinned process" in uuid.detail


def test_a_builtin_workload_stopped_and_resumed_on_cpu_is_bitwise_equal(bench, tmp_path):
    check = bench.builtin_resume("tiny_cnn", tmp_path, 6, 2, want_cuda=False)
    assert check.status == "PASS", check.line()
    assert [(r["start_step"], r["step"]) for r in check.figures["runs"]] == [(0, 2), (2, 6)]
    assert bench.builtin_resume("tiny_cnn", tmp_path / "gpu", 4, 2, want_cuda=True).status == "FAIL"  # no CUDA here


def test_the_energy_jobs_pass_submission_checks(bench, tmp_path):
    from pcs_ray.jobs.jobfile import load_job

    workdir = bench.write_user_code(tmp_path / "user-code")
    files = bench.energy_job_files(tmp_path, workdir, tmp_path / "probes", 1000, 400, 0.005)
    builtin, user = load_job(files["builtin"]), load_job(files["user"])
    assert (builtin.workload, builtin.steps, user.steps, user.entrypoint) == ("tiny_cnn", 1000, 400, "probe.py:loop")
    assert Path(user.working_dir) == workdir.resolve() and user.config["probe_dir"] == str(tmp_path / "probes")


def test_energy_puts_the_counter_beside_the_integral_of_power(bench):
    readings = [{"ts": 0.0, "power_w": 100.0, "energy_j": 0.0}, {"ts": 2.0, "power_w": 140.0, "energy_j": 245.0},
                {"ts": 3.0, "power_w": 120.0, "energy_j": 372.0, "clock_events": ["sw_power_cap"]}]
    out = bench._energy(list(reversed(readings)))  # in any order
    assert out["counter_j"] == 372.0 and out["power_integral_j"] == pytest.approx(240.0 + 130.0)
    assert out["span_s"] == 3.0 and out["mean_power_w"] == 120.0 and out["clock_events"] == ["sw_power_cap"]


def test_a_check_the_budget_does_not_reach_fails_and_is_never_passed(bench, capsys):
    assert bench.main(["--cpu", "--budget-s", "0"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "FAIL user_resume (0.0 s): not run: --budget-s 0 spent before it" in lines
    assert "FAIL builtin_resume:tiny_cnn (0.0 s): not run: --budget-s 0 spent before it" in lines
    assert not [line for line in lines if line.startswith("PASS ")]


def test_the_uuid_compared_is_nvmls_for_the_index_the_job_was_pinned_to(bench):
    from fake_pynvml import FakeNVML

    from pcs_ray.cluster.discovery import nvml_inventory
    from pcs_ray.cluster.preflight import uuid_problems

    inventory = nvml_inventory("box", FakeNVML(count=4))
    assert bench.pin_target(inventory, None) == (3, "GPU-fake-3")  # the last: CUDA's 0 in the run is not NVML's 0
    assert bench.pin_target(inventory, 1) == (1, "GPU-fake-1")
    assert bench.pin_target(None, None) == (0, None)  # a rehearsal's one logical GPU
    seen = {"torch_uuid": "fake-0"}  # a run that landed on NVML's GPU 0 instead
    assert uuid_problems(seen, bench.pin_target(inventory, None)[1], 3) == [
        "in the pinned process torch says CUDA device 0 is fake-0, NVML's GPU 3 is fake-3"]


def test_only_runs_the_groups_asked_for_and_the_others_are_skip_lines(bench, capsys):
    assert bench.main(["--cpu", "--only", "builtin", "--workloads", "tiny_cnn"]) == 0
    out = capsys.readouterr().out.splitlines()
    verdicts = {line.split()[1]: line.split()[0] for line in out if line.startswith(("PASS ", "FAIL ", "SKIP "))}
    assert verdicts == {"builtin_resume:tiny_cnn": "PASS", "preflight": "SKIP", "user_pinning": "SKIP",
                        "pinned_uuid": "SKIP", "user_resume": "SKIP", "energy_builtin": "SKIP", "energy_user": "SKIP"}
    assert "SKIP user_pinning (0.0 s): not asked for (--only builtin)" in out
    assert out[-1].startswith("REHEARSAL PASS (CPU: not a real-GPU result): 1 passed, 0 failed, 6 skipped")
    assert [bench.group_of(n) for n in bench.plan(["vgg11"])] == ["builtin", "preflight", "user", "user", "user",
                                                                 "energy", "energy"]


@pytest.mark.parametrize("only", ["", "builtin,gpu"])
def test_only_with_an_unknown_group_is_a_usage_error(bench, capsys, only):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--cpu", "--only", only])
    assert exit_.value.code == 2 and "choose from builtin, preflight, user, energy" in capsys.readouterr().err
