"""Which copies count and who makes the missing ones (:mod:`floydd.cluster.replicas`, pure)."""

from __future__ import annotations

import hashlib

from floydd.cluster.replicas import Liveness, choose_replicas, copies_note, counted, ranked_sources, silent

NOW = 10_000.0
LIVE = Liveness(now=NOW, grace=300.0, fresh=20.0)


def nodes(**statuses: str | tuple[str, float]) -> dict[str, dict]:
    """Nodes by id: a status (heard from just now) or (status, seconds since last heard)."""
    out = {}
    for nid, value in statuses.items():
        status, age = value if isinstance(value, tuple) else (value, 0.0)
        out[nid] = {"id": nid, "name": f"box-{nid}", "status": status, "last_heartbeat": NOW - age}
    return out


def version(*holders: str, tree: str = "ab" * 32) -> dict:
    return {"name": "mnist", "version": 1, "tree": tree, "holders": list(holders)}


def test_enough_counted_holders_need_nobody():
    assert choose_replicas(nodes(a="up", b="up", c="up"), version("a", "b"), 2, LIVE) == []
    # a clean shutdown, a reboot, a crash: within the grace the copy still counts
    for b in ["off", ("off", 290.0), ("up", 290.0)]:
        assert choose_replicas(nodes(a="up", b=b, c="up"), version("a", "b"), 2, LIVE) == []


def test_missing_copies_go_to_fresh_up_nodes_in_hash_order():
    n = nodes(a="up", b="up", c="up", d="off", e="down", f="up", g=("up", 30.0))    # g crashed, still "up"
    tree = "cd" * 32
    chosen = choose_replicas(n, version("a", tree=tree), 3, LIVE)
    expected = sorted(["b", "c", "f"], key=lambda nid: hashlib.sha256(f"{nid}{tree}".encode()).digest())[:2]
    assert chosen == expected
    assert choose_replicas(dict(reversed(list(n.items()))), version("a", tree=tree), 3, LIVE) == expected


def test_the_order_depends_on_the_tree_so_load_spreads():
    n = nodes(**{f"n{i}": "up" for i in range(12)})
    firsts = {choose_replicas(n, version(tree=f"{t:064x}"), 1, LIVE)[0] for t in range(40)}
    assert len(firsts) > 4


def test_a_removed_holder_no_longer_counts():
    n = nodes(a="up", c="up")                     # b was removed from the node table
    assert choose_replicas(n, version("a", "b"), 2, LIVE) == ["c"]
    assert choose_replicas(nodes(a="up"), version("a"), 2, LIVE) == []    # nobody to copy to


def test_a_holder_silent_past_the_grace_is_replaced_and_counts_again_when_it_returns():
    v = version("a", "b")
    dead = nodes(a="up", b=("up", 301.0), c="up")
    assert counted(dead, v["holders"], LIVE) == ["a"] and silent(dead, v["holders"], LIVE) == ["b"]
    assert choose_replicas(dead, v, 2, LIVE) == ["c"]
    off = nodes(a="up", b=("off", 301.0), c="up")            # switched off for longer than the grace
    assert choose_replicas(off, v, 2, LIVE) == ["c"]
    back = nodes(a="up", b="up", c="up")                     # its first heartbeat after the return
    assert counted(back, v["holders"], LIVE) == ["a", "b"] and choose_replicas(back, v, 2, LIVE) == []
    marked_down = nodes(a="up", b="down", c="up")
    assert choose_replicas(marked_down, v, 2, LIVE) == ["c"]


def test_a_chosen_node_that_went_stale_is_skipped_for_the_next():
    tree = "ef" * 32
    n = nodes(a="up", b="up", c="up", d="up")
    first, second = choose_replicas(n, version("a", tree=tree), 3, LIVE)
    n[first]["last_heartbeat"] = NOW - 21.0
    assert choose_replicas(n, version("a", tree=tree), 2, LIVE) == [second]


def test_sources_put_counted_holders_first_and_silent_nodes_last():
    n = nodes(a=("up", 400.0), b="up", c="up", d=("up", 400.0), me="up")
    assert ranked_sources(n, ["a", "b"], LIVE, skip="me") == ["b", "c", "a", "d"]
    assert ranked_sources(n, ["me", "zz"], LIVE, skip="me") == ["b", "c", "zz", "a", "d"]   # unknown: after the good


def test_the_note_says_how_many_copies_and_what_follows():
    v = version("a")
    assert copies_note(nodes(a="up", b="up"), v, 2, LIVE) == "stored on 1 of 2 boxes; the second copy follows"
    assert copies_note(nodes(a="up", b=("up", 60.0)), v, 2, LIVE) == \
        "stored on 1 of 2 boxes; no other box is up to take the second copy"
    assert copies_note(nodes(a="up", b="up"), version("a", "b"), 2, LIVE) == "stored on 2 of 2 boxes"
    assert copies_note(nodes(a="up"), v, 2, LIVE).startswith("stored on this box only")
    note = copies_note(nodes(a="up", b=("up", 400.0), c="up"), version("a", "b"), 2, LIVE)
    assert note == ("stored on 1 of 2 boxes; the second copy follows; not counted: box-b "
                    "(not heard from for over 300s)")
    assert copies_note(nodes(a="up", b="up", c="up"), version("a", "b", "c"), 2, LIVE) == \
        "stored on 3 boxes (2 kept)"
