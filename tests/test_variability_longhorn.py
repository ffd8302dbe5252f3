"""The Longhorn per-run loader: one device key across the four files' spellings, runtimes per app median."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pcs_ray.variability.longhorn import APPS, LonghornError, load_runs

HEADERS = {
    "resnet": "exp,job_id,ts,cabinet,node,cab-node,uuid,device,perf,mean_freq,freq,mean_memfreq,mean_temp,temp,mean_pwr,pwr",
    "bert": "Unnamed: 0,exp,job_id,ts,cabinet,node,device,uuid,perf,mean_freq,freq,mean_memfreq,mean_temp,temp,mean_pwr,pwr",
    "pagerank": ",exp,reps,uuid,cabinet,node,ts,device,perf,freq,memfreq,temp,pwr",
    "sgemm": "exp,input_size,reps,uuid,cabinet,node,ts,kern,perf,freq,memfreq,temp,pwr,dev_id",
}
ROWS = {
    "resnet": ["resnet,1,1000,c002,4,c002-4,c002-4-1,1,100,1500,1530,877,40,43,180,82",
               "resnet,2,1100,c005,4,c005-4,c005-4-3,3,300,1510,1530,877,41,43,190,90"],
    "bert": ["0,bert,3,2000,c009,3,1,c009-3-1,240,1520,1530,877,59,59,150,149",
             "1,bert,4,2100,c002,4,1,c002-4-1,480,1520,1530,877,59,59,160,149"],
    "pagerank": ["0,pagerank,1,GPU-aaa,c005,004,3000,3,66000,1530,877,33,78",
                 "1,pagerank,1,GPU-bbb,c002,004,3100,1,33000,1530,877,33,80"],
    # GPU-aaa: no cabinet here, slot from PageRank; GPU-ccc: cabinet/node only, no slot anywhere
    "sgemm": ["sgemm,25536,100,GPU-aaa,-1,-1,-1,k,2400,1350,877,73,296,0",
              "sgemm,25536,100,GPU-ccc,c009,11,4000,k,2500,1350,877,70,297,0",
              "sgemm,25536,100,GPU-bbb,c002,4,4100,k,2600,1350,877,70,298,0"],
}


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    (tmp_path / "sim").mkdir()
    for app in APPS:
        (tmp_path / "sim" / f"{app}-longhorn-agg.csv").write_text("\n".join([HEADERS[app], *ROWS[app]]) + "\n")
    return tmp_path


def test_one_key_per_physical_gpu_across_spellings(tiny: Path) -> None:
    runs = load_runs(data_dir=tiny)
    keys = {(r.app, r.uuid): r.device for r in runs}
    assert keys[("resnet", "c002-4-1")] == "c002-4-1"
    assert keys[("pagerank", "GPU-aaa")] == "c005-4-3"  # zero-padded node '004' -> 4
    assert keys[("sgemm", "GPU-aaa")] == "c005-4-3"  # cabinet -1: found through PageRank's record
    assert keys[("sgemm", "GPU-bbb")] == keys[("bert", "c002-4-1")] == keys[("resnet", "c002-4-1")]
    assert keys[("sgemm", "GPU-ccc")] == "GPU-ccc"  # slot unknown everywhere: keeps its UUID
    assert keys[("resnet", "c005-4-3")] == keys[("pagerank", "GPU-aaa")]


def test_runtime_normalised_per_app_and_columns_chosen(tiny: Path) -> None:
    runs = {(r.app, r.uuid): r for r in load_runs(data_dir=tiny)}
    # perf units differ (s vs ms): each app's runtimes are relative to its own median
    assert runs[("resnet", "c002-4-1")].runtime == pytest.approx(0.5)
    assert runs[("resnet", "c005-4-3")].runtime == pytest.approx(1.5)
    assert runs[("pagerank", "GPU-aaa")].runtime == pytest.approx(66000 / 49500)
    assert runs[("sgemm", "GPU-ccc")].runtime == pytest.approx(1.0)
    r = runs[("resnet", "c002-4-1")]
    assert (r.power, r.power_sample, r.sm_clock, r.temperature, r.ts) == (180.0, 82.0, 1500.0, 40.0, 1000)
    p = runs[("pagerank", "GPU-aaa")]
    assert (p.power, p.power_sample, p.sm_clock, p.mem_clock, p.temperature) == (78.0, 78.0, 1530.0, 877.0, 33.0)
    assert runs[("sgemm", "GPU-aaa")].ts is None  # ts = -1 in the file


def test_errors_are_one_line(tiny: Path) -> None:
    with pytest.raises(LonghornError, match="unknown Longhorn application 'vgg'"):
        load_runs(["vgg"], data_dir=tiny)
    (tiny / "sim" / "bert-longhorn-agg.csv").unlink()
    with pytest.raises(LonghornError, match="cannot read"):
        load_runs(["bert"], data_dir=tiny)


def test_bundled_records_join_and_match_their_published_summary() -> None:
    runs = load_runs()
    assert len(runs) == 1404 + 1096 + 880 + 11087
    by_app = {a: [r for r in runs if r.app == a] for a in APPS}
    devices = {a: {r.device for r in rs} for a, rs in by_app.items()}
    assert [len(devices[a]) for a in APPS] == [336, 136, 172, 392]
    assert len(devices["resnet"] & devices["pagerank"]) > 100  # joined, not disjoint spellings
    assert len(devices["sgemm"] & devices["pagerank"]) == 168
    resnet_power = np.array([r.power for r in by_app["resnet"]])
    assert resnet_power.mean() == pytest.approx(181, abs=1) and resnet_power.std() == pytest.approx(14, abs=1)
    for rs in by_app.values():
        assert np.median([r.runtime for r in rs]) == pytest.approx(1.0)
