"""Boxes of adjacent releases in one cluster: the protocol level, and what needs which.

Each release speaks a cluster protocol, :data:`PROTOCOL` (0.1.x: 1, said by nothing; 0.2.x:
2; 0.3.x: 3). A box says its own in its node record's labels (``floydd/protocol``, ``floydd/version``:
``labels`` is a field every release accepts, so saying it never stops an older leader from
taking the record). The cluster's level (``state.protocol``) is a replicated fact: it starts
at 1 and is raised only by the leader's ``cluster.protocol`` command, once every box of the
cluster (each one not removed, up or not: a box that is off comes back with the release it
had) says it speaks the new level (:func:`cluster_level`).

Why a replicated level rather than each box deciding: every box must apply every command
alike. A command of a newer level (a new op, or a new field of an old one: :func:`needs`)
committed while an older box is a member would be refused there and taken elsewhere, and
the boxes' states would part. So:

- a box proposes nothing above the cluster's level (:func:`check_supported`, said plainly:
  ``person.add needs every box of the cluster on floydd 0.2 or later: box3 runs an older
  release``);
- every box refuses, on apply, a command above the level the log had reached when it was
  committed, so one that slipped through is refused everywhere alike;
- behaviour that changed for old commands (the audit chain, join tokens being an admin's)
  switches on with the level, at the same log index on every box (:func:`at_least`);
- from level 2 each command carries ``v``, the protocol of the box that proposed it; at
  level 1 none can (an older box refuses unknown fields), and its level is its version.

Node-to-node requests carry the ``Floydd-Protocol`` header (:data:`HEADER`); a box answers a
peer more than one level away with 409 (:func:`peer_supported`), so only adjacent releases
meet. A box of an older release than the cluster's level cannot join it (a joining box says
its protocol: :func:`check_joiner`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Mapping

import floydd
from floydd.errors import Conflict

__all__ = ["PROTOCOL", "LABEL", "VERSION_LABEL", "HEADER", "OP", "labels", "node_protocol", "cluster_level",
           "behind", "needs", "stamped", "at_least", "check_supported", "check_joiner", "peer_supported", "apply_level"]

PROTOCOL = 3
"""The cluster protocol this release speaks (1: 0.1.x, 2: 0.2.x)."""
LABEL = "floydd/protocol"
VERSION_LABEL = "floydd/version"
HEADER = "Floydd-Protocol"
OP = "cluster.protocol"
_NEW_OPS: Mapping[int, frozenset[str]] = {
    2: frozenset({"person.add", "person.role", "person.remove", "person.map", "apitoken.create",
                  "apitoken.revoke", "project.allocate", "job.import"}),
    3: frozenset({
        "audit.tamper",                                   # a box's stored audit chain was edited (audit_guard)
        "person.boxes",                                   # where a person's login name signs them in
        "code.holders",                                   # who holds a job's code tree (state_code, issue 21)
        "store.epoch",                                    # a new store key epoch (floydd.cluster.state.keyepochs)
    }),
}
"""Ops each level brought (2: people, personal tokens, imports). ``cluster.protocol`` itself
needs no level: it is proposed only once every box speaks the one it names (its authz rule)."""
_NEW_FIELDS: Mapping[int, Mapping[str, tuple[str, ...]]] = {
    2: {"node.upsert": ("config",), "dataset.add_version": ("visibility",)},
    3: {
        "node.health": ("audit_head",                     # its audit chain's head (audit_evidence)
                        "clock"),                         # its clock against the leader's (clockskew, issue 21)
        # sign-in (issue 20): where a login name acts, whom a join token signs in, a token's key,
        # and the personal token's signature (auth) on every op made for a person
        "person.add": ("boxes", "every_box", "auth"), "token.create": ("sign_in", "auth"),
        "apitoken.create": ("public_key", "auth"), "node.remove": ("auth",),
        "job.submit": ("auth", "code_held"),              # code_held: issue 21 (state_code)
        "job.update": ("auth",), "job.delete": ("auth",), "job.import": ("auth",),
        "dataset.add_version": ("auth",), "dataset.delete": ("auth",), "token.revoke": ("auth",),
        "person.role": ("auth",), "person.remove": ("auth",), "person.map": ("auth",),
        "apitoken.revoke": ("auth",),
        "dataset.holders": ("failed",),                   # a box could not keep a copy (issue 21: replicas)
    },
}
"""Fields each level added to older ops."""
_RELEASE = {1: "0.1", 2: "0.2", 3: "0.3"}


def labels(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A box's labels with what it says of its release."""
    return {**(extra or {}), LABEL: str(PROTOCOL), VERSION_LABEL: floydd.__version__}


