"""Is this box cut off from the cluster's leader? Then a write is refused at once, saying so.

A write (a submission, a stop, an upload's catalog entry) needs the leader. A box on the wrong
side of a cut used to wait out the whole proposal timeout and then answer with whatever broke
first ("no healthy node": its copy of the state had gone stale). Now it answers within
seconds: "this box cannot reach the cluster's leader (last heard N s ago)" (issue 21).

Cut off means both, measured on this box's monotonic clock:

- no message from a leader for ``after`` seconds (a few election timeouts), and
- fewer than a majority of the voters (this box counted, if it votes) heard from in that
  time: so no election is going on among boxes it reaches either. A box that hears from a
  majority waits for the leader they elect (:mod:`floydd.cluster.writes` keeps asking
  during an election), as before.

A box that is not a member yet (joining) and the leader itself are never cut off here: the
first asks the members it knows; the second steps down by itself when it hears from no
majority (raft's check-quorum), and is then a follower like any other.

Pure: the driver (:mod:`floydd.cluster.driver.proposals`) passes the times in.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from floydd.errors import Unavailable

__all__ = ["LeaderUnreachable", "UPKEEP_OPS", "silent_for", "refusal", "watched"]

UPKEEP_OPS = frozenset({"raft.conf", "node.upsert"})
"""What a box proposes to get back in: its seat (``raft.conf`` add_learner) and its record. A
member the leader dropped while it was cut off hears from no leader ever again and looks cut
off here; it asks the members it reaches for its seat (:mod:`floydd.cluster.upkeep`), so
these are never refused or given up on for being cut off."""


class LeaderUnreachable(Unavailable):
    """A write refused because this box is cut off from the leader: never retried on another
    member by this box (none answers), only by the person once the box is back in touch."""
    code = "leader_unreachable"


def silent_for(*, me: str, now: float, leader: bool, voters: Iterable[str], members: Iterable[str],
               heard: Mapping[str, float], leader_heard: float | None, started: float,
               after: float) -> float | None:
    """Seconds since this box last heard from a leader when it is cut off from it (measured
    from ``started`` when it never has), else None.

    ``heard``: peer -> when this box last had a message from it; ``leader_heard``: when it
    last had one from the leader of the moment (or was the leader itself)."""
    voters, members = set(voters), set(members)
    if leader or me not in members or voters <= {me}:
        return None
    since = leader_heard if leader_heard is not None else started
    silent = now - since
    if silent < after:
        return None
    reached = sum(1 for v in voters if v == me or now - heard.get(v, float("-inf")) < after)
    if 2 * reached > len(voters):
        return None                 # an election among boxes it reaches: wait for its leader
    return silent


def watched(cmd: dict) -> bool:
    """Whether a write of ``cmd`` is refused, or given up on, while this box is cut off."""
    return cmd.get("op") not in UPKEEP_OPS


def refusal(silent: float, *, ever: bool) -> LeaderUnreachable:
    """The words for a write refused on a box cut off from the leader for ``silent`` seconds
    (``ever``: it has heard from one since the daemon started)."""
    when = f"last heard {silent:.0f} s ago" if ever else f"none heard since this daemon started {silent:.0f} s ago"
    return LeaderUnreachable(f"this box cannot reach the cluster's leader ({when})",
                             hint="check this box's network to the other boxes (floydd members lists them), or send it "
                                  "through a box that reaches them; retrying with the same command is safe")
