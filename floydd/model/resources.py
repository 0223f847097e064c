"""What a job asks for on each box (GPUs, cores, memory) and over how many boxes, and the
sizes and counts in it as people write them (``--memory 16G``) and read them (``16 GiB``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from floydd.errors import InvalidSpec

__all__ = ["Resources", "MAX_NODES", "MAX_GPUS", "MAX_CPUS", "MAX_MEMORY", "check_cpus", "parse_size",
           "format_size", "format_cpus", "describe_needs", "asked_per_box", "asked_gpu_count", "asked_nodes",
           "known_count"]

MAX_NODES = 64
"""The most boxes one distributed job may span."""
MAX_GPUS = 1024
"""The most GPUs a job may ask for on each box."""
MAX_CPUS = 4096
"""The most cores a job may ask for on each box."""
MAX_MEMORY = 1 << 50
"""The most memory (bytes, 1 PiB) a job may ask for on each box."""
_SIZE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([kmgtp]?)(i?b?)", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """What a job needs on each box it runs on, and how many boxes.

    ``cpus`` (cores, in steps of 0.001) and ``memory`` (bytes) are what a box sets aside for
    the job while it is active: a box admits jobs while the ones it runs leave it the cores and
    memory asked (admission, not a limit: a job may use more than it asked). 0 asks for none;
    a spec stored before they existed has neither, and asks for none."""

    gpu_count: int = 0
    """GPUs on each box (stored as ``gpus``; the GPUs a placement gives it are ``gpu_ids``)."""
    nodes: int = 1
    cpus: float = 0
    memory: int = 0

    def __post_init__(self) -> None:
        _whole(self.gpu_count, "--gpu", 0)
        if self.gpu_count > MAX_GPUS:
            raise InvalidSpec(f"--gpu {str(self.gpu_count)[:40]} is more than {MAX_GPUS}",
                              hint=f"use at most --gpu {MAX_GPUS}")
        if self.nodes == 0:
            raise InvalidSpec("--nodes 0: a job runs on at least one box", hint="e.g. --nodes 2")
        _whole(self.nodes, "--nodes", 1)
        if self.nodes > MAX_NODES:
            raise InvalidSpec(f"--nodes {str(self.nodes)[:40]} is more than {MAX_NODES}",
                              hint=f"use at most --nodes {MAX_NODES}")
        check_cpus(self.cpus)
        _whole(self.memory, "--memory", 0)
        if self.memory > MAX_MEMORY:
            raise InvalidSpec(f"--memory {format_size(self.memory)} is more than {format_size(MAX_MEMORY)}",
                              hint="ask for the memory of one box, e.g. --memory 16G")

    @property
    def cpu_milli(self) -> int:
        """``cpus`` in thousandths of a core (what placement and the state add up)."""
        return round(self.cpus * 1000)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> Resources:
        raw = raw or {}
        return cls(gpu_count=raw.get("gpus") or 0, nodes=raw.get("nodes") or 1, cpus=raw.get("cpus") or 0,
                   memory=raw.get("memory") or 0)

    def to_dict(self) -> dict[str, Any]:
        """The stored form: ``{"gpus", "cpu"}``, ``"nodes"`` for a job over several boxes, and
        ``"cpus"``/``"memory"`` when asked for."""
        return {"gpus": self.gpu_count, "cpu": self.gpu_count == 0, **({"nodes": self.nodes} if self.nodes > 1 else {}),
                **({"cpus": self.cpus} if self.cpus else {}), **({"memory": self.memory} if self.memory else {})}

    def describe(self) -> str:
        """``2 GPUs, 4 CPUs, 16 GiB`` (per box): what ``floyd run`` and waiting reasons say."""
        return describe_needs(self.gpu_count, self.cpu_milli, self.memory)


def asked_per_box(spec: object) -> tuple[int, int]:
    """(thousandths of a core, bytes of memory) a job's spec asks for on each box: (0, 0) for
    a spec from before they existed, or one whose values are not counts (a job.submit is
    any dict an authorised node sent: the index never trusts it to be well formed)."""
    resources = spec.get("resources") if isinstance(spec, Mapping) else None
    if not isinstance(resources, dict):
        return 0, 0
    cpu, memory = known_count(resources.get("cpus"), 1000), known_count(resources.get("memory"), 1)
    return cpu or 0, memory or 0


def asked_gpu_count(spec: object) -> int | None:
    """GPUs a job's stored spec asks for on each box; None when it says no whole number (read
    as leniently as :func:`asked_per_box`, and by both the placer and the state's check of a
    placement, so they agree on any spec)."""
    resources = spec.get("resources") if isinstance(spec, Mapping) else None
    wanted = resources.get("gpus") if isinstance(resources, dict) else \
        spec.get("gpus") if isinstance(spec, Mapping) else None
    return wanted if type(wanted) is int else None


def asked_nodes(spec: object) -> int:
    """Boxes a job's stored spec spans (1 unless it says a whole number from 1)."""
    resources = spec.get("resources") if isinstance(spec, Mapping) else None
    nodes = resources.get("nodes") if isinstance(resources, dict) else None
    return nodes if type(nodes) is int and nodes >= 1 else 1


