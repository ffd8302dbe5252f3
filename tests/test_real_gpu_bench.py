"""bench/real_gpu.py off a GPU machine, and its energy arithmetic (its GPU runs are reported in the closing notes)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs a bench in a subprocess

BENCH = Path(__file__).resolve().parent.parent / "bench" / "real_gpu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("real_gpu_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_nvml_gpus_it_says_so_in_one_line(monkeypatch):
    import pcs_ray.discovery

    if pcs_ray.discovery.nvml_inventory() is not None:
        pytest.skip("this machine has NVIDIA GPUs: the bench runs for real here")
    proc = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: no NVIDIA GPU found through NVML")


def test_energy_puts_the_counter_beside_the_integral_of_power():
    readings = [{"ts": 0.0, "power_w": 100.0, "energy_j": 0.0}, {"ts": 2.0, "power_w": 140.0, "energy_j": 245.0},
                {"ts": 3.0, "power_w": 120.0, "energy_j": 372.0, "clock_events": ["sw_power_cap"]}]
    out = _bench()._energy(list(reversed(readings)))  # in any order
    assert out["counter_j"] == 372.0 and out["power_integral_j"] == pytest.approx(240.0 + 130.0)
    assert out["span_s"] == 3.0 and out["mean_power_w"] == 120.0 and out["clock_events"] == ["sw_power_cap"]
