"""The nodes' commands of the replicated state: ``node.upsert``, ``node.health``, ``node.remove``.

A node's record (address, ports, resources, labels, status, last heartbeat, the live runs
it reports: ``procs``) is written when it joins or comes back (``node.upsert``) and by its
heartbeats (``node.health``); the leader's ``suspect`` says it lost touch with it.
Removing a node tombstones it (``removed``) and revokes its certificates (``revoked``).

:class:`~floydd.cluster.state.machine.ClusterState` calls these with itself on apply, after
:mod:`floydd.cluster.state.authz` decided the proposer may say them; pure, like the rest of it.
"""

from __future__ import annotations

from floydd.cluster.state import versions
from floydd.cluster.state.commands import copy_of
from floydd.errors import Conflict, InvalidSpec

__all__ = ["upsert", "health", "remove", "gpu_indices"]


def upsert(state, cmd: dict, term: int) -> dict:
    nid = cmd["id"]
    if nid in state.removed and not cmd.get("rejoin"):
        raise Conflict(f"node {nid} was removed from the cluster", code="node_removed",
                       hint="join again with a new token (floydd token, then floydd join)")
    gpu_indices(cmd.get("resources") or {})
    state.removed.pop(nid, None)
    node = state.nodes.get(nid)
    if node is None:
        node = state.nodes[nid] = {"id": nid, "joined": cmd["ts"], "usage": {}}
    node.update(name=cmd["name"], address=cmd["address"], cluster_port=cmd["cluster_port"],
                api_port=cmd.get("api_port"), resources=cmd.get("resources") or {},
                labels=cmd.get("labels") or {}, status="up", updated=cmd["ts"],
                last_heartbeat=cmd["ts"])
    if "procs" in cmd:
        node["procs"] = cmd["procs"]
    if "config" in cmd:                  # what its operator set (audited when it changes)
        node["config"] = cmd["config"]
    return copy_of(node)


def health(state, cmd: dict, term: int) -> None:
    """A node's heartbeat (its status, usage and live job processes, ``procs``), or the
    leader's ``suspect``: it lost touch with the node (the node's next heartbeat, which
    reports its processes, makes it ``up`` again; until then nothing is placed there). A box
    that said ``off`` stays off until it announces itself (``node.upsert``) when it starts
    again: a beat it sent just before, committed just after, must not list it ``up`` (level 3)."""
    node = state.node_record(cmd["id"])
    if cmd["status"] == "suspect":
        if node["status"] in ("up", "draining"):
            node.update(status="suspect", suspect_since=cmd["ts"])
        return
    if node["status"] == "off" and cmd["status"] != "off" and versions.at_least(state, 3):
        return      # a beat sent before its "off" and committed after it: a box back announces itself
    node.update(status=cmd["status"], last_heartbeat=cmd["ts"])
    if "usage" in cmd:
        node["usage"] = cmd["usage"]
    if "procs" in cmd:
        node["procs"] = cmd["procs"]
    if "audit_head" in cmd:              # compared with each box's own chain (audit_guard)
        node["audit_head"] = cmd["audit_head"]
    if "clock" in cmd:                   # its clock against the leader's (only shown: clockskew)
        node["clock"] = cmd["clock"]


def remove(state, cmd: dict, term: int) -> None:
    """Tombstone the node and revoke the certificates recorded for it (its current and
    previous one): whoever holds them is refused from now on, whatever node id they claim."""
    nid = cmd["id"]
    state.nodes.pop(nid, None)
    state.removed[nid] = cmd["ts"]
    record = state.trust.certs.get(nid) or {}
    for serial in (record.get("serial"), (record.get("previous") or {}).get("serial")):
        if serial:
            state.revoked[serial] = {"node": nid, "ts": cmd["ts"]}


def gpu_indices(resources: dict) -> tuple[int, ...]:
    """GPU indices of a node's resources: ``{"gpus": [0, 1]}`` or ``[{"index": 0, ...}]``."""
    out = []
    for gpu in resources.get("gpus") or ():
        index = gpu.get("index") if isinstance(gpu, dict) else gpu
        if type(index) is not int or index < 0:
            raise InvalidSpec(f"a GPU must have a non-negative index, got {gpu!r:.80}")
        out.append(index)
    return tuple(out)
