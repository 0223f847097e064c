"""``choose_replicas``: which nodes fetch a version so it is kept on R nodes (pure)."""

from __future__ import annotations

import hashlib

from floydd.cluster.datasets import choose_replicas


def nodes(**statuses: str) -> dict[str, dict]:
    return {nid: {"id": nid, "status": status} for nid, status in statuses.items()}


def version(*holders: str, tree: str = "ab" * 32) -> dict:
    return {"name": "mnist", "version": 1, "tree": tree, "holders": list(holders)}


def test_enough_live_holders_need_nobody():
    assert choose_replicas(nodes(a="up", b="up", c="up"), version("a", "b"), 2) == []
    assert choose_replicas(nodes(a="up", b="off", c="up"), version("a", "b"), 2) == []  # off still holds


def test_missing_copies_go_to_up_nodes_in_hash_order():
    n = nodes(a="up", b="up", c="up", d="off", e="down", f="up")
    tree = "cd" * 32
    chosen = choose_replicas(n, version("a", tree=tree), 3)
    expected = sorted(["b", "c", "f"], key=lambda nid: hashlib.sha256(f"{nid}{tree}".encode()).digest())[:2]
    assert chosen == expected
    assert choose_replicas(dict(reversed(list(n.items()))), version("a", tree=tree), 3) == expected


def test_the_order_depends_on_the_tree_so_load_spreads():
    n = nodes(**{f"n{i}": "up" for i in range(12)})
    firsts = {choose_replicas(n, version(tree=f"{t:064x}"), 1)[0] for t in range(40)}
    assert len(firsts) > 4


def test_a_removed_holder_no_longer_counts():
    n = nodes(a="up", c="up")                     # b was removed from the node table
    assert choose_replicas(n, version("a", "b"), 2) == ["c"]
    assert choose_replicas(nodes(a="up"), version("a"), 2) == []    # nobody to copy to
