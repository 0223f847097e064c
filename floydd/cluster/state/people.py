"""The lab's people: cluster-wide accounts with a role, and which local uids are whose.

A person is a name with a role (``admin`` or ``user``) and, per box, the local uids that act
as that person (``uids``: node id -> [uid, ...]). A uid nobody maps on a box acts as the person
whose name is its login name there, on the boxes listed for that person (``boxes``, or every
box with ``every_box``), unless that person has uids mapped on that box, which then are the
only ones. A person is *signed in* on a box where a uid acts as them (:func:`signed_in`): the
boxes that may act for them (:mod:`floydd.cluster.state.signin`). It lives in the replicated state
as ``state.people``::

    {name: {"role": "admin" | "user", "uids": {node_id: [uid, ...]}, "added": ts, "by": name,
            "boxes": [node_id, ...], "every_box": bool}}

``boxes`` and ``every_box`` come with cluster level 3 (floydd 0.3): a record without them is
from before, when the login name acted as its person on every box (and still does, until the
cluster reaches level 3 and :func:`list_members` lists every member box then for everyone).
From level 3 the handlers here are given ``here``, the box that proposed the command:
``person.add`` lists it by default (the box ``floydd user add`` was run through), the first
admin (``admin.grant``, ``floydd init``) is signed in on it, ``person.map`` with no uids lists
the box it names, and ``person.boxes`` lists or unlists a box (or every box).

The handlers here are the state machine's (pure: no I/O, no clock; :class:`ClusterState
<floydd.cluster.state.machine.ClusterState>` calls them on apply, after :mod:`floydd.cluster.state.authz`
decided the proposer and its user may say the command). They keep one invariant: a lab with
people has an admin. So the first person is an admin whatever role was asked, and when the
first ``person.add`` comes from a lab of one (no people yet: the user daemon's own user is its
admin, README's first command), that user is recorded first, as admin, so the one who added
people is not locked out by them. The last admin cannot be demoted or removed.

Datasets get their owner and visibility here too (:func:`own_dataset`): ownership is a
person's, like roles.

``admin.grant`` (``floydd init``, and logs written before people existed) records an admin;
a snapshot from then holds ``admins`` (a list of names), which :func:`migrate` turns into people.
"""

from __future__ import annotations

import re
from typing import Any

from floydd.errors import Conflict, InvalidName, InvalidSpec, NotFound

__all__ = ["ROLES", "check_person_name", "admins", "has_admins", "person_of", "signed_in", "migrate",
           "add", "set_role", "remove", "map_uids", "set_boxes", "add_box", "list_members", "grant", "listing",
           "own_dataset", "VISIBILITIES", "MAX_BOXES"]

ROLES = ("admin", "user")
VISIBILITIES = ("lab", "private")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_MAX_UIDS = 64
"""The most uids one person maps on one box (a login or two, not a range)."""
MAX_BOXES = 1000
"""The most boxes listed for one person (a lab's boxes; ``every_box`` says all of them)."""


def check_person_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.endswith("."):
        raise InvalidName(f"{name!r:.80} is not a person's name",
                          hint="use a login name: letters, digits, _ . - (at most 64), e.g. alice")
    return name


def admins(people: dict) -> list[str]:
    """The names of the admins, sorted."""
    return sorted(name for name, p in people.items() if p.get("role") == "admin")


def has_admins(people: dict) -> bool:
    return any(p.get("role") == "admin" for p in people.values())


def person_of(people: dict, node_id: str, uid: int, login: str | None) -> str | None:
    """Who local ``uid`` (login name ``login``, None if it has none) on box ``node_id`` is:
    the person mapping that uid there, else the person named ``login`` unless they map other
    uids there or the box is not listed for them (:func:`login_acts`); None: nobody (the caller
    has no account in this lab, or none that acts on this box)."""
    for name in sorted(people):
        if uid in (people[name].get("uids") or {}).get(node_id, ()):
            return name
    person = people.get(login) if login else None
    if person is not None and not (person.get("uids") or {}).get(node_id) and login_acts(person, node_id):
        return login
    return None


def login_acts(person: dict, node_id: str) -> bool:
    """Whether ``person``'s login name acts as them on box ``node_id``: a listed box (or every
    box); every box for a record from before cluster level 3 (it lists none)."""
    if "boxes" not in person:
        return True
    return bool(person.get("every_box")) or node_id in person["boxes"]


def signed_in(people: dict, node_id: str, name: str) -> bool:
    """Whether person ``name`` is signed in on box ``node_id``: a uid is mapped to them there,
    or their login name acts as them there (:func:`login_acts`)."""
    person = people.get(name)
    if person is None:
        return False
    return bool((person.get("uids") or {}).get(node_id)) or login_acts(person, node_id)


