"""Autopilot: which membership change the leader should make next (Consul/Nomad style).

Pure decisions over a view of the membership and a clock reading passed in; the leader's
driver builds the :class:`View` from its raft status and when it last heard from each peer,
calls :func:`decide` every so often and carries out the :class:`Action` (one at a time,
since raft applies one membership change at a time). Rules, first match wins:

1. **Remove a dead voter**: one not heard from for ``grace`` seconds (counted from when
   this leader took over if it never heard from it), but only if the voters still in
   contact are a quorum of the voters both before and after the removal. A crashed box
   thus leaves the quorum arithmetic without ever costing the cluster its quorum.
2. **Demote** a voter past ``max_voters`` (the most lagging one; raft has no demotion,
   the driver removes it and adds it back as a learner).
3. **Promote** a learner while there are fewer voters than ``target_voters``: at most
   ``max_voters``, at most the members in contact, an odd count preferred (a 4th voter
   adds no fault tolerance, only latency). A candidate is in contact, has been for
   ``stabilize`` seconds, and holds the whole committed log.
4. **Remove a dead learner** after ``grace`` (it is added back when it returns).

A node that shuts down cleanly removes itself first (the driver's
``transfer_leadership_and_leave``); autopilot only repairs what crashes left behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

__all__ = ["AutopilotConfig", "Member", "View", "Action", "decide", "target_voters"]

NodeId = Union[int, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class AutopilotConfig:
    max_voters: int = 5
    """Never more voters than this; the other nodes are learners."""

    grace: float = 30.0
    """Seconds a voter may be unreachable before it is removed (if quorum allows). Long
    enough to ride out a reboot; short enough that a dead box does not hold a quorum seat
    for long."""

    stabilize: float = 2.0
    """Seconds a learner must have been in unbroken contact before it is promoted."""

    contact_timeout: float = 2.0
    """A peer heard from within this many seconds is in contact (alive)."""

    prefer_odd: bool = True
    """Aim for an odd number of voters (3 rather than 4, 1 rather than 2)."""

    def __post_init__(self) -> None:
        if self.max_voters < 1 or self.grace <= 0 or self.contact_timeout <= 0 or self.stabilize < 0:
            raise ValueError("autopilot: max_voters >= 1, grace > 0, contact_timeout > 0, stabilize >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    id: NodeId
    voter: bool
    match: int = 0
    """Last log index the leader knows this member holds."""
    last_contact: float | None = None
    """Clock reading when the leader last heard from it; None: not since it took over."""
    contact_since: float | None = None
    """Start of the current unbroken stretch of contact; None: not in contact."""


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    leader: NodeId
    now: float
    leader_since: float
    commit: int
    members: tuple[Member, ...]
    """Every voter and learner, the leader included."""


@dataclass(frozen=True, slots=True)
class Action:
    op: Literal["promote", "remove", "demote"]
    node: NodeId
    reason: str


def target_voters(in_contact: int, max_voters: int, prefer_odd: bool = True) -> int:
    """How many voters to aim for with ``in_contact`` live members."""
    n = max(1, min(max_voters, in_contact))
    return n - 1 if prefer_odd and n % 2 == 0 else n


def decide(view: View, config: AutopilotConfig = AutopilotConfig()) -> Action | None:
    """The next membership change, or None when the membership is as it should be."""
    now = view.now

    def alive(m: Member) -> bool:
        return m.id == view.leader or (m.last_contact is not None
                                       and now - m.last_contact <= config.contact_timeout)

    def silent_for(m: Member) -> float:
        heard = view.leader_since if m.last_contact is None else max(m.last_contact, view.leader_since)
        return now - heard

    voters = [m for m in view.members if m.voter]
    learners = [m for m in view.members if not m.voter]
    alive_voters = [m for m in voters if alive(m)]

    dead = sorted((m for m in voters if not alive(m) and silent_for(m) >= config.grace),
                  key=lambda m: (-silent_for(m), str(m.id)))
    if dead and len(voters) > 1:
        if len(alive_voters) >= _quorum(len(voters)) and len(alive_voters) >= _quorum(len(voters) - 1):
            m = dead[0]
            return Action("remove", m.id, f"voter unreachable for {silent_for(m):.0f}s "
                                          f"(grace {config.grace:.0f}s); {len(alive_voters)} of "
                                          f"{len(voters)} voters remain in contact")

    if len(voters) > config.max_voters:
        spare = sorted((m for m in voters if m.id != view.leader), key=lambda m: (alive(m), m.match, str(m.id)))
        return Action("demote", spare[0].id, f"{len(voters)} voters, at most {config.max_voters} wanted")

    in_contact = len(alive_voters) + sum(1 for m in learners if alive(m))
    target = target_voters(in_contact, config.max_voters, config.prefer_odd)
    if len(voters) < target:
        ready = sorted((m for m in learners if alive(m) and m.contact_since is not None
                        and now - m.contact_since >= config.stabilize and m.match >= view.commit),
                       key=lambda m: (-m.match, str(m.id)))
        if ready:
            return Action("promote", ready[0].id, f"{len(voters)} voters, {target} wanted with "
                                                  f"{in_contact} members in contact")

    for m in sorted(learners, key=lambda m: str(m.id)):
        if not alive(m) and silent_for(m) >= config.grace:
            return Action("remove", m.id, f"learner unreachable for {silent_for(m):.0f}s")
    return None


def _quorum(voters: int) -> int:
    return voters // 2 + 1
