"""Which copies count and who makes the missing ones (:mod:`floydd.cluster.replication.replicas`, pure)."""

from __future__ import annotations

import hashlib

from floydd.cluster.replication.replicas import (Liveness, choose_replicas, copies_note, counted, extra_copies, ranked_sources,
                                     silent)
from floydd.model import Job
from floydd.scheduler.storehealth import health_word, trouble, why

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


def test_a_holder_the_leader_marked_suspect_is_asked_last_though_heard_from_just_now():
    n = nodes(a="suspect", b="up", c=("up", 400.0))           # a: frozen a moment ago, connections hang
    assert ranked_sources(n, ["a", "b"], LIVE) == ["b", "c", "a"]
    assert ranked_sources(n, ["a"], LIVE) == ["b", "c", "a"], "any box that may hold it before a suspect one"


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


# -- copies go where they can live (issue 21) ---------------------------------------------------

def full(n: dict[str, dict], *ids: str, state: str = "full") -> dict[str, dict]:
    """``n`` with the stores of ``ids`` saying ``state`` in their last heartbeat."""
    for nid in ids:
        n[nid]["usage"] = {"store": {"state": state, "why": f"disk full at /x/{nid} (12.0 KiB free)"}}
    return n


def test_a_box_whose_store_is_full_or_failing_takes_no_copy_and_the_next_in_the_order_does():
    tree = "ef" * 32
    order = sorted("bcd", key=lambda nid: hashlib.sha256(f"{nid}{tree}".encode()).digest())
    first, second = order[0], order[1]
    assert choose_replicas(nodes(a="up", b="up", c="up", d="up"), version("a", tree=tree), 2, LIVE) == [first]
    for state in ("full", "failing"):
        n = full(nodes(a="up", b="up", c="up", d="up"), first, state=state)
        assert choose_replicas(n, version("a", tree=tree), 2, LIVE) == [second]
        assert not LIVE.takes(n[first]) and LIVE.fresh_up(n[first])
    ok = full(nodes(a="up", b="up", c="up", d="up"), first, state="ok")      # recovered: takes again
    assert choose_replicas(ok, version("a", tree=tree), 2, LIVE) == [first]
    # its copies still count (a full disk still reads): nothing more is made for them
    assert choose_replicas(full(nodes(a="up", b="up", c="up"), "b"), version("a", "b"), 2, LIVE) == []


def test_the_note_says_no_box_can_take_the_copy_while_the_only_other_box_is_full():
    n = full(nodes(a="up", b="up"), "b")
    assert copies_note(n, version("a"), 2, LIVE) == \
        "stored on 1 of 2 boxes; no other box is up to take the second copy (box-b: disk full)"


def job(tree: str, state: str, node: str, parts: tuple[str, ...] = ()) -> Job:
    return Job.from_dict({"id": "p/1", "project": "p", "number": 1, "created": 0.0, "updated": 0.0,
                          "state": state, "node": node,
                          "parts": [{"rank": r, "node": p, "gpus": [], "state": state} for r, p in enumerate(parts)],
                          "spec": {"command": "python train.py", "code_tree": "ef" * 32,
                                   "data": [{"ref": "mnist:1", "tree": tree, "mount": "/input"}]}})


def test_extra_copies_beyond_r_go_last_in_the_order_never_below_r():
    tree = "12" * 32
    v = version("a", "b", "c", tree=tree)
    n = nodes(a="up", b="up", c="up")
    extra = extra_copies(n, v, 2, LIVE)
    ranked = sorted("abc", key=lambda nid: hashlib.sha256(f"{nid}{tree}".encode()).digest())
    assert extra == [ranked[-1]]
    assert extra_copies(n, version("a", "b", tree=tree), 2, LIVE) == []
    assert extra_copies(n, v, 3, LIVE) == []
    five = nodes(a="up", b="up", c="up", d="up", e="up")
    assert len(extra_copies(five, version(*"abcde", tree=tree), 2, LIVE)) == 3


def test_extra_copies_wait_until_the_set_is_healthy():
    v = version("a", "b", "c")
    # a holder silent (within or past the grace), suspect or stale: nothing is trimmed yet
    for c in [("up", 30.0), ("up", 400.0), "suspect", ("off", 10.0)]:
        assert extra_copies(nodes(a="up", b="up", c=c), v, 2, LIVE) == [], c


def test_a_copy_on_a_box_with_store_trouble_goes_first():
    tree = "34" * 32
    ranked = sorted("abc", key=lambda nid: hashlib.sha256(f"{nid}{tree}".encode()).digest())
    n = full(nodes(a="up", b="up", c="up"), ranked[0])
    assert extra_copies(n, version("a", "b", "c", tree=tree), 2, LIVE) == [ranked[0]]


def test_a_copy_a_job_uses_is_kept_and_nothing_goes_while_a_job_of_it_starts():
    tree = "56" * 32
    v = version("a", "b", "c", tree=tree)
    n = nodes(a="up", b="up", c="up")
    last = extra_copies(n, v, 2, LIVE)[0]
    kept = extra_copies(n, v, 2, LIVE, jobs=[job(tree, "running", last)])
    assert last not in kept and len(kept) == 1
    gang = extra_copies(n, v, 2, LIVE, jobs=[job(tree, "running", "a", parts=("a", last))])
    assert last not in gang and len(gang) == 1
    assert extra_copies(n, v, 2, LIVE, jobs=[job(tree, "starting", "d")]) == []     # may fetch from any
    assert extra_copies(n, v, 2, LIVE, jobs=[job("78" * 32, "starting", "d")]) == [last]   # another tree


def test_store_health_words():
    n = full(nodes(a="up", b="up", c="up"), "b")
    full(n, "c", state="failing")
    assert [trouble(n[x]) for x in "abc"] == ["", "disk full", "store failing"]
    assert why(n["a"]) == "" and why(n["b"]) == "disk full at /x/b (12.0 KiB free)"
    assert health_word("healthy", n["b"]) == "disk full"
    assert health_word("stale", n["b"]) == "stale"              # stale says more: it is not heard from
    assert health_word("healthy", n["a"]) == "healthy"
    for odd in ({"usage": None}, {"usage": {"store": "full"}}, {"usage": {"store": {"state": 3}}}, None):
        assert trouble(odd) == "" and why(odd) == ""