def migrate(raw: dict) -> dict:
    """``people`` of a snapshot; one written before people existed holds ``admins`` instead."""
    people = raw.get("people")
    if isinstance(people, dict):
        return people
    return {name: _new("admin", {}, 0.0, "") for name in raw.get("admins") or () if isinstance(name, str)}


def listing(people: dict) -> list[dict]:
    """What ``floydd user list`` shows: each person with their name, role and uids, by name,
    and (from cluster level 3) the boxes where their login name acts as them."""
    return [{"name": name, "role": p["role"], "uids": {n: list(u) for n, u in sorted((p.get("uids") or {}).items())},
             "added": p.get("added", 0.0), "by": p.get("by", ""),
             **({"boxes": list(p["boxes"]), "every_box": bool(p.get("every_box"))} if "boxes" in p else {})}
            for name, p in sorted(people.items())]


def list_members(people: dict, members: list[str]) -> None:
    """Cluster level 3 switched on: everyone's login name acts as them on the boxes that are
    members then (as it did on every box before), so nobody loses access on an upgrade; a
    box that joins later acts for nobody until someone is signed in there."""
    for person in people.values():
        if "boxes" not in person:
            person["boxes"], person["every_box"] = sorted(members), False


# -- the handlers (ClusterState.apply calls them) -------------------------------------------------


def add(people: dict, cmd: dict, *, here: str | None = None) -> dict:
    """``person.add``: a new person; Conflict if the name is taken (a retry says so too).
    ``here``: the proposing box, from cluster level 3 (None before, when records list no
    boxes): their login name acts as them on the boxes the command lists (``boxes``,
    ``every_box``), by default on ``here``."""
    name, role, user = check_person_name(cmd["name"]), _role(cmd["role"]), cmd.get("user") or ""
    uids = _uids(cmd.get("uids") or {})
    boxes = _boxes(cmd.get("boxes", [here] if here else [])) if here is not None else None
    if name in people:
        raise Conflict(f"{name} already has an account in this lab", code="person_exists",
                       hint=f"floydd user role {name} admin|user changes their role")
    if not people and user and user != name:     # a lab of one's owner adds the first person
        check_person_name(user)
        people[user] = _new("admin", {}, cmd["ts"], user, None if here is None else [here] if here else [])
    if not has_admins(people):
        role = "admin"                           # the first person is an admin
    _claimed(people, uids)
    people[name] = _new(role, uids, cmd["ts"], user, boxes, bool(cmd.get("every_box")))
    return _view(people, name)


def set_role(people: dict, cmd: dict) -> dict:
    """``person.role``: make someone an admin or a user (never the last admin a user)."""
    name, role = cmd["name"], _role(cmd["role"])
    person = _person(people, name)
    if role != "admin" and person["role"] == "admin" and admins(people) == [name]:
        raise Conflict(f"{name} is the lab's last admin", code="last_admin",
                       hint="make someone else an admin first (floydd user role NAME admin)")
    person["role"] = role
    return _view(people, name)


def remove(people: dict, cmd: dict) -> None:
    """``person.remove``: the account goes (their jobs and datasets keep their name)."""
    name = cmd["name"]
    person = _person(people, name)
    if person["role"] == "admin" and admins(people) == [name]:
        raise Conflict(f"{name} is the lab's last admin and cannot be removed", code="last_admin",
                       hint="make someone else an admin first (floydd user role NAME admin)")
    del people[name]


def map_uids(people: dict, cmd: dict) -> dict:
    """``person.map``: the uids that act as ``name`` on box ``node`` (``[]``: back to the
    login-name default there, which from cluster level 3 lists the box for them)."""
    name, node = cmd["name"], cmd["node"]
    person = _person(people, name)
    uids = _uids({node: cmd["uids"]})
    others = {n: p for n, p in people.items() if n != name}
    _claimed(others, uids)
    if uids:
        person.setdefault("uids", {})[node] = uids[node]
    else:
        person.setdefault("uids", {}).pop(node, None)
        if "boxes" in person:
            add_box(people, name, node)
    return _view(people, name)


def set_boxes(people: dict, cmd: dict) -> dict:
    """``person.boxes`` (level 3): ``on``, list box ``node`` for ``name`` (their login name
    acts as them there) or, with ``every_box``, every box; not ``on``, unlist it: with a
    ``node``, the uids mapped there go too, so nothing acts as them on that box any more."""
    name, on = cmd["name"], cmd["on"]
    person = _person(people, name)
    if ("node" in cmd) == ("every_box" in cmd) or cmd.get("every_box") is False:
        raise InvalidSpec("person.boxes names one box (node) or every_box (true), not both",
                          hint="floydd user map NAME BOX, or floydd user map NAME --every-box")
    if "every_box" in cmd:
        person.setdefault("boxes", [])
        person["every_box"] = on
    elif on:
        add_box(people, name, _boxes([cmd["node"]])[0])
    else:
        person["boxes"] = [b for b in person.get("boxes") or () if b != cmd["node"]]
        (person.get("uids") or {}).pop(cmd["node"], None)
    person.setdefault("every_box", False)
    return _view(people, name)


