"""This node's store, cared for with what the cluster knows: repairs and gc roots.

``floyd data verify --repair`` (:func:`repair_damaged`): every object verify found damaged
or missing is fetched again from other nodes, holders of the versions that use it first;
each copy is verified before it replaces the local one (:func:`~floydd.cluster.peerstore.fetch_objects`).
What no node can send stays in the report with why. On a box alone there is no other source:
the answer says so, and what does work (an upload of the same data writes good copies over
damaged ones; or delete the versions that use it).

``floyd data gc`` (:func:`named_trees`): besides the local catalog, gc keeps every tree the
cluster still names for this node (versions it holds, jobs' code) and every tree this node's
job records name, so a local catalog that lags behind them (lost or restored from an old
copy) costs no data.
"""

from __future__ import annotations

from typing import Any, Iterable

from floydd.cluster.peerstore import fetch_objects
from floydd.errors import InvalidSpec
from floydd.store.ids import ObjectId
from floydd.store.maintenance import VerifyReport

__all__ = ["repair_damaged", "named_trees", "NO_SOURCE"]

NO_SOURCE = ("no other node holds a copy: upload the same data again (an upload writes good copies over "
             "damaged ones), or delete the versions that use it (floyd data delete REF)")


async def repair_damaged(report: VerifyReport, store: Any, cluster: Any) -> dict:
    """``report`` as a dict, after fetching good copies of what it found damaged: ``repaired``
    lists what was fixed, ``damaged`` what is still damaged, each with ``repair`` (why not)."""
    state = cluster.state
    others = [nid for nid in state.nodes if nid != cluster.node_id]
    repaired, left = [], []
    for damage in report.damaged:
        holders = [h for ref in damage.versions for h in _holders(state.datasets, ref)]
        sources = [n for n in dict.fromkeys([*holders, *others]) if n != cluster.node_id]
        why = NO_SOURCE
        if sources:
            why = (await fetch_objects(store, [damage.object], sources, cluster.transport))[damage.object]
        if why:
            left.append({**damage.to_dict(), "repair": why})
        else:
            repaired.append({"object": str(damage.object), "versions": list(damage.versions)})
    return {**report.to_dict(), "ok": not left, "damaged": left, "repaired": repaired}


def named_trees(state: Any, node_id: str, jobs: Iterable[dict]) -> set[ObjectId]:
    """Trees gc must keep although the local catalog may not name them: the cluster's versions
    held by ``node_id`` (job outputs among them), the code of every job in the cluster's state,
    and the code of this node's job records (``jobs``)."""
    trees: set[str] = set()
    for dataset in state.datasets.values():
        trees.update(v["tree"] for v in dataset["versions"].values() if node_id in v.get("holders", ()))
    trees.update(job.get("spec", {}).get("code_tree") or "" for job in state.jobs.values())
    trees.update(job.get("code_tree") or "" for job in jobs)
    out = set()
    for tree in trees:
        try:
            out.add(ObjectId.from_hex(tree))
        except InvalidSpec:
            continue
    return out


def _holders(datasets: dict, ref: str) -> list[str]:
    name, _, number = ref.rpartition(":")
    return list(datasets.get(name, {}).get("versions", {}).get(number, {}).get("holders", ()))
