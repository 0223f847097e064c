"""The inventory of this machine: CPUs, memory, disk of the state dir, GPUs.

:meth:`Inventory.sample` blocks (``/proc`` reads, ``statvfs``, a few NVML calls per GPU;
well under a millisecond per GPU): the daemon runs it in a worker thread at its own pace.
Nothing here runs by itself, so an idle daemon costs nothing between samples.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Any

import psutil

from floydd import log
from floydd.node import _nvml
from floydd.node._fake import parse_fake_gpus
from floydd.node._info import GpuInfo, NodeInfo

__all__ = ["Inventory"]


class Inventory:
    """Samples this machine. GPUs come from NVML, or from ``fake_gpus`` when (and only when)
    that dev/test option is given; without NVML the node simply has no GPUs."""

    def __init__(self, *, disk_path: Path, fake_gpus: str | None = None) -> None:
        self.disk_path = Path(disk_path)
        self._lock = threading.Lock()
        self._hostname = socket.gethostname()
        self._nvml = False
        self._devices: list[_nvml.Device] = []
        self._fake: tuple[GpuInfo, ...] | None = None
        if fake_gpus is not None and fake_gpus.strip():
            self._fake = parse_fake_gpus(fake_gpus)
            self.gpu_source = "fake"
            log.node.warning("DEV OPTION: this node reports %d FAKE GPUs (%s) instead of asking NVML",
                             len(self._fake), fake_gpus)
        elif _nvml.session.acquire():
            self._nvml = True
            self._devices = _nvml.open_devices()
            self.gpu_source = "nvml"
            log.node.info("NVML sees %d GPU(s)%s", len(self._devices),
                          "".join(f"; {d.index}: {d.name}" for d in self._devices))
        else:
            self.gpu_source = "none"
        self._last_cpu = psutil.cpu_times()

    def sample(self) -> NodeInfo:
        """One reading of the machine (blocking)."""
        with self._lock:
            cpu_percent = self._cpu_percent()
            if self._fake is not None:
                gpus = self._fake
            else:
                gpus = tuple(_nvml.read_device(d) for d in self._devices) if self._nvml else ()
        memory = psutil.virtual_memory()
        disk = psutil.disk_usage(str(_existing(self.disk_path)))
        return NodeInfo(hostname=self._hostname, cpus=_usable_cpus(), cpu_percent=cpu_percent,
                        memory_total=memory.total, memory_available=memory.available,
                        disk_path=str(self.disk_path), disk_total=disk.total, disk_free=disk.free,
                        gpus=gpus, gpu_source=self.gpu_source)

    def close(self) -> None:
        """Release NVML (``nvmlShutdown``) if this inventory initialised it; idempotent."""
        with self._lock:
            if self._nvml:
                self._nvml = False
                self._devices = []
                _nvml.session.release()

    def __enter__(self) -> Inventory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _cpu_percent(self) -> float:
        # Our own window (psutil.cpu_percent() keeps one global window for the whole process).
        now = psutil.cpu_times()
        last, self._last_cpu = self._last_cpu, now
        total = _total(now) - _total(last)
        busy = total - (_idle(now) - _idle(last))
        return round(max(0.0, min(100.0, 100.0 * busy / total)), 1) if total > 0 else 0.0


def _total(times: Any) -> float:
    # guest time is already counted in user/nice on Linux
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _idle(times: Any) -> float:
    return times.idle + getattr(times, "iowait", 0.0)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return psutil.cpu_count(logical=True) or 1


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (the state dir may not exist yet)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