def add_box(people: dict, name: str, node: str) -> None:
    """List box ``node`` for ``name`` (a no-op when it is, or when they have no account)."""
    person = people.get(name)
    if person is None:
        return
    boxes = person.get("boxes") or []
    if node not in boxes and len(boxes) >= MAX_BOXES:
        raise Conflict(f"{name} is listed on {len(boxes)} boxes already", code="too_many_boxes",
                       hint=f"floydd user map {name} --every-box lists every box at once")
    person["boxes"] = sorted({*boxes, node})
    person.setdefault("every_box", False)


def grant(people: dict, cmd: dict, *, here: str | None = None) -> list[str]:
    """``admin.grant``: ``user`` is an admin (a new person, or a user promoted); from cluster
    level 3 signed in on ``here``, the box that ran ``floydd init``."""
    name = check_person_name(cmd["user"])
    if name in people:
        people[name]["role"] = "admin"
        if here and "boxes" in people[name]:
            add_box(people, name, here)
    else:
        people[name] = _new("admin", {}, cmd["ts"], "", None if here is None else [here] if here else [])
    return admins(people)


def own_dataset(dataset: dict, cmd: dict) -> None:
    """``dataset.add_version`` on ``dataset`` (a ``state.datasets`` entry): a new dataset is
    owned by whoever adds it, ``lab``-visible unless asked ``private``; a ``visibility`` on a
    later version changes it (:mod:`floydd.cluster.state.authz`: the owner's or an admin's), and
    every version says the dataset's owner and visibility."""
    visibility = cmd.get("visibility")              # lab or private (floydd.cluster.state.commands checked)
    if "owner" not in dataset:              # new, or made before owners: who added its first version
        first = dataset["versions"][min(dataset["versions"], key=int)] if dataset["versions"] else cmd
        dataset["owner"], dataset["visibility"] = first.get("user", ""), visibility or "lab"
    elif visibility is not None and visibility != dataset["visibility"]:
        dataset["visibility"] = visibility
        for version in dataset["versions"].values():
            version["visibility"] = visibility


# -- helpers --------------------------------------------------------------------------------------


def _new(role: str, uids: dict, ts: float, by: str, boxes: list[str] | None = None, every_box: bool = False) -> dict:
    """A person's record; ``boxes`` None: one made before cluster level 3 (no list)."""
    record = {"role": role, "uids": uids, "added": ts, "by": by}
    if boxes is not None:
        record.update(boxes=sorted(set(boxes)), every_box=every_box)
    return record


def _view(people: dict, name: str) -> dict:
    return next(p for p in listing({name: people[name]}))


def _role(role: str) -> str:
    if role not in ROLES:
        raise InvalidSpec(f"{role!r:.40} is not a role", hint="a role is admin or user")
    return role


def _person(people: dict, name: str) -> dict:
    person = people.get(name)
    if person is None:
        raise NotFound(f"{name} has no account in this lab", code="person_not_found",
                       hint="floydd user list shows the lab's people")
    return person


def _uids(raw: Any) -> dict[str, list[int]]:
    if not isinstance(raw, dict):
        raise InvalidSpec("uids map box ids to lists of uids")
    out = {}
    for node, uids in raw.items():
        if not isinstance(uids, (list, tuple)) or len(uids) > _MAX_UIDS \
                or not all(type(u) is int and 0 <= u < 2 ** 32 for u in uids):
            raise InvalidSpec(f"uids on {node}: a list of at most {_MAX_UIDS} uids (non-negative ints)")
        if uids:
            out[node] = sorted(set(uids))
    return out


def _boxes(raw: Any) -> list[str]:
    if not isinstance(raw, (list, tuple)) or len(raw) > MAX_BOXES \
            or not all(isinstance(b, str) and 0 < len(b) <= 64 for b in raw):
        raise InvalidSpec(f"boxes: a list of at most {MAX_BOXES} box ids",
                          hint="floydd members lists the boxes and their ids")
    return sorted(set(raw))


def _claimed(people: dict, uids: dict[str, list[int]]) -> None:
    """Conflict if another person already maps one of ``uids`` on the same box."""
    for node, wanted in uids.items():
        for name, person in sorted(people.items()):
            taken = set(wanted) & set((person.get("uids") or {}).get(node, ()))
            if taken:
                raise Conflict(f"uid {min(taken)} on {node} already acts as {name}", code="uid_taken",
                               hint="floydd user list shows who maps which uids")
