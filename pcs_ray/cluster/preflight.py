"""What a node's GPUs must pass before pcs-ray trusts them: checks over what a process pinned to each one sees.

pcs-ray pins a run to GPU ``i`` (NVML's index) with ``CUDA_VISIBLE_DEVICES=i`` and
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so that CUDA's device 0 inside the run is that GPU. Two things can make
that silently false on a node: CUDA numbering devices in another order than NVML (or the variables not
reaching the process), and a process that still sees several devices or none. The checks:

* ``pinning``: the pinned process has ``CUDA_VISIBLE_DEVICES`` = ``i`` and ``CUDA_DEVICE_ORDER`` =
  ``PCI_BUS_ID`` and, where a GPU is wanted, CUDA shows it exactly one device, ``cuda:0``;
* ``uuid``: CUDA device 0's UUID in that process (torch's, and NVML's for the device's PCI bus id) is
  NVML's UUID for GPU ``i``.

They read the record a pinned process writes of itself (``pcs_ray.executors.preflight`` probes one); this
module only judges it, so the checks run anywhere, fed what a node reported.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKS = ("probe", "pinning", "uuid")  # ``probe``: the pinned process could not report at all
NOTHING_SEEN = "nothing recorded from the pinned process (its probe never ran)"


def normal_uuid(uuid) -> str | None:
    """A GPU UUID as NVML (``GPU-…``) and torch (bare) both spell it: lower case, no ``GPU-`` prefix."""
    if uuid is None or str(uuid).strip() == "":
        return None
    text = str(uuid).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def pinning_problems(seen: dict | None, pinned: int, want_cuda: bool) -> list[str]:
    """Pinned to ``pinned`` in PCI bus order and, where ``want_cuda``, on CUDA device 0 alone."""
    if seen is None:
        return [NOTHING_SEEN]
    out = []
    if seen.get("cuda_visible_devices") != str(pinned):
        out.append(f"CUDA_VISIBLE_DEVICES in the pinned process is {seen.get('cuda_visible_devices')!r}, "
                   f"want {str(pinned)!r}")
    if seen.get("cuda_device_order") != "PCI_BUS_ID":
        out.append(f"CUDA_DEVICE_ORDER in the pinned process is {seen.get('cuda_device_order')!r}, want 'PCI_BUS_ID'")
    if want_cuda:
        if not seen.get("cuda_available") or seen.get("device") != "cuda:0":
            out.append(f"the pinned process's device is {seen.get('device')!r} "
                       f"(CUDA available: {seen.get('cuda_available')})")
        elif seen.get("cuda_device_count") != 1:
            out.append(f"the pinned process sees {seen.get('cuda_device_count')} CUDA devices, want 1")
    return out


def uuid_problems(seen: dict | None, nvml_uuid: str | None, pinned: int) -> list[str]:
    """CUDA device 0's UUID in the pinned process (torch's, and NVML's for its PCI bus id) against NVML's
    UUID for GPU ``pinned``."""
    if seen is None:
        return [NOTHING_SEEN]
    want = normal_uuid(nvml_uuid)
    if want is None:
        return [f"NVML gave no UUID for GPU {pinned}"]
    found = {"torch": normal_uuid(seen.get("torch_uuid")),
             "NVML by PCI bus id": normal_uuid(seen.get("nvml_uuid_of_pci_bus_id"))}
    if all(v is None for v in found.values()):
        return [f"no UUID readable in the pinned process (torch none; NVML by PCI bus id {seen.get('pci_bus_id')}: "
                f"{seen.get('nvml_error')})"]
    return [f"in the pinned process {label} says CUDA device 0 is {uuid}, NVML's GPU {pinned} is {want}"
            for label, uuid in found.items() if uuid is not None and uuid != want]


@dataclass(frozen=True)
class Verdict:
    """One check of one GPU: passed when it found no problem."""

    index: int
    uuid: str
    check: str
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems

    def line(self) -> str:
        """One line saying which GPU failed which check, and why."""
        return f"GPU {self.index} ({self.uuid}) failed the {self.check} check: {'; '.join(self.problems)}"

    def to_dict(self) -> dict:
        return {"index": self.index, "uuid": self.uuid, "check": self.check, "passed": self.passed,
                "problems": list(self.problems)}


def gpu_verdicts(index: int, uuid: str, seen: dict | None, error: str | None = None) -> list[Verdict]:
    """GPU ``index``'s verdicts from what a process pinned to it reported (``seen``), or, where it reported
    nothing, one failed ``probe`` verdict with ``error``."""
    if seen is None:
        return [Verdict(index, uuid, "probe", (error or NOTHING_SEEN,))]
    return [Verdict(index, uuid, "pinning", tuple(pinning_problems(seen, index, want_cuda=True))),
            Verdict(index, uuid, "uuid", tuple(uuid_problems(seen, uuid, index)))]


__all__ = ["CHECKS", "Verdict", "gpu_verdicts", "normal_uuid", "pinning_problems", "uuid_problems"]