def node_protocol(node: Mapping[str, Any]) -> int:
    """The protocol a node record says it speaks (1: it says none, an 0.1 box)."""
    try:
        return int((node.get("labels") or {}).get(LABEL, 1))
    except (TypeError, ValueError):
        return 1


def behind(state: Any, level: int) -> list[str]:
    """Names of the boxes (not removed) that do not speak ``level``, by name."""
    return sorted(node.get("name") or nid for nid, node in state.nodes.items()
                  if nid not in state.removed and node_protocol(node) < level)


def cluster_level(state: Any) -> int:
    """The highest level every box of the cluster speaks (this release's at most)."""
    levels = [node_protocol(node) for nid, node in state.nodes.items() if nid not in state.removed]
    return min([PROTOCOL, *levels])


def needs(cmd: Mapping[str, Any]) -> int:
    """The cluster level ``cmd`` needs to be applied alike by every box."""
    op = cmd.get("op")
    for level in sorted(_NEW_OPS, reverse=True):
        if op in _NEW_OPS[level] or any(f in cmd for f in _NEW_FIELDS[level].get(op, ())):
            return level
    return 2 if "v" in cmd else 1


def stamped(state: Any, cmd: dict) -> dict:
    """``cmd`` as this box proposes it: refused if the cluster's level is too low for it
    (:func:`check_supported`), carrying ``v`` from level 2 on."""
    check_supported(state, cmd)
    if at_least(state, 2) and "v" not in cmd:
        return {**cmd, "v": PROTOCOL}
    return cmd


def at_least(state: Any, level: int) -> bool:
    """Whether behaviour of ``level`` is on (the cluster's level as of the entry being applied)."""
    return getattr(state, "protocol", 1) >= level


def check_supported(state: Any, cmd: Mapping[str, Any]) -> None:
    """Conflict (``cluster_too_old``) if ``cmd`` needs a higher level than the cluster's."""
    wanted = needs(cmd)
    if wanted <= getattr(state, "protocol", 1):
        return
    old = behind(state, wanted)
    who = (f": {', '.join(old[:5])}{' and more' if len(old) > 5 else ''} "
           f"{'runs' if len(old) == 1 else 'run'} an older release") if old else ""
    raise Conflict(f"{cmd.get('op')} needs every box of the cluster on floydd {_RELEASE.get(wanted, wanted)} "
                   f"or later{who}", code="cluster_too_old",
                   hint="upgrade the remaining boxes one by one (docs/operations.md, \"Upgrades\"); the cluster "
                        "switches on once every box runs the new release")


def apply_level(state: Any, cmd: Mapping[str, Any]) -> int:
    """``cluster.protocol`` on apply: the new level (never lower, never above this release's)."""
    level = cmd["level"]
    if level > PROTOCOL:
        raise Conflict(f"cluster level {level} is above this box's ({PROTOCOL})", code="cluster_too_new",
                       hint="upgrade this box")
    state.protocol = max(getattr(state, "protocol", 1), level)
    return state.protocol


def check_joiner(state: Any, protocol: int | None) -> None:
    """A box asking to join says its protocol (an 0.1 box says none: 1); it must speak the
    cluster's level, or the log it would replay holds commands it cannot apply."""
    level = getattr(state, "protocol", 1)
    if (protocol or 1) < level:
        raise Conflict(f"this cluster runs floydd {_RELEASE.get(level, level)}: a box of an older release cannot "
                       "join it", code="joiner_too_old", hint="upgrade floydd on the joining box first")


def peer_supported(header: str | None) -> bool:
    """Whether a peer saying ``header`` (None: an 0.1 box, 1) is an adjacent release."""
    try:
        theirs = int(header) if header else 1
    except ValueError:
        return False
    return abs(theirs - PROTOCOL) <= 1
