"""The cluster model: spec files, validation, the slowdown model and NVML discovery."""

from __future__ import annotations

import json
import sys
import types

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pcs_ray.cluster import (
    ClusterSpec,
    ClusterSpecError,
    GPUSpec,
    NodeSpec,
    discover_cluster,
    load_cluster_spec,
)

SPEC = {
    "locality_penalty": 1.25,
    "nodes": [
        {
            "name": "a",
            "gpus": [
                {"index": 0, "uuid": "GPU-a0", "scores": {"A": 1.0, "B": 1.1}},
                {"index": 1, "uuid": "GPU-a1", "scores": {"A": 1.4}},
            ],
        },
        {"name": "b", "gpus": [{"index": 0, "uuid": "GPU-b0", "scores": {"A": 1.2, "B": 2.0}}]},
    ],
}


@pytest.fixture
def spec() -> ClusterSpec:
    return ClusterSpec.model_validate(SPEC)


# --- loading ------------------------------------------------------------------


def test_load_yaml_and_json_give_the_same_spec(tmp_path, spec):
    y = tmp_path / "cluster.yaml"
    y.write_text(yaml.safe_dump(SPEC))
    j = tmp_path / "cluster.json"
    j.write_text(json.dumps(SPEC))
    assert load_cluster_spec(y) == spec
    assert load_cluster_spec(str(j)) == spec
    assert spec.num_gpus == 3
    assert spec.gpus_per_node is None
    assert [n.name for n in spec.nodes] == ["a", "b"]


def test_yaml_gpu_count_shorthand_and_relative_topology(tmp_path):
    (tmp_path / "specs").mkdir()
    path = tmp_path / "specs" / "c.yml"
    path.write_text(
        "nodes:\n"
        "  - name: n0\n    gpus: 2\n    topology: topo-n0.txt\n"
        "  - name: n1\n    gpus: 2\n    topology: /abs/topo.txt\n"
        "  - name: n2\n    gpus: 2\n"
    )
    spec = load_cluster_spec(path)
    assert spec.num_gpus == 6 and spec.gpus_per_node == 2
    assert [g.uuid for g in spec.nodes[1].gpus] == ["GPU-sim-n1-0", "GPU-sim-n1-1"]
    assert spec.nodes[0].topology == str((tmp_path / "specs" / "topo-n0.txt").resolve())
    assert spec.nodes[1].topology == "/abs/topo.txt"
    assert spec.nodes[2].topology is None
    assert spec.locality_penalty == 1.0


def _node(name="a", gpus=None, **kw):
    return {"name": name, "gpus": gpus if gpus is not None else [{"index": 0, "uuid": f"GPU-{name}"}], **kw}


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"nodes": [_node(gpus=[{"index": 0, "uuid": "x", "scores": {"A": -1}}])]}, "nodes[0].gpus[0].scores.A"),
        ({"nodes": [_node(gpus=[{"index": 0, "uuid": "x", "scores": {"B": 0}}])]}, "nodes[0].gpus[0].scores.B"),
        ({"nodes": [_node(gpus=[{"index": 0, "uuid": "x", "scores": {"A": "fast"}}])]}, "scores.A"),
        ({"nodes": [_node(gpus=[{"index": 0}])]}, "nodes[0].gpus[0].uuid"),
        ({"nodes": [_node(gpus=[{"index": -1, "uuid": "x"}])]}, "nodes[0].gpus[0].index"),
        ({"nodes": [_node(gpus=[])]}, "nodes[0].gpus"),
        ({"nodes": [_node(gpus=0)]}, "gpus"),
        ({"nodes": [_node(gpus=[{"index": 0, "uuid": "x"}, {"index": 0, "uuid": "y"}])]}, "duplicate GPU index 0"),
        ({"nodes": [_node("a"), _node("a")]}, "duplicate node name 'a'"),
        ({"nodes": [_node("a", [{"index": 0, "uuid": "u"}]), _node("b", [{"index": 0, "uuid": "u"}])]}, "uuid 'u'"),
        ({"nodes": [_node()], "locality_penalty": 0.5}, "locality_penalty"),
        ({"nodes": [_node()], "locality_penality": 2}, "locality_penality"),
        ({"nodes": [_node(gpu_count=3)]}, "nodes[0].gpu_count"),
        ({"nodes": []}, "nodes"),
        ({}, "nodes"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_validation_errors_are_one_line_and_name_the_field(tmp_path, raw, fragment):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ClusterSpecError) as exc:
        load_cluster_spec(path)
    msg = str(exc.value)
    assert isinstance(exc.value, ValueError)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: ")
    assert fragment in msg


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("bad.yaml", "nodes: [\n  - name: a\n", "not valid YAML at line"),
        ("bad.json", '{"nodes": [', "not valid JSON"),
        ("empty.yaml", "", "empty cluster spec"),
        ("scalar.yaml", "just text", "expected a mapping"),
    ],
)
def test_unparsable_files(tmp_path, name, text, fragment):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ClusterSpecError, match=fragment) as exc:
        load_cluster_spec(path)
    assert "\n" not in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(ClusterSpecError, match="no such cluster spec file"):
        load_cluster_spec(tmp_path / "nope.yaml")


# --- queries and the slowdown model ---------------------------------------------


