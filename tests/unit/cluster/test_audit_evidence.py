"""What the audit chain's evidence checks find (floydd.cluster.audit_evidence): a chain cut
short or rewritten with every later hash recomputed passes verify() but not a recorded head,
another box's head at the same seq, the store's head record, or the entries a replay derives."""

from __future__ import annotations

import pytest

from floydd.cluster.state.audit import GENESIS, entry_hash, make_entry, verify
from floydd.cluster.audit_evidence import (Head, StartCheck, Tamper, check_head, compare_head, first_bad,
                                           marker_finding, parse_head)
from floydd.errors import UserError


def _chain(n: int, who: str = "alice") -> list[dict]:
    out, prev = [], None
    for i in range(n):
        prev = make_entry({"op": "job.delete", "job": f"p/{i}", "user": who if i != 2 else "bob",
                           "ts": 1000.0 + i, "proposer": "n1"}, None, 10 + 2 * i, prev)
        out.append(prev)
    return out


def _rewritten(chain: list[dict], at: int, **fields) -> list[dict]:
    """``chain`` with entry ``at`` (0-based) changed and every hash from there recomputed: whole."""
    out = [dict(e) for e in chain]
    out[at].update(fields)
    for i in range(at, len(out)):
        if i > 0:
            out[i]["prev"] = out[i - 1]["hash"]
        out[i]["hash"] = entry_hash(out[i])
    return out


# -- a head an auditor recorded -----------------------------------------------------------------

def test_parse_head_takes_what_audit_head_prints_and_refuses_the_rest_plainly():
    chain = _chain(3)
    assert parse_head(f"3:{chain[2]['hash']}") == Head(seq=3, hash=chain[2]["hash"])
    assert parse_head(f" {chain[2]['hash'].upper()} ") == Head(seq=0, hash=chain[2]["hash"])
    assert parse_head(f"sha256:{chain[2]['hash']}").seq == 0
    for bad in ("", "3:abc", f"x:{chain[2]['hash']}", f"-1:{chain[2]['hash']}", chain[2]["hash"][:63],
                f"1234567890123456789:{chain[2]['hash']}"):
        with pytest.raises(UserError) as err:
            parse_head(bad)
        assert err.value.code == "bad_head" and "SEQ:HASH" in err.value.hint


def test_a_chain_cut_short_passes_verify_but_not_the_head_recorded_before():
    chain = _chain(6)
    head = Head.of(chain[-1])
    assert check_head(chain, head) == (6, None)
    cut = chain[:4]
    assert verify(cut) == (4, None)                      # the hole the issue found
    position, finding = check_head(cut, head)
    assert position == 5
    assert finding == ("the chain ends at entry 4, before the recorded head, entry 6: entries 5 to 6 were "
                       "removed (cut off the end)")


def test_a_rewrite_with_every_later_hash_recomputed_passes_verify_but_not_the_recorded_head():
    chain = _chain(6)
    bad = _rewritten(chain, 2, who="mallory")
    assert verify(bad) == (6, None)
    position, finding = check_head(bad, Head.of(chain[4]))    # a head recorded at entry 5, the chain went on
    assert position == 5
    assert finding.startswith("entry 5 (job.delete by alice at ") and "is not the recorded head" in finding
    assert "rewritten" in finding
    # the head given by its hash alone: no entry of the rewritten chain has it
    position, finding = check_head(bad, Head(seq=0, hash=chain[4]["hash"]))
    assert position == 7 and finding.startswith("no entry has the recorded head's hash")
    assert check_head(chain, Head(seq=0, hash=chain[4]["hash"])) == (6, None)


def test_a_chain_that_grew_past_the_recorded_head_is_fine_and_an_edit_before_it_is_named_first():
    chain = _chain(6)
    assert check_head(chain, Head.of(chain[2])) == (6, None)
    edited = [dict(e) for e in chain]
    edited[1]["who"] = "eve"                             # no hashes recomputed: verify names it
    position, finding = check_head(edited, Head.of(chain[3]))
    assert position == 2 and finding.startswith("entry 2 (job.delete by eve") and "edited" in finding
    edited = [dict(e) for e in chain]
    edited[5]["who"] = "eve"                             # after the head: still found, after the head holds
    position, finding = check_head(edited, Head.of(chain[3]))
    assert position == 6 and "entry 6" in finding


# -- another box's head, at the same seq --------------------------------------------------------

