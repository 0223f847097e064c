"""The audit chain: who changed what, when and from which box, hash-chained (DESIGN §5b).

Why derived on apply: every box applies the same committed commands in the same order, so
each derives the same entries with the same hashes; nobody proposes an audit entry, so none
can be forged by a box, and the chain is on every box (a box's copy edited is told apart by
comparing it with another's, and by :func:`verify` on its own).

The chain begins where the cluster's level reaches 2 (:mod:`floydd.cluster.state.versions`:
an 0.1 box derives no entries, so before every box is upgraded the boxes' chains could not
agree); from then on an entry is made for every applied command that is a change made by a
person or an operator; routine reports (:data:`ROUTINE`: heartbeats, placements, a box's state reports,
holders) make none. An op this module does not know (a new one) is audited: leaving an
entry out must be a decision. An entry::

    seq    1, 2, ... (no gaps)          index  the raft log index of its command
    prev   the previous entry's hash    hash   sha256 of the canonical form of the rest
    who    the person (``user``) or ``node:<id>``    box  the proposer's node id
    op     the command's op             what   a compact summary (no secrets, no specs)
    ts     the command's ts (its proposer's clock)

Canonical form: JSON with sorted keys, ``(",", ":")`` separators, UTF-8, of the entry
without ``hash``; the first entry's ``prev`` is 64 zeros. An auditor checks an export
(JSON lines, one entry each, in seq order) with :func:`verify` or by hand (docs/operations.md,
"The audit log").

Pure; :class:`MemoryAudit` keeps the chain in memory (tests, the simulator, offline tools),
the daemon's nodes keep it in ``raft.db`` (:class:`floydd.cluster.tables.audit_db.SqliteAudit`),
shipped beside a snapshot like the archive (chunks tagged ``{"audit": rows}``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, AsyncIterator, Callable, Iterable

import msgpack

from floydd.cluster.state.versions import OP as LEVEL_OP, at_least

__all__ = ["GENESIS", "ROUTINE", "MemoryAudit", "AuditRules", "make_entry", "entry_hash", "verify",
           "describe", "summary", "canonical", "decode_audit_chunk", "is_audit_chunk", "SplitSink"]

GENESIS = "0" * 64
ROUTINE = frozenset({"node.health", "job.place", "job.archive", "project.reserve", "dataset.holders",
                     "node.cert", "code.holders"})
"""Ops that are never a person's or an operator's change (``job.update`` and ``node.upsert``:
see :func:`audited`)."""
_SECRET = frozenset({"secret_sha256", "secret", "token", "token_sha256", "password"})
_SKIP = frozenset({"op", "ts", "term", "proposer", "v", "spec", "procs", "resources", "labels", "usage", "summary",
                   "files", "parts", "silent"}) | _SECRET
_EXPORT_ROWS = 1000


def audited(cmd: dict, known_nodes: dict) -> bool:
    """Whether applying ``cmd`` makes an entry (asked before it is applied)."""
    op = cmd["op"]
    if op in ROUTINE:
        return False
    if op == "job.update":                 # a box's report, unless a person asked (a stop)
        return "user" in cmd or "stop_requested" in cmd
    if op == "node.upsert":                # every start says it again; a join or a new config is news
        known = known_nodes.get(cmd["id"])
        return known is None or "config" in cmd and cmd["config"] != known.get("config", "")
    return True


def summary(cmd: dict, result: Any = None) -> str:
    """A short line of the command's fields that say what changed (no secrets, no bulk)."""
    parts = []
    if cmd["op"] == "job.submit" and isinstance(result, dict) and isinstance(result.get("id"), str):
        parts.append(f"job={result['id']}")
    for key in sorted(cmd):
        value = cmd[key]
        if key in _SKIP or key in ("user",) or not isinstance(value, (str, int, float, bool)) or value is None:
            continue
        parts.append(f"{key}={str(value)[:120]}")
    return " ".join(parts)[:600]


