"""NVML, the way nvidia-smi sees the GPUs: one process-wide session and per-device reads.

No NVML (the ``pynvml`` module or ``libnvidia-ml.so`` missing, or ``nvmlInit`` failing:
no driver, container without GPUs) means "this node has no GPUs", never an error; it is
logged once per process. Every read after init is per field: an ``NVMLError`` for one
field (not supported on this board, GPU fell off the bus, ...) makes that field ``None``.
Identity (handle, uuid, name, total memory) is read once when the session opens.

``pynvml`` is imported when a session first opens, and only once ``libnvidia-ml.so.1`` loads
(the library its ``nvmlInit`` loads first on Linux): a box without NVIDIA's driver never
imports it, which kept ~1.7 MiB of the daemon's idle RSS (issue 23).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Callable

from floydd import log
from floydd.node._info import GpuInfo

__all__ = ["session", "Device", "open_devices", "read_device", "tree_gpu_usage"]

LIBRARY = "libnvidia-ml.so.1"
pynvml: Any = None
"""The ``pynvml`` module once a session has loaded it (:func:`_load`); None before."""


class _Session:
    """``nvmlInit``/``nvmlShutdown`` are reference counted by NVML; so are users here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._reported = False

    def acquire(self) -> bool:
        """Init NVML for one more user; False (logged once per process) if there is none."""
        with self._lock:
            missing = _load()
            if missing:
                self._report(missing)
                return False
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                self._report(str(exc) or type(exc).__name__)
                return False
            self._users += 1
            return True

    def release(self) -> None:
        with self._lock:
            if self._users:
                self._users -= 1
                try:
                    pynvml.nvmlShutdown()
                except pynvml.NVMLError as exc:
                    log.node.debug("nvmlShutdown failed: %s", exc)

    def _report(self, why: str) -> None:
        level = log.node.debug if self._reported else log.node.info
        level("NVML not available (%s): this node reports no GPUs", why)
        self._reported = True


session = _Session()


@dataclass(frozen=True, slots=True)
class Device:
    index: int
    handle: Any
    uuid: str
    name: str
    memory_total: int


def open_devices() -> list[Device]:
    """The GPUs NVML lists, with their identity; call inside an acquired session."""
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        log.node.warning("NVML could not count GPUs (%s): this node reports none", exc)
        return []
    devices = []
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            log.node.warning("GPU %d is not usable (%s); leaving it out", index, exc)
            continue
        memory = _field(pynvml.nvmlDeviceGetMemoryInfo, handle)
        devices.append(Device(index=index, handle=handle,
                              uuid=_text(_field(pynvml.nvmlDeviceGetUUID, handle)) or "",
                              name=_text(_field(pynvml.nvmlDeviceGetName, handle)) or "unknown NVIDIA GPU",
                              memory_total=int(memory.total) if memory is not None else 0))
    return devices


def read_device(device: Device) -> GpuInfo:
    """One GPU's current figures."""
    handle = device.handle
    memory = _field(pynvml.nvmlDeviceGetMemoryInfo, handle)
    rates = _field(pynvml.nvmlDeviceGetUtilizationRates, handle)
    temperature = _field(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    power_mw = _field(pynvml.nvmlDeviceGetPowerUsage, handle)
    return GpuInfo(index=device.index, uuid=device.uuid, name=device.name,
                   memory_total=int(memory.total) if memory is not None else device.memory_total,
                   memory_used=int(memory.used) if memory is not None else 0,
                   utilization=int(rates.gpu) if rates is not None else None,
                   temperature=int(temperature) if temperature is not None else None,
                   power_w=power_mw / 1000.0 if power_mw is not None else None)


def tree_gpu_usage(devices: list[Device], pids: set[int]) -> tuple[int | None, float | None]:
    """``(memory bytes, utilization %)`` of the processes ``pids`` over all GPUs.

    Memory is the sum NVML accounts to those pids (compute processes). Utilization is the
    mean device utilization of the GPUs they use: jobs own whole GPUs (CUDA_VISIBLE_DEVICES),
    so the device figure is the job's; ``None`` if they use none or it cannot be read.
    NVML reports host pids: inside a container with its own pid namespace nothing matches.
    """
    memory, rates, listed = 0, [], False
    for device in devices:
        procs = _running_processes(device.handle)
        if procs is None:
            continue
        listed = True
        used = [p for p in procs if p.pid in pids]
        if not used:
            continue
        memory += sum(int(p.usedGpuMemory or 0) for p in used)
        rate = _field(pynvml.nvmlDeviceGetUtilizationRates, device.handle)
        if rate is not None:
            rates.append(int(rate.gpu))
    if devices and not listed:
        return None, None  # NVML could not list processes on any GPU: unknown, not zero
    return memory, (sum(rates) / len(rates) if rates else None)


def _running_processes(handle: Any) -> list | None:
    try:
        return pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except pynvml.NVMLError_FunctionNotFound:  # a driver older than the v3 call
        return _field(pynvml.nvmlDeviceGetComputeRunningProcesses_v2, handle)
    except pynvml.NVMLError as exc:
        log.node.debug("NVML could not list GPU processes: %s", exc)
        return None


def _load() -> str | None:
    """Import ``pynvml`` once NVIDIA's library loads; why not, if it cannot (None: loaded)."""
    global pynvml
    if pynvml is not None:
        return None
    try:
        ctypes.CDLL(LIBRARY)
    except OSError as exc:
        return f"NVML Shared Library Not Found: {exc}"
    try:
        import pynvml as module
    except ImportError:  # nvidia-ml-py is a dependency, but a broken install must not stop a CPU node
        return "the pynvml module (nvidia-ml-py) is not installed"
    pynvml = module
    return None


def _field(read: Callable[..., Any], *args: Any) -> Any:
    try:
        return read(*args)
    except pynvml.NVMLError as exc:
        log.node.debug("NVML %s failed: %s", getattr(read, "__name__", read), exc)
        return None


def _text(value: Any) -> str | None:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