def test_a_box_behind_agrees_at_its_own_seq_and_a_box_with_another_chain_differs():
    chain = _chain(6)
    ours = Head.of(chain[-1])
    assert compare_head(Head.of(chain[2]).wire(), chain[2], ours) is None        # behind, not different
    line = compare_head({"seq": 3, "hash": "f" * 64}, chain[2], ours)
    assert line.startswith("its entry 3 has hash ffffffffffff..., this box's ") and "entry 3 (job.delete" in line
    assert "past this box's newest, 6" in compare_head({"seq": 9, "hash": "a" * 64}, None, ours)
    assert "lacks" in compare_head({"seq": 4, "hash": "a" * 64}, None, ours)
    assert compare_head({"seq": 0, "hash": GENESIS}, None, Head.of(None)) is None
    assert compare_head({"seq": 0, "hash": GENESIS}, None, ours) == "it holds no entry where this box holds 6"


# -- the store's head record -------------------------------------------------------------------

def test_the_head_record_finds_a_tail_cut_off_and_a_rehashed_rewrite_before_it():
    chain = _chain(6)
    written = Head.of(chain[-1])
    assert marker_finding(written, chain[-1], Head.of(chain[-1])) is None
    assert marker_finding(None, None, Head.of(chain[3])) is None                   # a store from before the record
    cut = marker_finding(written, None, Head.of(chain[3]))
    assert cut == Tamper(seq=5, what="the stored chain ends at entry 4, but it held entry 6 when last written: "
                                     "entries 5 to 6 were removed")
    assert marker_finding(written, None, None).seq == 1
    bad = _rewritten(chain, 1, who="mallory")
    found = marker_finding(written, bad[-1], Head.of(bad[-1]))
    assert found.seq == 6 and "rewritten" in found.what and "is not the entry 6 written last" in found.what


# -- the start check ---------------------------------------------------------------------------

def _check(stored: list, *, after: int = 0, written: int | None = None) -> StartCheck:
    written = stored[-1]["index"] if written is None and stored else (written or 0)
    return StartCheck(after=after, stored={e["index"] if isinstance(e, dict) else 99: e for e in stored},
                      verified=first_bad(stored), marker=None, written=written)


def _replay(check: StartCheck, derived: list[dict]) -> list[Tamper]:
    for entry in derived:
        check.derived(entry)
    return check.findings(max(e["index"] for e in derived))


def test_an_untouched_chain_and_one_whose_last_entries_were_never_written_find_nothing():
    chain = _chain(5)
    assert _replay(_check(chain), chain) == []
    # a crash between applying the last entries and writing them: the replay makes them again
    assert _replay(_check(chain[:3]), chain) == []


def test_an_edited_stored_entry_is_named_with_what_was_changed_and_reported_once():
    chain = _chain(5)
    stored = [dict(e) for e in chain]
    stored[3]["who"] = "mallory"
    check = _check(stored)
    found = _replay(check, chain)
    assert [t.seq for t in found] == [4, 4]
    assert found[0].what.startswith("entry 4 (job.delete by mallory at ")    # the replay's says what changed...
    assert found[0].what.endswith("differs from the entry the raft log makes (who: stored 'mallory', derived 'alice')")
    assert "its hash does not match" in found[1].what                  # ...verify's finding beside it
    assert check.findings(100) == []                                   # each said once


def test_a_rewrite_that_recomputed_every_later_hash_is_named_at_the_entry_rewritten():
    chain = _chain(6)
    stored = _rewritten(chain, 2, who="mallory")
    found = _replay(_check(stored), chain)
    assert [t.seq for t in found][:1] == [3]
    assert "entry 3 (job.delete by mallory" in found[0].what and "who: stored 'mallory', derived 'bob'" in found[0].what
    assert len(found) == 4                                             # every later entry differs in its hashes


def test_a_removed_tail_is_found_by_the_head_record_and_an_added_row_as_one_the_log_never_made():
    chain = _chain(5)
    found = _replay(_check(chain[:3], written=chain[-1]["index"]), chain)
    assert [t.seq for t in found] == [4, 5]
    assert found[0].what.startswith("entry 4 (job.delete by alice") and "removed from the stored chain" in found[0].what
    forged = dict(chain[1], index=chain[1]["index"] + 1, who="mallory")
    check = StartCheck(after=0, stored={e["index"]: e for e in [*chain, forged]}, verified=None, marker=None,
                       written=chain[-1]["index"])
    found = _replay(check, chain)
    assert len(found) == 1 and "which the raft log does not make (added)" in found[0].what


def test_entries_before_the_snapshot_are_not_compared_and_later_ones_wait_until_applied():
    chain = _chain(6)
    stored = [dict(e) for e in chain]
    stored[1]["who"] = "mallory"                       # before the snapshot: only verify can say
    stored[5]["who"] = "mallory"                       # past the commit index on disk
    check = StartCheck(after=chain[2]["index"], stored={e["index"]: e for e in stored[3:]}, verified=None,
                       marker=None, written=chain[-1]["index"])
    for entry in chain:
        check.derived(entry)
    assert check.findings(chain[4]["index"]) == [] and check.pending == chain[5]["index"]
    found = check.findings(chain[5]["index"])
    assert [t.seq for t in found] == [6] and check.pending == 0