def test_global_ids_and_lookups(spec):
    assert spec.gpu_ids() == [0, 1, 2]
    assert [spec.node_of(i).name for i in spec.gpu_ids()] == ["a", "a", "b"]
    assert spec.gpu(2).uuid == "GPU-b0"
    assert spec.score(1, "A") == 1.4
    assert spec.score(1, "B") == 1.0  # no score for the class: nominal
    assert spec.score(0, "Z") == 1.0
    for bad in (-1, 3):
        with pytest.raises(IndexError):
            spec.node_of(bad)
        with pytest.raises(IndexError):
            spec.slowdown([0, bad], "A")


def test_slowest_gpu_sets_the_pace_and_spanning_nodes_pays_the_penalty(spec):
    assert spec.slowdown([0], "A") == 1.0
    assert spec.slowdown([0, 1], "A") == 1.4  # same node: no penalty
    assert spec.slowdown([0, 1], "B") == 1.1
    assert spec.slowdown([0, 2], "A") == pytest.approx(1.2 * 1.25)
    assert spec.slowdown([1, 2], "A") == pytest.approx(1.4 * 1.25)
    assert spec.slowdown([0, 1, 2], "B") == pytest.approx(2.0 * 1.25)
    assert spec.slowdown([0, 2], "C") == pytest.approx(1.25)  # unscored class, still remote
    assert spec.slowdown((i for i in [2]), "B") == 2.0  # any iterable
    assert spec.slowdown([], "A") == 1.0


def test_scores_below_one_are_faster_gpus():
    spec = ClusterSpec(nodes=[NodeSpec(name="n", gpus=[GPUSpec(index=0, uuid="u", scores={"A": 0.8})])])
    assert spec.slowdown([0], "A") == 0.8
    assert GPUSpec(index=1, uuid="v").score("A") == 1.0


# --- homogeneous builder ---------------------------------------------------------


def test_homogeneous_one_node_by_default():
    spec = ClusterSpec.homogeneous(8)
    assert spec.num_gpus == 8 and len(spec.nodes) == 1 and spec.gpus_per_node == 8
    assert spec.nodes[0].name == "node0"
    assert spec.nodes[0].gpus[3].uuid == "GPU-sim-node0-3"
    assert spec.slowdown(spec.gpu_ids(), "A") == 1.0


def test_homogeneous_last_node_holds_the_remainder():
    spec = ClusterSpec.homogeneous(10, 4, locality_penalty=1.5)
    assert [len(n.gpus) for n in spec.nodes] == [4, 4, 2]
    assert spec.gpus_per_node is None
    assert spec.nodes[2].gpus[1].uuid == "GPU-sim-node2-1"
    assert spec.node_of(9).name == "node2"
    assert spec.slowdown([3, 4], "A") == 1.5
    assert ClusterSpec.homogeneous(8, 4).gpus_per_node == 4


@pytest.mark.parametrize(("args", "kw"), [((0,), {}), ((-4,), {}), ((8, 0), {}), ((8,), {"locality_penalty": 0.9})])
def test_homogeneous_rejects_bad_sizes(args, kw):
    with pytest.raises(ClusterSpecError):
        ClusterSpec.homogeneous(*args, **kw)


@given(st.integers(1, 300), st.integers(1, 64))
def test_homogeneous_partitions_ids_in_node_order(num_gpus, per_node):
    spec = ClusterSpec.homogeneous(num_gpus, per_node)
    sizes = [len(n.gpus) for n in spec.nodes]
    assert sum(sizes) == spec.num_gpus == num_gpus
    assert all(s == per_node for s in sizes[:-1]) and 1 <= sizes[-1] <= per_node
    assert [int(spec.node_of(i).name[4:]) for i in spec.gpu_ids()] == [i // per_node for i in range(num_gpus)]
    assert len({g.uuid for n in spec.nodes for g in n.gpus}) == num_gpus


# --- discovery -------------------------------------------------------------------


class _FakeNVMLError(Exception):
    pass


def _fake_pynvml(uuids=None, fail_init=False):
    mod = types.ModuleType("pynvml")
    mod.NVMLError = _FakeNVMLError
    mod.shutdowns = 0

    def init():
        if fail_init:
            raise _FakeNVMLError("NVML Shared Library Not Found")

    def shutdown():
        mod.shutdowns += 1

    mod.nvmlInit = init
    mod.nvmlShutdown = shutdown
    mod.nvmlDeviceGetCount = lambda: len(uuids or [])
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetUUID = lambda h: uuids[h]
    return mod


def test_discover_without_nvml_needs_a_spec(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    with pytest.raises(ClusterSpecError, match="no GPUs found by NVML and no cluster spec given"):
        discover_cluster()
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    assert discover_cluster(path).num_gpus == 3
    with pytest.raises(ClusterSpecError, match="no such cluster spec file"):
        discover_cluster(tmp_path / "missing.yaml")


def test_discover_falls_back_when_nvml_fails_or_sees_no_gpu(monkeypatch, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(SPEC))
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail_init=True))
    assert discover_cluster(path).num_gpus == 3
    fake = _fake_pynvml(uuids=[])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert discover_cluster(path).num_gpus == 3
    assert fake.shutdowns == 1
    with pytest.raises(ClusterSpecError):
        discover_cluster()


def test_discover_builds_one_node_from_nvml(monkeypatch):
    fake = _fake_pynvml(uuids=[b"GPU-1111", "GPU-2222"])  # older bindings return bytes
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    spec = discover_cluster("/ignored/when/gpus/exist.yaml")
    assert len(spec.nodes) == 1
    assert [(g.index, g.uuid) for g in spec.nodes[0].gpus] == [(0, "GPU-1111"), (1, "GPU-2222")]
    assert fake.shutdowns == 1
