"""Evidence that an audit chain was changed, where :func:`~floydd.cluster.state.audit.verify` alone
cannot tell: a chain rewritten with every later hash recomputed, or cut short, is whole.

Three references outside the stored chain catch it, each a pure check here:

- **the raft log, at start** (:class:`StartCheck`): the entries a box derives again from its
  log while replaying it, compared with the copy it had stored, entry by entry; and the *head
  record* its store wrote with every batch of entries (seq, hash and log index of the newest),
  compared with the stored chain's entry at that index (a chain cut short, or rewritten
  before the replayed part, has another entry there or none);
- **a head an auditor recorded** (:func:`check_head`, ``floydd audit verify --head SEQ:HASH``):
  the chain must hold that very entry at that seq and be whole up to it;
- **another box's head** (:func:`compare_head`): each box says its head with its heartbeat,
  and every box compares it with its own entry *at the same seq* (boxes apply at different
  speeds; by the time a heartbeat is applied, the box applying it holds every entry the
  sender had, so "none at that seq" is a difference too).

A :class:`Tamper` names the first entry found to differ (its seq), as a log line, ``floydd
status`` and the ``audit.tamper`` entry say it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from floydd.cluster.state.audit import GENESIS, describe, verify
from floydd.errors import UserError

__all__ = ["Head", "Tamper", "StartCheck", "check_head", "compare_head", "marker_finding", "parse_head",
           "first_bad"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_SEQ = re.compile(r"[0-9]{1,18}")
_SHOWN = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class Head:
    """The newest entry of a chain (seq 0 and the genesis hash: no entry yet); ``index`` is its
    raft log index, ``ts`` its time (0 where not known)."""

    seq: int
    hash: str
    index: int = 0
    ts: float = 0.0

    @classmethod
    def of(cls, entry: Mapping[str, Any] | None) -> "Head":
        if entry is None:
            return cls(seq=0, hash=GENESIS)
        seq, digest, index, ts = (entry.get(k) for k in ("seq", "hash", "index", "ts"))   # as stored: maybe edited
        return cls(seq=seq if type(seq) is int else 0, hash=digest if isinstance(digest, str) else "",
                   index=index if type(index) is int else 0,
                   ts=float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else 0.0)

    @property
    def text(self) -> str:
        """``SEQ:HASH``: what ``floydd audit head`` prints and ``verify --head`` takes."""
        return f"{self.seq}:{self.hash}"

    def wire(self) -> dict:
        """What a heartbeat carries (``node.health``'s ``audit_head``)."""
        return {"seq": self.seq, "hash": self.hash}


@dataclass(frozen=True, slots=True, kw_only=True)
class Tamper:
    """A stored chain found to differ: the first differing entry's ``seq`` and one line on it."""

    seq: int
    what: str


def parse_head(text: str) -> Head:
    """``SEQ:HASH`` (or ``HASH`` alone) as an auditor wrote it down; UserError otherwise."""
    seq_text, _, digest = text.strip().rpartition(":")
    digest = digest.lower().removeprefix("sha256")
    if seq_text.lower() == "sha256":
        seq_text = ""
    if not _HEX64.fullmatch(digest) or seq_text and not _SEQ.fullmatch(seq_text):
        raise UserError(f"{text[:80]!r} is not an audit head", code="bad_head",
                        hint="give SEQ:HASH as floydd audit head printed it (e.g. 42:9f2c...: all 64 hex digits)")
    return Head(seq=int(seq_text) if seq_text else 0, hash=digest)


def check_head(entries: list[Any], head: Head) -> tuple[int, str | None]:
    """:func:`~floydd.cluster.state.audit.verify`, and that the chain holds ``head`` at its seq (a
    head given without one: anywhere). ``(count, None)`` when both hold; else the position of
    the first bad entry (one past the end when the chain was cut before the head) and a line."""
    count, finding = verify(entries)
    seq = head.seq or next((i for i, e in enumerate(entries, 1) if isinstance(e, dict) and e.get("hash") == head.hash),
                           0)
    if finding is not None and (seq == 0 or count <= seq):
        return count, finding                   # the first bad entry is at or before the head
    if head.seq == 0 and seq == 0:
        return len(entries) + 1, (f"no entry has the recorded head's hash {head.hash[:16]}...: the chain was "
                                  "rewritten or cut short before it (give SEQ:HASH to learn which)")
    if seq > len(entries):
        return len(entries) + 1, (f"the chain ends at entry {len(entries)}, before the recorded head, entry {seq}: "
                                  f"entries {len(entries) + 1} to {seq} were removed (cut off the end)")
    entry = entries[seq - 1]
    if entry["hash"] != head.hash:
        return seq, (f"{describe(entry)} is not the recorded head (hash {entry['hash'][:16]}..., recorded "
                     f"{head.hash[:16]}...): it or an entry before it was rewritten, the hashes after recomputed")
    return count, finding


def compare_head(reported: Mapping[str, Any], ours: Mapping[str, Any] | None, our_head: Head) -> str | None:
    """Another box's reported head against this box's entry at the same seq (``ours``, None:
    none) and this box's head: None when they agree, else a line on how they differ."""
    seq, digest = reported.get("seq"), reported.get("hash")
    if seq == 0:
        return None if our_head.seq == 0 else f"it holds no entry where this box holds {our_head.seq}"
    if ours is None:
        return (f"it holds entry {seq}, past this box's newest, {our_head.seq}: entries this box never made"
                if seq > our_head.seq else f"it holds entry {seq}, which this box's chain lacks")
    if ours.get("hash") != digest:
        return (f"its entry {seq} has hash {str(digest)[:12]}..., this box's {str(ours.get('hash'))[:12]}... "
                f"({describe(ours)} here)")
    return None


def marker_finding(marker: Head | None, at_marker: Any, last: Head | None) -> Tamper | None:
    """The store's head record (``marker``: the newest entry it wrote) against the stored entry
    at that log index (``at_marker``) and the stored chain's last entry (``last``)."""
    if marker is None or marker.seq == 0:
        return None
    if at_marker is None:
        if last is None or last.index < marker.index:
            ends = "holds no entry" if last is None else f"ends at entry {last.seq}"
            return Tamper(seq=(last.seq if last else 0) + 1,
                          what=f"the stored chain {ends}, but it held entry {marker.seq} when last written: "
                               f"entries {(last.seq if last else 0) + 1} to {marker.seq} were removed")
        return Tamper(seq=marker.seq, what=f"entry {marker.seq}, once stored at log index {marker.index}, is missing")
    if not isinstance(at_marker, dict) or at_marker.get("hash") != marker.hash or at_marker.get("seq") != marker.seq:
        return Tamper(seq=marker.seq,
                      what=f"{describe(at_marker)} is not the entry {marker.seq} written last (hash "
                           f"{str(at_marker.get('hash') if isinstance(at_marker, dict) else '?')[:12]}..., written "
                           f"{marker.hash[:12]}...): it or an entry before it was rewritten, the hashes after "
                           "recomputed")
    return None


class StartCheck:
    """A box's stored chain at start against what its replay derives.

    Made before the replay from what was stored: every entry after the snapshot (``stored``,
    log index -> entry as stored, text where not JSON), the finding of
    :func:`~floydd.cluster.state.audit.verify` over the whole stored chain (``verified``, with the
    entry's seq) and of :func:`marker_finding` (``marker``; ``written`` is the index of the
    newest entry the store had written, 0: it kept no record). Then :meth:`derived` sees each
    entry the replay makes and :meth:`findings` compares up to a log index."""

    def __init__(self, *, after: int, stored: Mapping[int, Any], verified: Tamper | None, marker: Tamper | None,
                 written: int) -> None:
        self.after = after
        self._stored = dict(stored)
        self._derived: dict[int, dict] = {}
        self._early = [t for t in (verified, marker) if t is not None]
        self._written = written
        self._limit = max([after, written, *self._stored])

    def found(self, tamper: Tamper) -> None:
        """A difference found by a check made beside this one (verify over the whole chain)."""
        self._early.append(tamper)

    @property
    def pending(self) -> int:
        """The highest log index still to compare (0: nothing left)."""
        return max(self._stored, default=0)

    def derived(self, entry: dict) -> None:
        """An entry the replay (or a later apply) made; kept only while something stored is
        still to be compared with it."""
        if self.after < entry["index"] <= self._limit:
            self._derived[entry["index"]] = entry

    def findings(self, upto: int) -> list[Tamper]:
        """Every difference up to log index ``upto`` (all applied), by seq (at one seq the
        replay's comparison, which says what changed, before the stored chain's own checks);
        each said once."""
        out, early, self._early = [], self._early, []
        for index in sorted({i for i in (*self._stored, *self._derived) if i <= upto}):
            stored, derived = self._stored.pop(index, None), self._derived.pop(index, None)
            if stored is None:
                if index <= self._written:
                    out.append(Tamper(seq=derived["seq"], what=f"{describe(derived)} is in the raft log but was "
                                                               "removed from the stored chain"))
            elif derived is None:
                out.append(Tamper(seq=stored.get("seq", 0) if isinstance(stored, dict) else 0,
                                  what=f"the stored chain has {describe(stored)} at log index {index}, which the "
                                       "raft log does not make (added)"))
            elif stored != derived:
                out.append(Tamper(seq=derived["seq"], what=f"{describe(stored)} differs from the entry the raft log "
                                                           f"makes ({_fields(stored, derived)})"))
        return sorted(out + early, key=lambda t: t.seq)


def _fields(stored: Any, derived: dict) -> str:
    """``who: stored 'mallory', derived 'alice'; ...``: the fields that differ (three at most)."""
    if not isinstance(stored, dict):
        return "the stored one is not JSON"
    names = [k for k in sorted(set(stored) | set(derived)) if stored.get(k) != derived.get(k)]
    shown = [n for n in names if n not in ("hash", "prev")] or names
    said = "; ".join(f"{n}: stored {_short(stored.get(n))}, derived {_short(derived.get(n))}" for n in shown[:3])
    return said + (f"; and {len(shown) - 3} more" if len(shown) > 3 else "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def first_bad(entries: Iterable[Any]) -> Tamper | None:
    """:func:`~floydd.cluster.state.audit.verify` of a stored chain as a :class:`Tamper`."""
    position, finding = verify(entries)
    return None if finding is None else Tamper(seq=position, what=finding)
