"""Which copies of a dataset version count, and which nodes make the missing ones (DESIGN §5b).

Pure (STYLE 2): the committed node table, a version's holders and each node's age in; lists
and words out. Every node judges from the same committed state and how long ago it heard
from each node on its own monotonic clock (:attr:`Liveness.ages`), as the leader judges
silent nodes for jobs: no box's wall clock is compared with another's.

A holder **counts** while it is in the node table, not marked ``down``, and was heard from
within ``grace`` seconds (:attr:`Liveness.grace`, the daemon's ``replica_grace``): a crash, a
reboot, a cut link or a box switched off for less than the grace costs no copy, and a
holder that comes back counts again from its first heartbeat (its copy is kept: the
version then has one copy more than R). A holder removed from the table (it left for good)
never counts.

A node **takes** a missing copy only while it is ``up``, was heard from within ``fresh``
seconds (the cluster's ``stale_after``) and does not say its store is full or failing
(:mod:`floydd.scheduler.storehealth`): a crashed box that still reads ``up`` in the table is
never chosen, the next node in the order steps in once the chosen one goes stale, and a box
whose copy failed for lack of space says so in a heartbeat at once, so the next one steps in.
A box that could not keep a copy of a version for another reason (its fetches failed three
times: it cannot reach the holders, say) says so in the version (``dataset.holders`` with
``failed``, level 3: the version's ``refused``) and is passed over for that version for
:data:`REFUSED_FOR` seconds from then (:func:`refused`), or until it holds it.
The order is sha256(node id + tree), so copies of different versions spread over the nodes
and every node computes the same list.

**Extra copies** (more than R count: a holder came back after its copy was replaced) are
trimmed by the leader (:func:`extra_copies`) once the set is healthy: only holders that
count and are fresh and up are weighed, never fewer than R of them are kept, copies on boxes
whose store is in trouble go first, then the last in the order; a holder running a job that
mounts the version keeps its copy, and nothing is trimmed while a job that mounts it is
starting (it may be fetching from any holder).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from floydd.model import Job
from floydd.scheduler.storehealth import trouble

__all__ = ["Liveness", "choose_replicas", "counted", "silent", "ranked_sources", "copies_note", "extra_copies",
           "refused", "REFUSED_FOR"]

REFUSED_FOR = 600.0
"""Seconds a box that said it could not keep a copy of a version is passed over for it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Liveness:
    """A clock reading and the two windows: ``grace`` for holders, ``fresh`` for takers."""

    now: float
    grace: float
    fresh: float
    ages: Mapping[str, float] | None = None
    """Node id -> seconds since this box heard from it, on its own monotonic clock
    (:mod:`floydd.cluster.heard`); None: ``now`` minus the node's last heartbeat ``ts``,
    which only agrees across boxes whose clocks do (issue 21: a box 10 minutes behind
    looked silent to all and got third copies of everything it held)."""

    def holds(self, node: dict | None) -> bool:
        """Does a copy on ``node`` count?"""
        return node is not None and node.get("status") != "down" and self._age(node) <= self.grace

    def takes(self, node: dict | None) -> bool:
        """May ``node`` be asked to make a copy?"""
        return node is not None and node.get("status") == "up" and self._age(node) <= self.fresh \
            and not trouble(node)

    def fresh_up(self, node: dict | None) -> bool:
        """Is ``node`` up and heard from lately (whatever its store says)?"""
        return node is not None and node.get("status") == "up" and self._age(node) <= self.fresh

    def _age(self, node: dict) -> float:
        if self.ages is not None and node.get("id") in self.ages:
            return self.ages[node["id"]]
        return self.now - node.get("last_heartbeat", 0.0)


def counted(nodes: dict[str, dict], holders: Iterable[str], live: Liveness) -> list[str]:
    """The ``holders`` whose copies count, in their order."""
    return [h for h in holders if live.holds(nodes.get(h))]


def silent(nodes: dict[str, dict], holders: Iterable[str], live: Liveness) -> list[str]:
    """The ``holders`` still in the node table whose copies do not count now."""
    return [h for h in holders if h in nodes and not live.holds(nodes[h])]


def choose_replicas(nodes: dict[str, dict], version: dict, replicas: int, live: Liveness) -> list[str]:
    """The nodes that should fetch ``version`` so ``replicas`` copies count: nodes that may
    take a copy and do not hold one, ordered by sha256(node id + tree), as many as are missing."""
    wanted = replicas - len(counted(nodes, version["holders"], live))
    if wanted <= 0:
        return []
    passed = refused(version, live)
    candidates = [nid for nid, n in nodes.items() if nid not in version["holders"] and nid not in passed
                  and live.takes(n)]
    candidates.sort(key=lambda nid: _rank(nid, version["tree"]))
    return candidates[:wanted]


