"""What a node reports about itself: frozen value objects, JSON-ready via ``to_dict``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["GpuInfo", "NodeInfo"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuInfo:
    """One GPU as NVML (or the dev fake) reports it; ``None`` = NVML could not say."""

    index: int               # NVML index = CUDA index under CUDA_DEVICE_ORDER=PCI_BUS_ID
    uuid: str                # "GPU-…"; "" if NVML could not read it
    name: str                # e.g. "NVIDIA H100 80GB HBM3"; fakes say "FAKE …"
    memory_total: int        # bytes
    memory_used: int         # bytes
    utilization: int | None  # percent of time a kernel ran over the last sample period
    temperature: int | None  # °C
    power_w: float | None    # watts
    fake: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    """One inventory sample of this machine."""

    hostname: str
    cpus: int                # CPUs this process may run on
    cpu_percent: float       # whole machine, since the previous sample (or the inventory's start)
    memory_total: int        # bytes
    memory_available: int    # bytes
    disk_path: str           # the state dir whose filesystem is measured
    disk_total: int          # bytes
    disk_free: int           # bytes available to unprivileged users
    gpus: tuple[GpuInfo, ...]
    gpu_source: str          # "nvml", "fake" (dev/test option) or "none"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (``gpus`` as a list of dicts)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["gpus"] = [dataclasses.asdict(gpu) for gpu in self.gpus]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeInfo:
        """The inverse of :meth:`to_dict` (what a client rebuilds from the API)."""
        return cls(**{**data, "gpus": tuple(GpuInfo(**gpu) for gpu in data["gpus"])})