def known_count(value: object, scale: int) -> int | None:
    """A non-negative count times ``scale``, as an int; None if ``value`` is no such count."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**53:
        return None
    return round(value * scale)


def check_cpus(value: object) -> float:
    """``--cpu N``: a number of cores ≥ 0 and at most :data:`MAX_CPUS`, in steps of 0.001."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_CPUS \
            or abs(round(value * 1000) - value * 1000) > 1e-6:
        raise InvalidSpec(f"--cpu {value!r:.40} must be a number of cores from 0 to {MAX_CPUS} "
                          "(in steps of 0.001)", hint="e.g. --cpu 4, or --cpu 0.5 for half a core")
    return value


def parse_size(text: object) -> int:
    """``--memory SIZE``: ``16G``, ``512M``, ``1.5GiB``, ``64k`` (powers of 1024, as Slurm and
    Docker read them) or a number of bytes given as an int; a bare number in text is refused
    unless 0 (``--memory 16`` is more likely a typo than 16 bytes)."""
    if isinstance(text, int) and not isinstance(text, bool):
        _whole(text, "--memory", 0)
        return text
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    hint = "write a size with its unit, e.g. --memory 16G or --memory 512M"
    if match is None:
        raise InvalidSpec(f"--memory {text!r:.40} is not a size", hint=hint)
    number, unit, _ = match.groups()
    if not unit and float(number) != 0:
        raise InvalidSpec(f"--memory {text!r:.40} has no unit", hint=hint)
    size = int(float(number) * _UNITS[unit.lower()])
    if size > MAX_MEMORY:
        raise InvalidSpec(f"--memory {text!r:.40} is more than {format_size(MAX_MEMORY)}", hint=hint)
    return size


def format_size(size: int) -> str:
    """Bytes as people read them: ``16 GiB``, ``1.5 GiB``, ``512 MiB``, ``300 B``."""
    for unit, scale in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} B"


def format_cpus(milli: int) -> str:
    """Thousandths of a core as people read them: ``1 CPU``, ``4 CPUs``, ``0.5 CPUs``."""
    text = f"{milli / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{text} CPU" if milli == 1000 else f"{text} CPUs"


def describe_needs(gpu_count: int, cpu_milli: int = 0, memory: int = 0) -> str:
    """``2 GPUs, 4 CPUs and 16 GiB``; only what is asked (``1 GPU``; ``CPU`` when nothing is)."""
    words = ([f"{gpu_count} GPU" if gpu_count == 1 else f"{gpu_count} GPUs"] if gpu_count else []) + \
        ([format_cpus(cpu_milli)] if cpu_milli else []) + ([format_size(memory)] if memory else [])
    if not words:
        return "CPU"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _whole(value: object, flag: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidSpec(f"{flag} {value!r:.80} must be a whole number ≥ {minimum}", hint=f"e.g. {flag} {minimum + 1}")
