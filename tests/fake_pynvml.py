"""A stand-in for pynvml, for the tests of NVML discovery on a machine without GPUs."""

from __future__ import annotations

from types import SimpleNamespace


class FakeNVML:
    """Just enough of pynvml: four GPUs, NVLink pairs 0-1 (x2) and 2-3 (x1), PCIe levels otherwise."""

    NVML_FEATURE_ENABLED = 1
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_NVLINK_MAX_LINKS = 4

    class NVMLError(Exception):
        pass

    LINKS = {0: [1, 1], 1: [0, 0], 2: [3], 3: [2]}  # gpu -> remote GPU of each active link

    def __init__(self, count=4, fail_init=False):
        self.count, self.fail_init, self.shut = count, fail_init, False

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("library not found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}".encode()

    def nvmlDeviceGetName(self, h):
        return b"Fake V100"

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 300_000 if h != 3 else 250_000

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1530 if kind == self.NVML_CLOCK_SM else 877

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1380 + h

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:0{h}:00.0".encode())

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 2:
            raise self.NVMLError("not supported")
        return self.NVML_FEATURE_ENABLED if link < len(self.LINKS[h]) else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return self.nvmlDeviceGetPciInfo(self.LINKS[h][link])

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 20 if (a < 2) == (b < 2) else 50  # same switch: PXB; across sockets: SYS
