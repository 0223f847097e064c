"""Which boxes hold each job's code tree: the ``code`` table of the replicated state (level 3).

A job's code is a tree of the store like a dataset version's, and it is kept the same way
(issue 21: a rerun used to wait for the box the job was submitted from, and could not run at
all once that box was gone): R copies, counted and replaced by
:mod:`floydd.cluster.replication.replicas`' rules, made by :mod:`floydd.cluster.replication.codecopies`. The table is
keyed by tree, because reruns, restarts and unchanged resubmissions share one tree::

    code   tree (hex) -> {"tree": tree, "holders": [node ids, sorted], "jobs": [job keys, sorted]}

- ``job.submit`` of a new job (from level 3) adds the job to its tree's entry, made on the
  first job; with ``code_held`` its origin (the box that snapshotted the code, or took its
  upload, and checked the tree is complete there) is a holder from the same entry: the first
  copy costs no second commit and no other box races to make it;
- ``job.import`` (from level 3) does the same for an imported job, its importing box a holder
  (the import stored the tree before it committed the job);
- ``code.holders`` (tree, node, holds): a box says it now holds a copy (or no longer does);
  about another box only the leader says so (:mod:`floydd.cluster.state.authz`, as ``dataset.holders``);
- ``job.delete`` (of a hot or an archived job) takes the job out; the entry goes with its
  last job, and with it the reason any box keeps the tree (gc: :func:`floydd.cluster.replication.storecare.named_trees`).
  Archiving a job keeps it in the entry: an archived job can still be rerun.

Jobs submitted before the cluster reached level 3 have no entry: their code is found as it
was (the boxes that sent and ran them). Pure: called by :class:`~floydd.cluster.state.machine.ClusterState`
on apply, after :mod:`floydd.cluster.state.authz`.
"""

from __future__ import annotations

import re
from typing import Any

from floydd.errors import InvalidSpec, NotFound
from floydd.model import Job

__all__ = ["submitted", "set_holder", "job_gone", "holders_of", "HELD_FIELD"]

HELD_FIELD = "code_held"
"""``job.submit``'s field (level 3): its origin holds the whole code tree."""
_HEX64 = re.compile(r"[0-9a-f]{64}")


def submitted(state: Any, job: Job, *, held: bool) -> None:
    """A new job: add it to its code tree's entry (made if new); its origin holds a copy if ``held``."""
    tree = job.code_tree
    if tree is None or not _HEX64.fullmatch(tree):
        return                          # no code (an import may carry none): nothing to keep
    entry = state.code.setdefault(tree, {"tree": tree, "holders": [], "jobs": []})
    entry["jobs"] = sorted({*entry["jobs"], job.id})
    if held and job.origin:
        entry["holders"] = sorted({*entry["holders"], job.origin})


def set_holder(state: Any, cmd: dict) -> dict:
    """``code.holders``: ``cmd["node"]`` holds ``cmd["tree"]`` (or no longer does); the entry."""
    tree = cmd["tree"]
    if not _HEX64.fullmatch(tree):
        raise InvalidSpec(f"code.holders: {tree[:80]!r} is not a tree id")
    entry = state.code.get(tree)
    if entry is None:
        raise NotFound(f"no job uses code tree {tree[:12]}: it was deleted with its last job",
                       code="code_not_found", hint="nothing to keep: gc gives its space back")
    holders = set(entry["holders"])
    (holders.add if cmd["holds"] else holders.discard)(cmd["node"])
    entry["holders"] = sorted(holders)
    return _copy(entry)


def job_gone(state: Any, key: str, tree: str | None) -> None:
    """Job ``key`` (whose code is ``tree``) was deleted: out of its tree's entry, and the entry
    out of the table with its last job."""
    entry = state.code.get(tree) if tree is not None else None
    if entry is None or key not in entry["jobs"]:
        return
    entry["jobs"] = [k for k in entry["jobs"] if k != key]
    if not entry["jobs"]:
        del state.code[tree]


def holders_of(state: Any, tree: str) -> list[str]:
    """The boxes the state says hold ``tree`` (none for a tree it does not list)."""
    entry = getattr(state, "code", {}).get(tree)
    return list(entry["holders"]) if entry else []


def _copy(entry: dict) -> dict:
    return {"tree": entry["tree"], "holders": list(entry["holders"]), "jobs": list(entry["jobs"])}