def refused(version: dict, live: Liveness) -> dict[str, str]:
    """Node id -> why, for the boxes that said lately (within :data:`REFUSED_FOR`) they could
    not keep a copy of ``version``."""
    out = {}
    for nid, said in (version.get("refused") or {}).items():
        if isinstance(said, dict) and live.now - said.get("ts", 0.0) < REFUSED_FOR:
            out[nid] = str(said.get("why", ""))
    return out


def extra_copies(nodes: dict[str, dict], version: Mapping, replicas: int, live: Liveness, *,
                 jobs: Iterable[Job] = (), uses: Callable[[Job], bool] | None = None) -> list[str]:
    """Holders of ``version`` whose copies the leader may drop: beyond ``replicas`` copies on
    holders that count and are fresh and up, those on boxes with store trouble first, then the
    last in the order; never one running a job of ``jobs`` (the active ones) that ``uses`` the
    tree (default: mounts the version, or has a spec this box cannot read, a newer box's; a
    job's code tree passes its own test), nothing while such a job is starting, nothing while
    a holder is silent."""
    holders = version["holders"]
    if len(holders) <= replicas or any(not live.holds(nodes.get(h)) for h in holders):
        return []
    good = [h for h in holders if live.fresh_up(nodes.get(h))]
    if len(good) <= replicas:
        return []
    keep: set[str] = set()
    uses = uses or (lambda job: version["tree"] in job.data_trees)
    for job in jobs:
        if not uses(job):
            continue
        if job.state == "starting":
            return []
        keep.update(part.node for part in job.parts)
        keep.add(job.node)
    order = sorted(good, key=lambda h: (bool(trouble(nodes.get(h))), _rank(h, version["tree"])))
    kept = [h for h in order if h in keep]
    room = max(0, replicas - len(kept))
    kept += [h for h in order if h not in keep][:room]
    return [h for h in order if h not in kept]


def ranked_sources(nodes: dict[str, dict], likely: Iterable[str], live: Liveness, *, skip: str = "") -> list[str]:
    """Nodes to fetch from: the ``likely`` ones (holders) that count, then other nodes heard
    from lately, then the silent holders, then the rest; never ``skip`` (this node). A silent
    node asked first could hold a fetch up for a whole connect timeout. A node the leader
    marked suspect comes after those, even one this box heard from a moment ago: a frozen
    box (a hung kernel, SIGSTOP) still accepts connections and answers nothing, and the
    leader's mark is the first sign (a job moved off it would wait out a read timeout)."""
    likely = [n for n in dict.fromkeys(likely) if n and n != skip]
    rest = [n for n in nodes if n != skip and n not in likely]
    good = [n for n in likely if live.holds(nodes.get(n))]
    fresh = [n for n in rest if live.takes(nodes[n]) or live.holds(nodes[n])]
    ranked = dict.fromkeys([*good, *fresh, *likely, *rest])
    return [n for n in ranked if not _suspect(nodes.get(n))] + [n for n in ranked if _suspect(nodes.get(n))]


def _suspect(node: dict | None) -> bool:
    return node is not None and node.get("status") == "suspect"


def copies_note(nodes: dict[str, dict], version: dict, replicas: int, live: Liveness) -> str:
    """What ``floyd data upload`` and ``info`` say about a version's copies, e.g. "stored on
    1 of 2 boxes; the second copy follows"."""
    holders = version["holders"]
    good, quiet = counted(nodes, holders, live), silent(nodes, holders, live)
    if len(nodes) <= 1 and len(good) == 1:
        return "stored on this box only (a box alone keeps one copy; a box that joins takes the second)"
    note = f"stored on {len(good)} of {replicas} boxes" if len(good) <= replicas else \
        f"stored on {len(good)} boxes ({replicas} kept)"
    missing = replicas - len(good)
    if missing > 0:
        passed = refused(version, live)
        takers = [n for n, node in nodes.items() if n not in holders and n not in passed and live.takes(node)]
        what = f"the {_ORDINAL.get(len(good) + 1, 'next')} copy" if missing == 1 else f"{missing} more copies"
        kept_out = [f"{_names(nodes, [n])}: {trouble(node)}" for n, node in nodes.items()
                    if n not in holders and live.fresh_up(node) and trouble(node)]
        note += f"; {what} follows" if takers else f"; no other box is up to take {what}" + (
            f" ({', '.join(kept_out[:3])})" if kept_out else "")
    if quiet:
        note += f"; not counted: {_names(nodes, quiet)} (not heard from for over {live.grace:.0f}s)"
    for nid, why in list(refused(version, live).items())[:2] if missing > 0 else ():
        note += f"; {_names(nodes, [nid])} could not keep a copy ({why[:120]})"
    return note


def _rank(nid: str, tree: str) -> bytes:
    return hashlib.sha256(f"{nid}{tree}".encode()).digest()


def _names(nodes: dict[str, dict], ids: Iterable[str]) -> str:
    return ", ".join(nodes.get(i, {}).get("name") or i[:12] for i in ids)


_ORDINAL = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
