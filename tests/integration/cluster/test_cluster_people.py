"""People and roles are replicated: every box holds the same lab, refuses the same changes,
and maps uids per box (floydd.cluster.state.people through real raft between in-process boxes)."""

from __future__ import annotations

import msgpack
import pytest

from floydd.cluster.state import people
from floydd.errors import Conflict, Forbidden


async def test_people_replicate_and_every_box_refuses_alike(cluster):
    nodes = await cluster.start(3)
    lead = await cluster.wait_leader()
    await lead.service.grant_admin("root")                  # floydd init's first admin
    await cluster.sign_in("root")                           # who acts as root on every box
    a, b = [n for n in nodes if n is not lead]
    await a.service.change_account({"op": "person.add", "name": "alice", "role": "user", "user": "root",
                                   "uids": {a.id: [2001]}, "boxes": [b.id]})
    await cluster.wait_for(lambda: all("alice" in n.service.state.people for n in nodes), what="alice everywhere")
    for n in nodes:
        ppl = n.service.state.people
        assert people.person_of(ppl, a.id, 2001, "anyone") == "alice"      # mapped on box a
        assert people.person_of(ppl, b.id, 2001, "anyone") is None         # not on b
        assert people.person_of(ppl, b.id, 1000, "alice") == "alice"       # her login on b, listed for her
        assert people.person_of(ppl, lead.id, 1000, "alice") is None       # not on a box not listed for her
    with pytest.raises(Forbidden, match="user alice may not change the role of alice: not an admin"):
        await b.service.change_account({"op": "person.role", "name": "alice", "role": "admin", "user": "alice"})
    with pytest.raises(Conflict, match="root is the lab's last admin"):
        await b.service.change_account({"op": "person.remove", "name": "root", "user": "root"})
    await b.service.change_account({"op": "person.role", "name": "alice", "role": "admin", "user": "root"})
    await cluster.wait_for(lambda: all(n.service.state.admins == ["alice", "root"] for n in nodes),
                           what="alice an admin everywhere")
    snapshots = {msgpack.unpackb(n.service.state.snapshot(), raw=False)["people"].__repr__() for n in nodes}
    assert len(snapshots) == 1, "every box holds the same people"


async def test_a_private_dataset_is_refused_to_others_on_every_box(cluster):
    nodes = await cluster.start(2)
    lead = await cluster.wait_leader()
    await lead.service.grant_admin("root")
    other = next(n for n in nodes if n is not lead)
    for name in ("alice", "bob"):
        await lead.service.change_account({"op": "person.add", "name": name, "role": "user", "user": "root",
                                           "every_box": True})
    await cluster.sign_in("root")
    tree = "ab" * 16
    await lead.service.add_dataset_version("faces", tree, user="alice", visibility="private")
    with pytest.raises(Forbidden, match="user bob may not add a version to faces: it is alice's private dataset"):
        await other.service.add_dataset_version("faces", tree, user="bob")
    with pytest.raises(Forbidden, match="may not delete faces"):
        await other.service.delete_dataset("faces", user="bob")
    await other.service.add_dataset_version("faces", tree, user="root")       # an admin may
    await cluster.wait_for(lambda: all(len(n.service.state.datasets["faces"]["versions"]) == 2 for n in nodes),
                           what="both versions everywhere")
    assert {v["owner"] for n in nodes for v in n.service.state.list_datasets()} == {"alice"}
