"""The workload registry and its data: real CIFAR-10 through torchvision, or generated data."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from pcs_ray.workloads.models import (
    CIFAR10_FOLDER,
    GeneratedCIFAR10,
    GeneratedText,
    WorkloadError,
    get_workload,
    load_cifar10,
    workload_names,
)


def test_registry_has_the_issue_workloads():
    assert {"resnet18", "vgg11", "mobilenet_v2", "transformer", "tiny_cnn"} <= set(workload_names())


def test_unknown_workload_is_a_value_error_listing_names():
    with pytest.raises(ValueError, match="resnet18"):
        get_workload("resnet-18")


def test_unknown_or_bad_parameters_are_rejected():
    with pytest.raises(WorkloadError, match="unknown parameter.*btach_size"):
        get_workload("tiny_cnn").resolve({"btach_size": 4})
    with pytest.raises(WorkloadError, match="batch_size"):
        get_workload("tiny_cnn").resolve({"batch_size": 0})
    with pytest.raises(WorkloadError, match="optimizer"):
        get_workload("tiny_cnn").resolve({"optimizer": "lbfgs"})
    assert get_workload("tiny_cnn").resolve({"lr": 0.5})["lr"] == 0.5


@pytest.mark.parametrize("name", ["resnet18", "vgg11", "mobilenet_v2", "tiny_cnn", "transformer"])
def test_every_workload_builds_and_runs_a_batch(name, monkeypatch):
    monkeypatch.delenv("PCS_RAY_DATASETS", raising=False)
    workload = get_workload(name)
    params = workload.resolve({"num_samples": 16})
    model, dataset = workload.build_model(params), workload.build_dataset(params)
    inputs = torch.stack([dataset[i][0] for i in range(2)])
    model.eval()
    with torch.no_grad():
        assert model(inputs).shape == (2, 10)
    assert dataset.source == "generated"


def test_generated_images_have_cifar_format_and_depend_only_on_seed():
    a, b, c = GeneratedCIFAR10(100, seed=1), GeneratedCIFAR10(100, seed=1), GeneratedCIFAR10(100, seed=2)
    image, label = a.raw(7)
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8 and 0 <= label < 10
    assert torch.equal(a[7][0], b[7][0]) and a[7][1] == b[7][1]
    assert not torch.equal(a[7][0], c[7][0])
    tensor, _ = a[7]
    assert tensor.shape == (3, 32, 32) and tensor.dtype == torch.float32
    assert len({a[i][1] for i in range(100)}) == 10  # every class occurs
    with pytest.raises(IndexError):
        a[100]


def test_generated_text_is_deterministic():
    a, b = GeneratedText(50, seq_len=16, seed=4), GeneratedText(50, seq_len=16, seed=4)
    tokens, label = a[3]
    assert tokens.shape == (16,) and tokens.dtype == torch.int64 and 0 <= label < 10
    assert torch.equal(tokens, b[3][0])


def _write_fake_cifar10(root, per_batch: int = 4) -> tuple[np.ndarray, list[int]]:
    """Write a tiny CIFAR-10 in torchvision's on-disk format (python pickles, rows of 3072 uint8 CHW)."""
    folder = root / CIFAR10_FOLDER
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    all_data, all_labels = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [int(x) for x in rng.integers(0, 10, size=per_batch)]
        with open(folder / name, "wb") as f:
            pickle.dump({"batch_label": name, "labels": labels, "data": data, "filenames": [f"{name}_{i}.png" for i in range(per_batch)]}, f)
        if name != "test_batch":
            all_data.append(data)
            all_labels += labels
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"], "num_cases_per_batch": per_batch}, f)
    return np.concatenate(all_data), all_labels


def test_real_cifar10_loader_reads_the_torchvision_format(tmp_path, monkeypatch):
    data, labels = _write_fake_cifar10(tmp_path)
    # The fake files cannot match the real MD5s torchvision checks; everything else is torchvision's own code.
    import torchvision.datasets.cifar as cifar

    monkeypatch.setattr(cifar, "check_integrity", lambda path, md5=None: __import__("os").path.isfile(path))
    dataset = load_cifar10(tmp_path)
    assert dataset.source == "cifar10" and len(dataset) == 20
    tensor, label = dataset[5]
    assert label == labels[5]
    expected = torch.from_numpy(data[5].reshape(3, 32, 32).astype(np.float32) / 255.0)
    mean, std = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1), torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)
    assert torch.allclose(tensor, (expected - mean) / std, atol=1e-6)
    # the image workloads use it when data_root holds it, inside a dataset root the operator configured
    workload = get_workload("tiny_cnn")
    with pytest.raises(ValueError, match="outside the dataset roots"):
        workload.resolve({"data_root": str(tmp_path)})
    monkeypatch.setenv("PCS_RAY_DATASETS", str(tmp_path))  # the operator's roots, and the default for every job
    assert workload.build_dataset(workload.resolve({"data_root": str(tmp_path)})).source == "cifar10"
    assert workload.build_dataset(workload.resolve({})).source == "cifar10"


def test_damaged_cifar10_is_an_error_not_silently_replaced(tmp_path):
    _write_fake_cifar10(tmp_path)  # real MD5 check: these files fail it
    with pytest.raises(RuntimeError, match="corrupted|not found"):
        load_cifar10(tmp_path)


def test_missing_cifar10_falls_back_to_generated(tmp_path):
    assert load_cifar10(tmp_path, num_samples=10).source == "generated"
    assert load_cifar10(None, num_samples=10).source == "generated"


def test_transform_is_torchvisions_to_tensor_and_normalize_bitwise():
    from PIL import Image
    from torchvision import transforms

    from pcs_ray.workloads.models import CIFAR10_MEAN, CIFAR10_STD, CifarTransform

    reference = transforms.Compose([transforms.ToTensor(), transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD)])
    ours = CifarTransform()
    data = GeneratedCIFAR10(20, seed=9)
    for i in range(20):
        image = data.raw(i)[0]
        expected = reference(Image.fromarray(image))
        assert torch.equal(ours(image), expected) and torch.equal(ours(Image.fromarray(image)), expected)


def test_runner_warm_imports_are_declared_for_torchvision_models():
    assert get_workload("resnet18").imports == ("torchvision",)
    assert get_workload("tiny_cnn").imports == ()


def test_every_registered_workload_is_declared_in_the_catalog_and_back():
    from pcs_ray.workloads.catalog import CATALOG

    assert set(CATALOG) == set(workload_names())


def test_the_runner_resolves_the_same_bounds_jobs_are_checked_against():
    with pytest.raises(WorkloadError, match="num_samples: 100000000000 is outside the allowed range"):
        get_workload("resnet18").resolve({"num_samples": 100_000_000_000})
    assert get_workload("transformer").resolve({"lr": "1e-3"})["lr"] == 0.001
