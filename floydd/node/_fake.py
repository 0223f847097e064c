"""Fake GPUs for development and tests, only ever used when configured explicitly.

The daemon maps ``FLOYDD_DEV_FAKE_GPUS`` / ``--dev-fake-gpus`` here. Spec grammar::

    "2"                       two default fakes (FAKE GPU-16GB)
    "4xA100-80GB"             COUNT x MODEL-MEMGB
    "2xH100-80GB,1xT4-16GB"   items in index order, separated by commas
    "0"                       explicitly none (a GPU box that pretends to have no GPU)
"""

from __future__ import annotations

import re

from floydd.errors import InvalidSpec
from floydd.node._info import GpuInfo

__all__ = ["parse_fake_gpus", "MAX_FAKE_GPUS"]

MAX_FAKE_GPUS = 64
_DEFAULT_MODEL = ("GPU", 16)
_GIB = 1024 ** 3
_ITEM = re.compile(r"^(?:(\d+)\s*[xX]\s*)?([A-Za-z0-9][A-Za-z0-9_.-]*?)-(\d+)\s*GB$", re.IGNORECASE)
_HINT = ('give a count ("2") or COUNTxMODEL-MEMGB items separated by commas, '
         'e.g. "4xA100-80GB" or "2xH100-80GB,1xT4-16GB"')


def parse_fake_gpus(spec: str) -> tuple[GpuInfo, ...]:
    """Parse a fake-GPU spec into deterministic ``GpuInfo`` (``fake=True``); ``InvalidSpec`` if bad."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidSpec(f"fake GPU spec {spec!r} is empty", hint=_HINT)
    text = spec.strip()
    if text.isdigit():
        models = [_DEFAULT_MODEL] * _count(spec, int(text), allow_zero=True)
    else:
        models = []
        for item in text.split(","):
            match = _ITEM.match(item.strip())
            if not match:
                raise InvalidSpec(f"fake GPU spec {spec!r}: {item.strip()!r} is not COUNTxMODEL-MEMGB", hint=_HINT)
            count = _count(spec, int(match[1] or 1), allow_zero=False)
            gib = int(match[3])
            if gib < 1:
                raise InvalidSpec(f"fake GPU spec {spec!r}: {item.strip()!r} has no memory", hint=_HINT)
            models += [(match[2], gib)] * count
    if len(models) > MAX_FAKE_GPUS:
        raise InvalidSpec(f"fake GPU spec {spec!r} asks for {len(models)} GPUs",
                          hint=f"at most {MAX_FAKE_GPUS} fake GPUs per node")
    return tuple(GpuInfo(index=i, uuid=f"GPU-fake-{i}", name=f"FAKE {model}-{gib}GB",
                         memory_total=gib * _GIB, memory_used=0, utilization=0, temperature=None,
                         power_w=None, fake=True)
                 for i, (model, gib) in enumerate(models))


def _count(spec: str, count: int, *, allow_zero: bool) -> int:
    if count > MAX_FAKE_GPUS or (count == 0 and not allow_zero):
        raise InvalidSpec(f"fake GPU spec {spec!r}: a count of {count} makes no sense",
                          hint=f"counts run 1-{MAX_FAKE_GPUS} (a lone \"0\" means no GPUs)")
    return count
