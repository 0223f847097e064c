"""This machine's inventory (CPUs, memory, disk, GPUs via NVML) and per-job telemetry.

Fake GPUs exist for development and tests only, and only when configured explicitly
(``FLOYDD_DEV_FAKE_GPUS`` / ``--dev-fake-gpus``); a node without NVML has no GPUs.
"""

from floydd.node._fake import parse_fake_gpus
from floydd.node._info import GpuInfo, NodeInfo
from floydd.node._inventory import Inventory
from floydd.node._process import forget_process_tree, job_processes, sample_process_tree

__all__ = ["GpuInfo", "NodeInfo", "Inventory", "parse_fake_gpus", "sample_process_tree",
           "forget_process_tree", "job_processes"]
