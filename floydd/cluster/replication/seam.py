"""What the copy keepers use of the cluster service that holds this box's raft, and of this
box's store watch.

:class:`~floydd.cluster.replication.keeper.CopyKeeper` and its kinds
(:class:`~floydd.cluster.replication.versioncopies.VersionCopies` for
:class:`~floydd.cluster.replication.datasets.ClusterDatasets`,
:class:`~floydd.cluster.replication.codecopies.CodeKind` for
:class:`~floydd.cluster.replication.codecopies.CodeCopies`) and the store's
:class:`~floydd.cluster.replication.storecare.StoreCare` are given the replicated state apart
(they read it as it is applied); of the service itself they use only :class:`Cluster`: who
they are, whether they lead, the entries as they are applied, how long ago each box was heard
from, the commands that say who holds what, and ``fetch`` (the service is the
:class:`~floydd.cluster.replication.peerstore.Fetcher` copies come through). Of the store
watch (:class:`floydd.runtime.disk.StoreWatch`, a sibling layer) they use :class:`StoreWatch`.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from floydd.cluster.config import ClusterConfig
from floydd.cluster.driver.applied import Applied

__all__ = ["Cluster", "StoreWatch"]


class Cluster(Protocol):
    node_id: str
    config: ClusterConfig

    @property
    def is_leader(self) -> bool: ...

    @property
    def alone(self) -> bool:
        """This box leads a cluster of itself only (its loops may look rarely)."""

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """``callback(Applied)`` for every entry applied on this node, in log order."""

    def heard_ages(self) -> dict[str, float]:
        """Node id -> seconds since this box last heard from it, on its monotonic clock."""

    def beat_soon(self) -> None:
        """Send a heartbeat now (this box's store changed how it takes copies)."""

    async def read_index(self, *, timeout: float | None = None) -> int:
        """Wait until this node has applied every write committed before the call."""

    async def datasets(self, *, stale: bool = False, name: str | None = None) -> list[dict]: ...

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


class StoreWatch(Protocol):
    """Whether this box's store takes new data (:class:`floydd.runtime.disk.StoreWatch`)."""

    def poll(self) -> bool:
        """Blocking (statvfs): look at the disks; whether what the heartbeat says changed."""

    def report(self) -> dict:
        """What a heartbeat says of the store (``why``: "" when it takes new data)."""

    def failed(self, exc: BaseException) -> bool:
        """A store write failed with ``exc``: whether it was for lack of space or a failing disk."""

    def succeeded(self) -> None:
        """A store write worked."""
