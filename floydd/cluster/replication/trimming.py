"""The leader trims copies beyond R (issue 21), a part of :class:`~floydd.cluster.replication.datasets.ClusterDatasets`.

A version gets a copy more than R when a holder that was replaced after its grace comes back
(its copy counts again), or when a box was wrongly judged silent. Once every holder counts and
is heard from, the leader drops the extra holders :func:`~floydd.cluster.replication.replicas.extra_copies`
names (``dataset.holders`` holds=False, an op the leader may say about any box at every
level), one at a time, looking at the state again before each; the box dropped drops the
version from its local catalog when it applies that entry, and gc frees the space. Only from
cluster level 3: a box of an older release would not drop its mirror.
"""

from __future__ import annotations

from typing import Any

from floydd import log
from floydd.cluster.replication.replicas import extra_copies
from floydd.cluster.state.versions import at_least
from floydd.errors import FloyddError
from floydd.model import ACTIVE_STATES

__all__ = ["Trimmer"]

_log = log.cluster.getChild("datasets")


class Trimmer:
    """Copies beyond R for ``datasets`` (its cluster, versions, liveness, task spawner)."""

    def __init__(self, datasets: Any) -> None:
        self.datasets = datasets
        self._busy: set[tuple[str, int]] = set()

    def check(self, version: dict) -> None:
        """On the leader: start trimming ``version`` if it has copies to drop (cheap otherwise)."""
        ds = self.datasets
        key = (version["name"], version["version"])
        if len(version["holders"]) <= ds.replicas or not ds.cluster.is_leader or key in self._busy \
                or not at_least(ds.state, 3) or not self.extra(version):
            return
        self._busy.add(key)
        ds._spawn(self._trim(*key), f"datasets-trim-{key[0]}:{key[1]}")

    def extra(self, version: dict) -> list[str]:
        """The holders of ``version`` whose copies may go now (the leader's view)."""
        ds = self.datasets
        state = ds.state
        active = (j for j in state.jobs.values() if j.state in ACTIVE_STATES and j.data_trees)
        return extra_copies(state.nodes, version, ds.replicas, ds.liveness(), jobs=active)

    async def _trim(self, name: str, number: int) -> None:
        """Drop the copies of ``name:number`` beyond R, one holder at a time, each re-checked."""
        ds = self.datasets
        try:
            while ds.cluster.is_leader:
                version = ds._version(name, number)
                extra = self.extra(version) if version is not None else []
                if not extra:
                    return
                await ds.cluster.set_dataset_holder(name, number, holds=False, node=extra[0])
                _log.info("[%s] %s:%d had %d copies (%d kept): dropped the one on %s", ds.node_id, name, number,
                          len(version["holders"]), ds.replicas,
                          ds.state.nodes.get(extra[0], {}).get("name") or extra[0])
        except FloyddError as exc:          # not the leader any more, or no quorum: the next scan tries again
            _log.info("[%s] trimming the copies of %s:%d: %s", ds.node_id, name, number, exc)
        finally:
            self._busy.discard((name, number))
