"""System metrics of one job: its process tree's CPU, memory and GPU use.

``cpu_percent`` is the CPU time the whole tree used since the previous sample of the same
root pid (or since the root started, on the first one), over the wall time between them:
100 = one core busy. A process is known by (pid, create time), so a reused pid is a new
process. CPU of a process that started *and* ended between two samples is not seen.
``rss_bytes`` sums resident memory over the tree (pages shared between them count twice).

:func:`job_processes` finds every live process of one box's job runs by what the runtime put
in their environment (``FLOYD_BOX``, ``FLOYD_JOB``, ``FLOYD_ATTEMPT``; the GPUs from
``CUDA_VISIBLE_DEVICES``), whatever became of the agent that started them: it reads
``/proc/PID/environ`` (the environment a process was started with, which it inherits from
its parent), so a worker that left the job's process group or session is found too.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import psutil

from floydd.node import _nvml

__all__ = ["sample_process_tree", "forget_process_tree", "job_processes"]

_MIN_WINDOW = 0.01  # s; create_time and CPU times tick at 10 ms on Linux


@dataclass
class _Tree:
    root: psutil.Process
    since: float                                                           # wall time of the last sample
    cpu: dict[tuple[int, float], float] = field(default_factory=dict)      # (pid, created) -> cpu seconds


class _Gpu:
    """NVML for the sampler: opened on first use, then kept for the life of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tried = False
        self._devices: list[_nvml.Device] | None = None

    def devices(self) -> list[_nvml.Device] | None:
        """The GPUs, or None when there is no NVML."""
        with self._lock:
            if not self._tried:
                self._tried = True
                self._devices = _nvml.open_devices() if _nvml.session.acquire() else None
            return self._devices


_gpu = _Gpu()
_trees: dict[int, _Tree] = {}
_lock = threading.Lock()


def sample_process_tree(pid: int) -> dict | None:
    """``{"ts", "cpu_percent", "rss_bytes", "gpu_util", "gpu_mem_bytes"}`` for ``pid`` and all
    its descendants, or ``None`` once ``pid`` is gone (exited, zombie, or the pid reused).

    GPU fields are ``None`` without NVML; with it, ``gpu_mem_bytes`` is what NVML accounts to
    the tree and ``gpu_util`` the utilization of the GPUs it uses (``None`` if it uses none).
    """
    with _lock:
        now = time.time()
        tree = _trees.get(pid)
        try:
            if tree is None:
                root = psutil.Process(pid)
                tree = _Tree(root=root, since=root.create_time())
            if not tree.root.is_running() or tree.root.status() == psutil.STATUS_ZOMBIE:
                raise psutil.NoSuchProcess(pid)
            procs = [tree.root, *tree.root.children(recursive=True)]
        except psutil.NoSuchProcess:  # includes ZombieProcess
            _trees.pop(pid, None)
            return None
        cpu_used, rss, seen = 0.0, 0, {}
        for proc in procs:
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    rss += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # ended meanwhile, or not ours to read
            seen[key] = times.user + times.system
            cpu_used += max(0.0, seen[key] - tree.cpu.get(key, 0.0))
        window = max(now - tree.since, _MIN_WINDOW)
        tree.cpu, tree.since = seen, now
        _trees[pid] = tree
    gpu_mem, gpu_util = _gpu_usage({p.pid for p in procs})
    return {"ts": now, "cpu_percent": round(100.0 * cpu_used / window, 1), "rss_bytes": rss,
            "gpu_util": gpu_util, "gpu_mem_bytes": gpu_mem}


def forget_process_tree(pid: int) -> None:
    """Drop what is cached for ``pid`` (the runtime calls it when a job ends)."""
    with _lock:
        _trees.pop(pid, None)


def _gpu_usage(pids: set[int]) -> tuple[int | None, float | None]:
    devices = _gpu.devices()
    if devices is None:
        return None, None
    return _nvml.tree_gpu_usage(devices, pids)


def job_processes(box: str) -> dict[tuple[str, int], dict]:
    """``(job, attempt) -> {"gpus": set of GPU indices, "pids": [pid, ...]}`` for every live
    (not zombie) process whose environment says it belongs to a run of box ``box``. Blocking
    (a read of ``/proc/*/environ``, a few ms for a few hundred processes): call it in a thread."""
    needle = b"\0FLOYD_BOX=" + box.encode() + b"\0"
    runs: dict[tuple[str, int], dict] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = b"\0" + f.read() + b"\0"
            if needle not in environ or _zombie(name):
                continue
        except OSError:             # gone meanwhile, or not ours to read
            continue
        env = dict(item.partition(b"=")[::2] for item in environ.split(b"\0") if item)
        job, attempt = env.get(b"FLOYD_JOB", b"").decode(errors="replace"), env.get(b"FLOYD_ATTEMPT", b"")
        if not job or not attempt.isdigit():
            continue
        run = runs.setdefault((job, int(attempt)), {"gpus": set(), "pids": []})
        run["pids"].append(int(name))
        run["gpus"].update(int(g) for g in env.get(b"CUDA_VISIBLE_DEVICES", b"").split(b",") if g.strip().isdigit())
    return runs


def _zombie(pid: str) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rfind(b")") + 2:][:1] in (b"Z", b"X")
