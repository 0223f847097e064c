"""Copies of the replicated state's data: every read of
:class:`~floydd.cluster.state.machine.ClusterState` (``job``, ``list_jobs``, ``query``, ...) and
every command's answer hands out a deep copy, so a caller can never change the state by
changing what it was given. Pure, like the rest of the state.
"""

from __future__ import annotations

from typing import Any

import msgpack

__all__ = ["copy_of"]


def copy_of(value: Any) -> Any:
    """A deep copy of plain data (dicts, lists, scalars): callers never hold the state's own."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)
