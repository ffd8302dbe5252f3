"""Probes a node's GPUs as pcs-ray pins its runs, for the checks of :mod:`pcs_ray.cluster.preflight`.

For each GPU a fresh Python process starts with the variables a run's rank gets
(``CUDA_VISIBLE_DEVICES`` = the GPU's NVML index, ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, as
``pcs_ray.executors.user_run`` sets them), asks torch and NVML what it sees (:func:`seen_here`) and prints it as
one JSON line. A process per GPU because CUDA reads the variables once, when it starts in a process;
they run side by side, so a node's probe takes about one torch import and CUDA start-up.

    python -m pcs_ray.executors.preflight        # in a pinned process: what it sees, as JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from pcs_ray.api import strict_json
from pcs_ray.cluster.preflight import Verdict, gpu_verdicts

PROBE_TIMEOUT_S = 120.0  # a torch import and CUDA start-up on a loaded node take seconds, a hung driver forever


def pinned_env(index: int) -> dict[str, str]:
    """The variables that pin a process to NVML's GPU ``index``."""
    return {"CUDA_VISIBLE_DEVICES": str(index), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def seen_here() -> dict:
    """What this process sees of its GPU: its pinning variables, torch's CUDA devices, device 0's name,
    UUID and PCI bus id, and NVML's UUID for that bus id (``nvml_error`` where NVML would not say)."""
    import torch

    out = {"pid": os.getpid(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"), "cuda_available": torch.cuda.is_available(),
           "device": "cpu", "cuda_device_count": 0, "name": None, "torch_uuid": None, "pci_bus_id": None,
           "nvml_uuid_of_pci_bus_id": None, "nvml_error": None}
    if not out["cuda_available"]:
        return out
    out.update(device="cuda:0", cuda_device_count=torch.cuda.device_count())
    props = torch.cuda.get_device_properties(0)
    out["name"] = props.name
    uuid = getattr(props, "uuid", None)
    out["torch_uuid"] = None if uuid is None else str(uuid)
    ids = [getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if None not in ids:
        out["pci_bus_id"] = "%08X:%02X:%02X.0" % tuple(ids)
        try:
            from pcs_ray.cluster.nvml import NVMLDevices

            with NVMLDevices.start() as devices:
                out["nvml_uuid_of_pci_bus_id"] = devices.uuid_at_pci_bus(out["pci_bus_id"])
        except Exception as exc:  # the check reports it: NVML's own words say why
            out["nvml_error"] = f"{type(exc).__name__}: {exc}"
    return out


def probe(index: int, timeout: float = PROBE_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """What a fresh process pinned to GPU ``index`` sees, or (None, why it said nothing)."""
    env = {**os.environ, **pinned_env(index)}
    try:
        proc = subprocess.run([sys.executable, "-m", "pcs_ray.executors.preflight"], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"the pinned process did not report within {timeout:g} s"
    except OSError as exc:
        return None, f"the pinned process could not start: {exc}"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        tail = " ".join(proc.stderr.strip().splitlines()[-1:]) or "no output"
        return None, f"the pinned process exited {proc.returncode}: {tail[-300:]}"
    try:
        return json.loads(lines[-1]), None
    except json.JSONDecodeError:
        return None, f"the pinned process printed no record: {lines[-1][-300:]}"


def check_node(gpus: list[tuple[int, str]], timeout: float = PROBE_TIMEOUT_S, prober=None) -> list[Verdict]:
    """Every check of every GPU in ``gpus`` ((NVML index, UUID) pairs), probed side by side, in their order.
    ``prober``: a stand-in for :func:`probe`, for tests."""
    if not gpus:
        return []
    ask = prober or probe
    with ThreadPoolExecutor(max_workers=len(gpus)) as pool:
        seen = list(pool.map(lambda gpu: ask(gpu[0], timeout), gpus))
    return [v for (index, uuid), (record, error) in zip(gpus, seen) for v in gpu_verdicts(index, uuid, record, error)]


if __name__ == "__main__":
    print(strict_json.dumps(seen_here()))
