"""Node snapshots: what placement knows of each node, built from plain data.

The one builder of :class:`~floydd.scheduler.placement.NodeSnapshot`. The leader feeds it
the committed state (node records with their GPUs, cores and memory; the GPUs, cores and
memory each node's active jobs hold; how many active jobs each node runs; each node's
health at the time of the round); a box alone feeds it its own record the same way. Pure:
no I/O and no clock (health comes in already judged), and O(nodes + held GPUs), so a round
over a thousand boxes costs milliseconds.

Names: placement and the reasons it gives name nodes by their names, which need not be
unique across a cluster; where two nodes share a name, each is shown as
``name(first 8 characters of its id)``.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from floydd.model import known_count
from floydd.scheduler.placement import NodeSnapshot

__all__ = ["node_snapshots"]


def node_snapshots(nodes: Mapping[str, Mapping], *, held: Mapping[str, Mapping[int, str]] | None = None,
                   load: Mapping[str, int] | None = None, health: Mapping[str, str] | None = None,
                   set_aside: Mapping[str, tuple[int, int]] | None = None,
                   trouble: Mapping[str, str] | None = None) -> dict[str, NodeSnapshot]:
    """Node id -> its snapshot, in the order of ``nodes``.

    ``nodes``: id -> a node record, ``{"name": ..., "resources": {"gpus": [...], "cpus": N,
    "memory": BYTES}}`` (a GPU is its index or ``{"index": ...}``; cores or memory left out or
    not a number: not known, never short); ``held``: id -> GPU index -> key of the job
    holding it; ``load``: id -> active jobs on the node; ``health``: id -> status, the node
    healthy when ``up``; ``set_aside``: id -> (thousandths of a core, bytes) its active jobs
    asked for; ``trouble``: id -> why an up node takes no new job (its store: ``disk full``),
    the node then not healthy. A node missing from ``held``, ``load``, ``health``,
    ``set_aside`` or ``trouble`` holds nothing, runs nothing and is up and well."""
    held, load, health, set_aside = held or {}, load or {}, health or {}, set_aside or {}
    trouble = trouble or {}
    shared = {name for name, n in Counter(node["name"] for node in nodes.values()).items() if n > 1}
    out = {}
    for nid, node in nodes.items():
        name = node["name"] if node["name"] not in shared else f"{node['name']}({nid[:8]})"
        resources = node.get("resources") or {}
        gpu_ids = tuple(g["index"] if isinstance(g, dict) else g for g in resources.get("gpus") or ())
        cpu_held, memory_held = set_aside.get(nid, (0, 0))
        out[nid] = NodeSnapshot(name=name, gpu_ids=gpu_ids, held=dict(held.get(nid) or {}),
                                healthy=health.get(nid, "up") == "up" and not trouble.get(nid),
                                draining=health.get(nid) == "draining", trouble=trouble.get(nid, ""),
                                load=load.get(nid, 0),
                                cpu_milli=known_count(resources.get("cpus"), 1000), cpu_held=cpu_held,
                                memory=known_count(resources.get("memory"), 1), memory_held=memory_held)
    return out
