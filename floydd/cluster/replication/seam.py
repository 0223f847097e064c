"""What the copy keepers use of the cluster service that holds this box's raft.

:class:`~floydd.cluster.replication.datasets.ClusterDatasets` (with its parts
:class:`~floydd.cluster.replication.following.Follower`,
:class:`~floydd.cluster.replication.trimming.Trimmer` and the store's
:class:`~floydd.cluster.replication.storecare.StoreCare`) and
:class:`~floydd.cluster.replication.codecopies.CodeCopies` are given the replicated state apart (they read it as it is applied); of the service itself
they use only this: who they are, whether they lead, the entries as they are applied, how
long ago each box was heard from, the commands that say who holds what, and ``fetch`` (the
service is the :class:`~floydd.cluster.replication.peerstore.Fetcher` copies come through).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from floydd.cluster.config import ClusterConfig
from floydd.cluster.driver.applied import Applied

__all__ = ["Cluster"]


class Cluster(Protocol):
    node_id: str
    config: ClusterConfig

    @property
    def is_leader(self) -> bool: ...

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """``callback(Applied)`` for every entry applied on this node, in log order."""

    def heard_ages(self) -> dict[str, float]:
        """Node id -> seconds since this box last heard from it, on its monotonic clock."""

    def beat_soon(self) -> None:
        """Send a heartbeat now (this box's store changed how it takes copies)."""

    async def read_index(self, *, timeout: float | None = None) -> int:
        """Wait until this node has applied every write committed before the call."""

    async def datasets(self, *, stale: bool = False) -> list[dict]: ...

    async def add_dataset_version(self, name: str, tree: str, *, idem_key: str | None = None,
                                  timeout: float | None = None, **fields: Any) -> dict: ...

    async def delete_dataset(self, name: str, version: int | None = None, *, user: str = "",
                             timeout: float | None = None) -> None: ...

    async def set_dataset_holder(self, name: str, version: int, *, holds: bool, node: str | None = None,
                                 timeout: float | None = None, failed: str | None = None) -> dict: ...

    async def set_code_holder(self, tree: str, *, holds: bool, node: str | None = None,
                              timeout: float | None = None) -> dict: ...

    async def fetch(self, peer: str, path: str, *, params: dict[str, str] | None = None,
                    timeout: float | None = None) -> tuple[bytes, dict[str, str]]:
        """GET a ``/cluster/v1/...`` route from node ``peer`` over mTLS (store objects)."""
