"""What the raft driver's parts use of the loop that holds them.

:class:`~floydd.cluster.driver.loop.RaftDriver` owns the raft core and the one task that
steps it; its parts (:class:`~floydd.cluster.driver.proposals.Proposals`,
:class:`~floydd.cluster.driver.reads.Reads`, :class:`~floydd.cluster.driver.membership.Membership`,
:class:`~floydd.cluster.driver.snapshots.Snapshots`) reach the core only through this: queue a
closure for the loop, look at the node, check that the loop runs, wait for a new leader.
"""

from __future__ import annotations

from typing import Callable, Protocol

from floydd.cluster.config import ClusterConfig
from floydd.cluster.raft import RaftNode
from floydd.errors import Unavailable

__all__ = ["Loop"]


class Loop(Protocol):
    node_id: str
    config: ClusterConfig

    @property
    def node(self) -> RaftNode | None:
        """The raft core; touch it only inside a closure given to :meth:`submit`, or to read."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_id(self) -> str | None: ...

    @property
    def alone(self) -> bool:
        """This node leads a configuration of itself only (nothing to time, see the driver)."""

    async def until_company(self) -> None:
        """Return once this node is not :attr:`alone` (at once if it is not)."""

    def submit(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` in the loop's task, the only one that steps the core."""

    def check_running(self) -> None:
        """Raise unless the loop runs (:class:`Unavailable`, or InternalError once it failed)."""

    def require_leader(self) -> None:
        """:meth:`check_running`, and raise ProposalDropped unless this node leads."""

    async def leader_change(self, timeout: float) -> None:
        """Return at the next change of leader, or after ``timeout``."""

    def leader_unreachable(self) -> Unavailable | None:
        """The refusal for a write while this box is cut off from the leader, or None."""
