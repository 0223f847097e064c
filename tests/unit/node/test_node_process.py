"""Per-job process-tree sampling against real child processes."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import psutil
import pynvml
import pytest

from floydd.node import _nvml, _process, forget_process_tree, sample_process_tree
from tests.conftest import wait_until

BUSY = "while True: pass"
# a parent that only waits, and a busy grandchild: the CPU must come from the tree
PARENT_OF_BUSY = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BUSY!r}])"


@pytest.fixture
def spawn():
    procs: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code])
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        for child in psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []:
            child.kill()
        proc.kill()
        proc.wait()


@pytest.fixture(autouse=True)
def no_gpu_sampler(monkeypatch):
    """The sampler's NVML view, fresh per test, without a driver (as on CI)."""
    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    monkeypatch.setattr(_nvml, "pynvml", pynvml)     # as if libnvidia-ml loaded: its calls are faked here
    monkeypatch.setattr(_nvml, "session", _nvml._Session())
    monkeypatch.setattr(_process, "_gpu", _process._Gpu())


def test_busy_child_uses_cpu_and_memory_then_is_gone(spawn):
    proc = spawn(BUSY)
    sample = wait_until(lambda: (s := sample_process_tree(proc.pid)) and s["cpu_percent"] > 0 and s,
                        what="CPU use of a busy child")
    assert sample["rss_bytes"] > 1 << 20
    assert sample["cpu_percent"] <= 100.0 * psutil.cpu_count() + 5
    assert (sample["gpu_util"], sample["gpu_mem_bytes"]) == (None, None)  # no NVML here
    assert set(sample) == {"ts", "cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes"}
    proc.kill()
    proc.wait()
    assert sample_process_tree(proc.pid) is None
    assert proc.pid not in _process._trees


def test_cpu_of_grandchildren_counts(spawn):
    proc = spawn(PARENT_OF_BUSY)
    wait_until(lambda: psutil.Process(proc.pid).children(), what="the grandchild to start")
    # the parent itself sleeps in wait(); only the grandchild burns CPU
    wait_until(lambda: (s := sample_process_tree(proc.pid)) and s["cpu_percent"] > 20,
               what="the grandchild's CPU in the tree's figure")


def test_zombie_or_unknown_pid_is_gone(spawn):
    proc = spawn("pass")
    wait_until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, what="exit (not reaped yet)")
    assert sample_process_tree(proc.pid) is None
    proc.wait()
    assert sample_process_tree(proc.pid) is None
    assert sample_process_tree(2 ** 22 + 1) is None  # above Linux's pid_max


def test_forget_drops_the_cache(spawn):
    proc = spawn(BUSY)
    assert sample_process_tree(proc.pid) is not None
    assert proc.pid in _process._trees
    forget_process_tree(proc.pid)
    assert proc.pid not in _process._trees


def test_gpu_memory_and_utilization_of_the_tree(monkeypatch, spawn):
    proc = spawn(BUSY)
    devices = [_nvml.Device(index=i, handle=i, uuid=f"GPU-{i}", name="H100", memory_total=80 << 30)
               for i in range(3)]
    running = {0: [SimpleNamespace(pid=proc.pid, usedGpuMemory=3 << 30), SimpleNamespace(pid=1, usedGpuMemory=9 << 30)],
               1: [SimpleNamespace(pid=proc.pid, usedGpuMemory=None)],
               2: [SimpleNamespace(pid=1, usedGpuMemory=1 << 30)]}
    monkeypatch.setattr(_process._gpu, "devices", lambda: devices)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: running[h])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=[90, 50, 7][h]))
    sample = sample_process_tree(proc.pid)
    assert (sample["gpu_mem_bytes"], sample["gpu_util"]) == (3 << 30, 70.0)  # boards 0 and 1 only

    running[0], running[1] = [], []  # no GPU process (yet): memory 0, no utilization of its own
    sample = sample_process_tree(proc.pid)
    assert (sample["gpu_mem_bytes"], sample["gpu_util"]) == (0, None)


def test_gpu_process_listing_falls_back_to_v2_and_unknown_is_not_zero(monkeypatch, spawn):
    proc = spawn(BUSY)
    devices = [_nvml.Device(index=0, handle=0, uuid="GPU-0", name="old board", memory_total=16 << 30)]
    monkeypatch.setattr(_process._gpu, "devices", lambda: devices)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", lambda h: SimpleNamespace(gpu=40))

    def v3_missing(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", v3_missing)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses_v2",
                        lambda h: [SimpleNamespace(pid=proc.pid, usedGpuMemory=2 << 30)])
    sample = sample_process_tree(proc.pid)
    assert (sample["gpu_mem_bytes"], sample["gpu_util"]) == (2 << 30, 40.0)

    def no_permission(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", no_permission)
    sample = sample_process_tree(proc.pid)
    assert (sample["gpu_mem_bytes"], sample["gpu_util"]) == (None, None)
