"""The one reader of NVML (``pynvml``, from ``nvidia-ml-py``): this node's GPUs, what each is, what each
reads now, and the link matrix between them.

Node discovery, cluster discovery and telemetry all read NVML through :class:`NVMLDevices`; tests hand it
a stand-in for the ``pynvml`` module. A query a GPU or driver does not answer (not supported, no
permission, a function an older driver lacks) reads as None.

The link matrix is the one ``nvidia-smi topo -m`` prints (:class:`~pcs_ray.cluster.topology.TopoMatrix`): ``NV#``
for # NVLinks between two GPUs, else their PCIe distance. On NVSwitch machines (DGX-2, DGX/HGX A100 and
H100) a GPU's NVLinks end at a switch, not at another GPU; NVML then names the switch as the link's remote
end, and ``nvidia-smi`` shows every pair of GPUs on the switches as ``NV#`` with # the GPU's links into
them. The reader does the same, where NVML says the remote end is a switch and the two GPUs reach each
other over NVLink (``nvmlDeviceGetP2PStatus``, where the driver answers it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pcs_ray.cluster.topology import TopoMatrix

# NVML's common-ancestor levels -> nvidia-smi topo -m codes.
PCIE_LEVEL = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_DEVICE_TYPE_SWITCH = 0x02  # NVML_NVLINK_DEVICE_TYPE_SWITCH
P2P_CAPS_INDEX_NVLINK = 2  # NVML_P2P_CAPS_INDEX_NVLINK
P2P_STATUS_OK = 0  # NVML_P2P_STATUS_OK


class NVMLUnavailable(Exception):
    """NVML cannot be read on this machine; the message says why."""


def load_pynvml():
    """The ``pynvml`` module, or None where ``nvidia-ml-py`` is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def text(value) -> str:
    """An NVML string (older bindings return bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


class NVMLDevices:
    """An open NVML session on this node's GPUs, by index; a context manager that ends the session."""

    def __init__(self, nvml, handles: list) -> None:
        self.nvml = nvml
        self.handles = handles
        self.closed = False

    @classmethod
    def start(cls, nvml=None) -> "NVMLDevices":
        """Initialise NVML (``nvml``: a stand-in for ``pynvml``) and find the GPUs; :class:`NVMLUnavailable`
        where the library, the driver or the device count cannot be had."""
        nvml = load_pynvml() if nvml is None else nvml
        if nvml is None:
            raise NVMLUnavailable("nvidia-ml-py is not installed")
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise NVMLUnavailable(f"NVML unavailable: {type(e).__name__}") from None
        devices = cls(nvml, [])
        try:
            devices.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception as e:
            devices.close()
            raise NVMLUnavailable(f"NVML cannot list the GPUs: {type(e).__name__}") from None
        return devices

    def __enter__(self) -> "NVMLDevices":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass

    @property
    def count(self) -> int:
        return len(self.handles)

    def query(self, name: str, *args):
        """``pynvml.<name>(*args)``, or None where the GPU or driver does not answer it."""
        try:
            return getattr(self.nvml, name)(*args)
        except Exception:
            return None

    def constant(self, name: str, default=None):
        return getattr(self.nvml, name, default)

    def uuid(self, i: int) -> str:
        """GPU ``i``'s UUID; :class:`NVMLUnavailable` where NVML does not give it (the GPU cannot be named)."""
        uuid = self.query("nvmlDeviceGetUUID", self.handles[i])
        if uuid is None:
            raise NVMLUnavailable(f"NVML gives no UUID for GPU {i}")
        return text(uuid)

    def uuid_at_pci_bus(self, bus_id: str) -> str:
        """The UUID of the GPU at PCI bus ``bus_id``; NVML's own error where it has none (a caller checking
        which device a process got wants to see why)."""
        return text(self.nvml.nvmlDeviceGetUUID(self.nvml.nvmlDeviceGetHandleByPciBusId(bus_id)))

    def facts(self, i: int) -> dict:
        """What GPU ``i`` is: ``uuid``, ``name``, ``power_limit_w`` and its clocks in MHz (None: not given)."""
        h = self.handles[i]
        power = self.query("nvmlDeviceGetPowerManagementLimit", h)  # mW
        sm, mem = self.constant("NVML_CLOCK_SM"), self.constant("NVML_CLOCK_MEM")
        return {
            "uuid": self.uuid(i), "name": text(self.query("nvmlDeviceGetName", h) or ""),
            "power_limit_w": None if power is None else power / 1000.0,
            "max_sm_clock_mhz": self.query("nvmlDeviceGetMaxClockInfo", h, sm),
            "max_mem_clock_mhz": self.query("nvmlDeviceGetMaxClockInfo", h, mem),
            "sm_clock_mhz": self.query("nvmlDeviceGetClockInfo", h, sm),
        }

    def reading(self, i: int) -> dict:
        """What GPU ``i`` reads now: ``uuid``, ``power_w``, ``energy_mj`` (the total-energy counter, mJ since
        the driver loaded), clocks (MHz), ``temperature_c``, ``utilization_pct`` and ``clock_event_mask``
        (the clock-event, or on older drivers throttle, reason bits); None: not given."""
        h = self.handles[i]
        uuid = self.query("nvmlDeviceGetUUID", h)
        power = self.query("nvmlDeviceGetPowerUsage", h)  # mW
        util = self.query("nvmlDeviceGetUtilizationRates", h)
        reasons = self.query("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = self.query("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        sm = self.query("nvmlDeviceGetClockInfo", h, self.constant("NVML_CLOCK_SM"))
        mem = self.query("nvmlDeviceGetClockInfo", h, self.constant("NVML_CLOCK_MEM"))
        temp = self.query("nvmlDeviceGetTemperature", h, self.constant("NVML_TEMPERATURE_GPU"))
        energy = self.query("nvmlDeviceGetTotalEnergyConsumption", h)
        return {
            "uuid": None if uuid is None else text(uuid), "power_w": None if power is None else power / 1000.0,
            "energy_mj": None if energy is None else float(energy),
            "sm_clock_mhz": None if sm is None else float(sm), "mem_clock_mhz": None if mem is None else float(mem),
            "temperature_c": None if temp is None else float(temp),
            "utilization_pct": None if util is None else float(util.gpu), "clock_event_mask": reasons,
        }

    def topology(self) -> TopoMatrix:
        """The link matrix as ``nvidia-smi topo -m`` prints it (see the module docstring)."""
        from pcs_ray.cluster.topology import TopoMatrix  # here, not above: telemetry in every run reads NVML without networkx

        n, handles = self.count, self.handles
        bus = {}
        for i, h in enumerate(handles):
            pci = self.query("nvmlDeviceGetPciInfo", h)
            if pci is not None:
                bus[text(pci.busId).lower()] = i
        nvlinks = [[0] * n for _ in range(n)]
        switched = [0] * n  # per GPU: its active NVLinks that end at an NVSwitch
        enabled = self.constant("NVML_FEATURE_ENABLED", 1)
        switch = self.constant("NVML_NVLINK_DEVICE_TYPE_SWITCH", NVLINK_DEVICE_TYPE_SWITCH)
        for i, h in enumerate(handles):
            for link in range(self.constant("NVML_NVLINK_MAX_LINKS", 18)):
                state = self.query("nvmlDeviceGetNvLinkState", h, link)
                if state is None:
                    break  # no (more) NVLinks on this GPU
                if state != enabled:
                    continue
                remote = self.query("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                j = bus.get(text(remote.busId).lower()) if remote is not None else None
                if j is not None:
                    if j != i:
                        nvlinks[i][j] += 1
                elif self.query("nvmlDeviceGetNvLinkRemoteDeviceType", h, link) == switch:
                    switched[i] += 1
        links = [["X"] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                k = min(nvlinks[i][j], nvlinks[j][i]) or max(nvlinks[i][j], nvlinks[j][i])
                if not k and switched[i] and switched[j] and self._nvlink_peers(i, j):
                    k = min(switched[i], switched[j])
                if k:
                    code = f"NV{k}"
                else:
                    level = self.query("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                    code = PCIE_LEVEL.get(level, "SYS")
                links[i][j] = links[j][i] = code
        return TopoMatrix([f"GPU{i}" for i in range(n)], links)

    def _nvlink_peers(self, i: int, j: int) -> bool:
        """Whether GPUs ``i`` and ``j`` reach each other over NVLink; True where the driver does not say."""
        status = self.query("nvmlDeviceGetP2PStatus", self.handles[i], self.handles[j],
                            self.constant("NVML_P2P_CAPS_INDEX_NVLINK", P2P_CAPS_INDEX_NVLINK))
        return status is None or status == self.constant("NVML_P2P_STATUS_OK", P2P_STATUS_OK)


__all__ = ["NVMLDevices", "NVMLUnavailable", "PCIE_LEVEL", "load_pynvml", "text"]
