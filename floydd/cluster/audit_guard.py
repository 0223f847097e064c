"""The audit chain's evidence on a running box: what its start found, and other boxes' heads.

A part of :class:`~floydd.cluster.service.ClusterService` (its ``audit_guard``), given what it
uses. Two duties (the checks themselves are pure, :mod:`floydd.cluster.audit_evidence`):

**At start** (:meth:`AuditGuard.check_at_start`, a task of the service). The store read the
chain as it was stored before the replay (:meth:`SqliteAudit.starting
<floydd.cluster.tables.audit_db.SqliteAudit.starting>`); once this box has applied its log up to the
commit index it had on disk (and, for rows written past it, those entries too), what differs
is reported loudly, once::

    the copy as found    -> STATE/cluster/audit-tampered-<UTC time>.jsonl (JSON lines, as
                            floydd audit export writes them: floydd audit verify --file reads it)
    an ERROR log line    naming the first differing entry and where the copy is
    floydd status        this box's warning (/v1/info ``audit_warnings``) while it runs
    the chain itself     an ``audit.tamper`` {box, first_seq, what} entry, proposed by this box
                         (level 3; tried again until the cluster takes it)

The entries after the last snapshot are written again from the raft log by the replay (the
log is the record); older ones cannot be derived again here and stay as found, so ``floydd
audit verify`` keeps naming an edit there.

**Heads** (every box). Each heartbeat carries its sender's chain head (``audit_head``,
:mod:`floydd.cluster.upkeep`); :meth:`AuditGuard.view` compares a box's last reported head
with this box's entry at the same seq, for ``floydd members`` and ``floydd status``; the
leader also logs when a box starts (or stops) differing from its chain, as it applies the
heartbeat.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from floydd import log
from floydd.cluster.driver.applied import Applied
from floydd.cluster.audit_evidence import Tamper, compare_head
from floydd.errors import Conflict, FloyddError, Forbidden

__all__ = ["AuditGuard"]

_log = log.cluster.getChild("audit")
OP = "audit.tamper"


class AuditGuard:
    """See the module docstring. ``driver``: the raft driver (its status, ``on_apply`` and
    whether it leads); ``state``: the replicated state (its ``audit`` store, its nodes);
    ``propose``: how this box proposes a command; ``folder``: where the copy found is kept."""

    def __init__(self, *, node_id: str, driver: Any, state: Any, propose: Callable[..., Awaitable[Any]],
                 folder: Path, clock: Callable[[], float] = time.time, retry: float = 5.0) -> None:
        self._node_id, self._driver, self._state = node_id, driver, state
        self._propose, self._folder, self._clock, self._retry = propose, folder, clock, retry
        self.found: Tamper | None = None
        """The first difference this box's start found in its stored chain (None: none)."""
        self.kept: Path | None = None
        """Where the chain as found was kept (None: nowhere, or nothing found)."""
        self.checked = False
        """Whether the start check has compared everything it read (found or not)."""
        self.recorded = False
        """Whether the ``audit.tamper`` entry is in the chain."""
        self._differs: dict[str, str] = {}          # node id -> how its head differs (the leader's log)
        self._progress = asyncio.Event()
        driver.on_apply(self._applied)

    # -- at start --------------------------------------------------------------------------------

    async def check_at_start(self) -> None:
        """Compare the chain as stored with what the replay derives; report a difference."""
        audit = self._state.audit
        try:
            upto = self._driver.status().commit
            try:
                await asyncio.to_thread(audit.verify_stored)   # the whole chain, off the start's path
            except Exception as exc:                           # sqlite3's errors: a damaged file is repair's
                _log.error("[%s] could not read the stored audit chain to check it: %s", self._node_id, exc)
            await self._until(upto)
            findings = audit.start_findings(upto)
            while not findings and audit.check_pending:     # rows written past the commit on disk
                upto = audit.check_pending
                await self._until(upto)
                findings = audit.start_findings(upto)
            if findings:
                await self._keep(findings)
            self.checked = True
        finally:
            audit.end_check()
        if findings:
            await self._record(findings[0])

    async def _keep(self, findings: list[Tamper]) -> None:
        first = findings[0]
        self.found = first
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock()))
        dest = self._folder / f"audit-tampered-{stamp}.jsonl"
        n = 1
        while dest.exists():                        # never over an earlier copy
            n += 1
            dest = self._folder / f"audit-tampered-{stamp}-{n}.jsonl"
        try:
            count = await asyncio.to_thread(self._state.audit.keep_aside, dest)
            self.kept = dest
            where = f"the chain as found is kept in {dest} ({count} entries; floydd audit verify --file reads it)"
        except (OSError, AttributeError) as exc:
            where = f"the chain as found could not be kept ({exc})"
        others = len(findings) - 1
        more = f" (and {others} more difference{'s' if others > 1 else ''})" if others else ""
        _log.error("[%s] AUDIT CHAIN EDITED ON DISK: this box's stored audit chain differs from what its raft log "
                   "makes: %s%s; %s. The entries after the last snapshot are written again from the log; older "
                   "ones stay as found: compare them with another box's (floydd audit export)",
                   self._node_id, first.what, more, where)

    async def _record(self, first: Tamper) -> None:
        """Propose ``audit.tamper`` until the cluster takes it (a cluster below level 3: once it is)."""
        cmd = {"op": OP, "box": self._node_id, "first_seq": max(first.seq, 0), "what": first.what[:1000]}
        said = False
        while True:
            try:
                await self._propose(cmd, timeout=2 * self._retry)
                self.recorded = True
                _log.warning("[%s] the edit of this box's stored audit chain is recorded in the chain (%s)",
                             self._node_id, OP)
                return
            except Forbidden as exc:
                _log.error("[%s] recording the edit of the audit chain was refused: %s", self._node_id, exc)
                return
            except Conflict as exc:
                if not said:
                    said = True
                    _log.warning("[%s] the edit of the audit chain is not in the chain yet: %s (%s)", self._node_id,
                                 exc, exc.hint)
            except FloyddError as exc:
                _log.debug("[%s] recording the edit of the audit chain: %s (trying again)", self._node_id, exc)
            await asyncio.sleep(self._retry)

    async def _until(self, index: int) -> None:
        while self._driver.status().applied < index:
            self._progress.clear()
            await self._progress.wait()

    # -- heads -------------------------------------------------------------------------------------

    def _applied(self, event: Applied) -> None:
        self._progress.set()
        cmd = event.command
        if cmd is None or event.error is not None or cmd.get("op") != "node.health" or "audit_head" not in cmd \
                or event.replay or not self._driver.is_leader:
            return
        box, line = cmd["id"], self._compare(cmd["audit_head"])
        if line == self._differs.get(box):
            return
        name = (self._state.nodes.get(box) or {}).get("name") or box
        if line is None:
            self._differs.pop(box, None)
            _log.warning("[%s] %s's audit chain agrees with the leader's again", self._node_id, name)
        else:
            self._differs[box] = line
            _log.error("[%s] AUDIT CHAIN DIFFERS: box %s (%s) holds another audit chain than the leader's: %s",
                       self._node_id, name, box, line)

    def _compare(self, head: dict) -> str | None:
        audit = self._state.audit
        try:
            ours, at_seq = audit.head(), audit.entry_at_seq(head["seq"])
        except sqlite3.Error:
            ours = None
        if ours is None:                             # this box's table cannot be read now: no verdict
            return None
        return compare_head(head, at_seq, ours)

    def view(self, node_id: str) -> dict:
        """For ``floydd members``: the head ``node_id`` last reported (``SEQ:HASH``) and how it
        differs from this box's chain (None: it agrees, or said none)."""
        head = (self._state.nodes.get(node_id) or {}).get("audit_head")
        if head is None:
            return {"audit_head": None, "audit_differs": None}
        return {"audit_head": f"{head['seq']}:{head['hash']}", "audit_differs": self._compare(head)}

    def warnings(self) -> list[str]:
        """What ``floydd status`` says: this box's stored chain found edited at start, and every
        box whose head differs from this box's chain."""
        out = []
        if self.found is not None:
            out.append(f"this box's stored audit chain was edited: {self.found.what}"
                       + (f"; the chain as found is kept in {self.kept}" if self.kept else "")
                       + ("" if self.recorded else "; not yet recorded in the chain"))
        for node_id in sorted(self._state.nodes):
            differs = self.view(node_id)["audit_differs"]
            if differs is not None:
                name = self._state.nodes[node_id].get("name") or node_id
                out.append(f"{name}'s audit chain differs from this box's: {differs}")
        return out
