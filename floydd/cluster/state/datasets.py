"""The dataset catalog's commands of the replicated state: add a version, delete, holders.

A dataset is ``name -> versions`` (tree id, size, files, message, holders); version numbers
are never reused (``next``). From protocol level 2 a dataset also has an owner and a
visibility (:func:`floydd.cluster.state.people.own_dataset`); from level 3 a job's output
(``PROJECT/N/output``) is owned by its job's owner. A version added with an idempotency
key is found again by it (``idem``). Which boxes hold a version's tree is ``holders``
(``dataset.holders``); what replicates them is :mod:`floydd.cluster.replication.datasets`.

:class:`~floydd.cluster.state.machine.ClusterState` calls these with itself on apply, after
:mod:`floydd.cluster.state.authz` decided the proposer may say them; pure, like the rest of it.
"""

from __future__ import annotations

import re

from floydd.cluster.state import access, people, versions
from floydd.cluster.state.commands import copy_of
from floydd.errors import Conflict, InvalidSpec, NotFound
from floydd.model import check_dataset_name

__all__ = ["add", "delete", "holders"]

_TREE = re.compile(r"[0-9a-f]{16,128}")


def add(state, cmd: dict, term: int) -> dict:
    name, tree, idem_key = cmd["name"], cmd["tree"], cmd.get("idem_key")
    if idem_key is not None and idem_key not in state.idem and state.archive.by_idem(idem_key, state.applying) is not None:
        raise Conflict(f"idempotency key {idem_key!r} was used for a job", code="idempotency_key_reused")
    if idem_key is not None and idem_key in state.idem:
        seen = state.idem[idem_key]
        version = state.datasets.get(seen[1], {}).get("versions", {}).get(str(seen[2]))
        if seen[0] != "dataset" or version is None:
            raise Conflict(f"idempotency key {idem_key!r} was used for something else",
                           code="idempotency_key_reused")
        return copy_of(version)
    check_dataset_name(name)
    if not _TREE.fullmatch(tree):
        raise InvalidSpec(f"{tree!r:.80} is not a tree id (hex)")
    dataset = state.datasets.setdefault(name, {"next": 1, "versions": {}})
    if versions.at_least(state, 2):      # owners came with level 2: every box writes them from then
        people.own_dataset(dataset, cmd)  # owner, visibility (authz checked who may change them)
    if versions.at_least(state, 3):      # a job's output is its job's owner's, whoever published it
        _owned_by_its_job(state, name, dataset)
    number = dataset["next"]
    dataset["next"] = number + 1
    version = {"name": name, "version": number, "ref": f"{name}:{number}", "tree": tree,
               "created": cmd["ts"], "size": cmd.get("size", 0), "files": cmd.get("files", 0),
               "message": cmd.get("message", ""), "holders": [cmd["node"]] if "node" in cmd else [],
               "idem_key": idem_key, "user": cmd.get("user", "")}
    if "owner" in dataset:
        version.update(owner=dataset["owner"], visibility=dataset["visibility"])
    dataset["versions"][str(number)] = version
    if idem_key is not None:
        state.idem[idem_key] = ["dataset", name, number]
    return copy_of(version)


def delete(state, cmd: dict, term: int) -> None:
    name, number = cmd["name"], cmd.get("version")
    versions = state.datasets.get(name, {}).get("versions", {})
    doomed = list(versions) if number is None else [str(number)]
    if not doomed or doomed[0] not in versions:
        raise NotFound(f"dataset {name}{'' if number is None else f':{number}'} does not exist",
                       code="dataset_not_found", hint="floyd data list shows the datasets")
    for n in doomed:
        idem_key = versions.pop(n)["idem_key"]
        if idem_key is not None:
            state.idem.pop(idem_key, None)


def holders(state, cmd: dict, term: int) -> dict:
    name, number = cmd["name"], cmd["version"]
    version = state.datasets.get(name, {}).get("versions", {}).get(str(number))
    if version is None:
        raise NotFound(f"dataset {name}:{number} does not exist", code="dataset_not_found")
    holders = set(version["holders"])
    (holders.add if cmd["holds"] else holders.discard)(cmd["node"])
    version["holders"] = sorted(holders)
    if "failed" in cmd:                 # level 3: passed over for this copy a while (replicas)
        version.setdefault("refused", {})[cmd["node"]] = {"why": cmd["failed"], "ts": cmd["ts"]}
    elif cmd["holds"] and cmd["node"] in version.get("refused", {}):
        del version["refused"][cmd["node"]]
        if not version["refused"]:
            del version["refused"]
    return copy_of(version)


def _owned_by_its_job(state, name: str, dataset: dict) -> None:
    """Level 3: the dataset ``PROJECT/N/output`` of a job the state knows is owned by that
    job's owner (:func:`floydd.cluster.state.access.output_owner`), every version saying so."""
    owner = access.output_owner(state, name, state.applying)     # the archive as of this entry
    if owner is None or dataset.get("owner") == owner:
        return
    dataset["owner"] = owner
    for version in dataset["versions"].values():
        version["owner"] = owner