def canonical(entry: dict) -> bytes:
    """The bytes an entry's hash is taken over: sorted JSON of every field but ``hash``."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def entry_hash(entry: dict) -> str:
    return hashlib.sha256(canonical(entry)).hexdigest()


def make_entry(cmd: dict, result: Any, index: int, prev: dict | None) -> dict:
    """The entry for ``cmd`` (applied at log ``index``) after ``prev`` (None: the first)."""
    proposer = cmd.get("proposer") or ""
    who = cmd.get("user") or cmd.get("by") or cmd.get("made_by") or (f"node:{proposer}" if proposer else "?")
    entry = {"seq": 1 if prev is None else prev["seq"] + 1, "index": index,
             "prev": GENESIS if prev is None else prev["hash"], "who": str(who), "box": proposer,
             "op": cmd["op"], "what": summary(cmd, result), "ts": cmd["ts"]}
    entry["hash"] = entry_hash(entry)
    return entry


def describe(entry: Any) -> str:
    """How an entry is named in a finding: ``entry 17 (job.delete by bob at 2026-...)``."""
    import datetime as _dt        # formatting only; the pure part never reads the clock
    if not isinstance(entry, dict):
        return "an entry that is not an object"
    try:
        when = _dt.datetime.fromtimestamp(float(entry.get("ts")), _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError):
        when = "an unreadable time"
    return f"entry {entry.get('seq')} ({entry.get('op')} by {entry.get('who')} at {when})"


def verify(entries: Iterable[Any]) -> tuple[int, str | None]:
    """Check a chain in seq order: (how many entries, None) if whole, else (the position of
    the first bad one, 1-based, and a line naming it and what is wrong with it)."""
    prev_hash, n = GENESIS, 0
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("hash"), str):
            return n, f"entry at position {n}: not an audit entry"
        if entry_hash(entry) != entry["hash"]:                 # (named only when bad: a start reads them all)
            return n, f"{describe(entry)}: its hash does not match its contents (edited)"
        if entry.get("seq") != n:
            return n, (f"{describe(entry)}: found where entry {n} belongs "
                       f"({'entries before it are missing' if isinstance(entry.get('seq'), int) and entry['seq'] > n else 'out of order'})")
        if entry.get("prev") != prev_hash:
            return n, f"{describe(entry)}: its previous hash does not match entry {n - 1} (an entry before it was changed)"
        prev_hash = entry["hash"]
    return n, None


class AuditRules:
    """What both stores derive from ``_last_before(index)`` and ``_put(entry)``."""

    _last: dict | None = None

    def around(self, state: Any, cmd: dict, index: int, apply: Callable[[], Any]) -> Any:
        """Apply ``cmd`` (``apply()``), and if it is a person's or an operator's change that
        took, chain its entry: the state machine's one call."""
        wanted = audited(cmd, state.nodes) and at_least(state, 2)
        result = apply()
        if wanted or cmd["op"] == LEVEL_OP:       # the chain starts where level 2 is switched on
            last = self._last if self._last is not None and self._last["index"] < index else self._last_before(index)
            self._last = make_entry(cmd, result, index, last)
            self._put(self._last)
        return result

    def installed(self, index: int, term: int) -> None:
        self._last = None

    # what a store that outlives the process compares at start (floydd.cluster.tables.audit_db); a
    # chain in memory starts empty, so there is nothing to compare
    check_pending = 0

    def starting(self, after: int) -> None:
        """Before a replay: note the chain as stored (``after``: the snapshot's log index)."""

    def start_findings(self, upto: int) -> list:
        return []

    def verify_stored(self) -> None:
        pass

    def end_check(self) -> None:
        pass


class MemoryAudit(AuditRules):
    """The chain in memory (tests, the simulator, offline tools)."""

    def __init__(self) -> None:
        self._entries: dict[int, dict] = {}
        self._incoming: tuple[int, int, list[dict]] | None = None

    def _put(self, entry: dict) -> None:
        self._entries[entry["index"]] = entry

    def _last_before(self, index: int) -> dict | None:
        before = [i for i in self._entries if i < index]
        return self._entries[max(before)] if before else None

    def entries(self, since: float | None = None) -> list[dict]:
        return [dict(e) for _, e in sorted(self._entries.items()) if since is None or e["ts"] >= since]

    async def page(self, since: float | None = None) -> list[dict]:
        """:meth:`entries`, as the SQLite chain answers a listing."""
        return self.entries(since)

    def head(self) -> Any:
        """The newest entry (:class:`~floydd.cluster.audit_evidence.Head`), as the SQLite chain says it."""
        from floydd.cluster.audit_evidence import Head      # it builds on this module
        return Head.of(self._entries[max(self._entries)] if self._entries else None)

    def entry_at_seq(self, seq: int) -> dict | None:
        return next((e for e in self._entries.values() if e["seq"] == seq), None)

    @property
    def dirty(self) -> bool:
        return False

    async def flush(self, run: Any) -> None:
        pass

    async def export(self) -> AsyncIterator[bytes]:
        rows = [(i, e["seq"], json.dumps(e, sort_keys=True)) for i, e in sorted(self._entries.items())]
        for i in range(0, len(rows), _EXPORT_ROWS):
            yield msgpack.packb({"audit": rows[i:i + _EXPORT_ROWS]}, use_bin_type=True)

    def receive(self, index: int, term: int, run: Any) -> "_MemorySink":
        return _MemorySink(self, index, term)

    def saved(self, db: Any, snapshot: Any) -> None:
        pass

    def installed(self, index: int, term: int) -> None:
        super().installed(index, term)
        incoming, self._incoming = self._incoming, None
        if incoming is not None and incoming[:2] == (index, term):
            self._entries = {e["index"]: e for e in incoming[2]}

    def close(self) -> None:
        pass


class _MemorySink:
    def __init__(self, audit: MemoryAudit, index: int, term: int) -> None:
        self._audit, self._staged = audit, (index, term, [])

    async def add(self, chunk: bytes) -> None:
        self._staged[2].extend(json.loads(row[2]) for row in decode_audit_chunk(chunk))

    async def finish(self) -> None:
        self._audit._incoming = self._staged


def is_audit_chunk(chunk: bytes) -> bool:
    """An audit chunk is a msgpack map (``{"audit": rows}``); an archive chunk is an array."""
    return bool(chunk) and (0x80 <= chunk[0] <= 0x8f or chunk[0] in (0xde, 0xdf))


def decode_audit_chunk(chunk: bytes) -> list[tuple[int, int, str]]:
    """The rows (index, seq, entry JSON) of a chunk from a peer, each checked against its entry."""
    out = []
    for row in msgpack.unpackb(chunk, raw=False)["audit"]:
        index, seq, text = row
        entry = json.loads(text)
        if not (type(index) is int and entry.get("index") == index and entry.get("seq") == seq):
            raise ValueError(f"audit row {index!r:.40} does not match its entry")
        out.append((index, seq, text))
    return out


class SplitSink:
    """A snapshot's sink for the archive's chunks and the audit's, told apart by their tag."""

    def __init__(self, archive_sink: Any, audit_sink: Any) -> None:
        self._archive, self._audit = archive_sink, audit_sink

    async def add(self, chunk: bytes) -> None:
        await (self._audit if is_audit_chunk(chunk) else self._archive).add(chunk)

    async def finish(self) -> None:
        await self._archive.finish()
        await self._audit.finish()
