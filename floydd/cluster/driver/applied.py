"""Applying what raft commits, for the raft driver: the state machine, then the hooks.

:class:`Applier`, a part of :class:`~floydd.cluster.driver.loop.RaftDriver` (its ``applier``),
and :class:`Applied`, what its ``on_apply`` hooks see. Each committed entry is applied to the replicated
:class:`~floydd.cluster.state.machine.ClusterState` in log order, in the loop: a command's result
(or its refusal, the same on every node) answers the proposal waiting on that index
(:mod:`floydd.cluster.driver.proposals`), a membership change is logged, and then every hook is
called with the :class:`Applied` event (a failing hook is logged, never stops the loop).
Entries re-applied at start-up, up to the commit index on disk, are marked ``replay``; a
state replaced by the leader's snapshot is announced as ``restored``
(:mod:`floydd.cluster.driver.snapshots`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from floydd import log
from floydd.cluster.state import commands
from floydd.cluster.raft import ConfChange, Entry, EntryKind
from floydd.cluster.state.machine import ClusterState
from floydd.errors import FloyddError, Forbidden, InternalError

__all__ = ["Applied", "Applier"]

_log = log.cluster.getChild("driver")


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What an ``on_apply`` hook sees for each applied entry (or snapshot)."""

    index: int
    term: int
    command: dict | None = None          # None: a membership change or a restored snapshot
    result: Any = None
    error: FloyddError | None = None     # the state machine refused the command
    conf_change: ConfChange | None = None
    restored: bool = False               # the whole state was replaced by the leader's snapshot
    replay: bool = False
    """Re-applied at start-up, up to the commit index on disk. Entries applied before a
    crash past that index come again without the flag: hooks must be idempotent."""


class Applier:
    """Applies committed entries to ``state``, answers the proposal waiting on each
    (``resolve``: :meth:`Proposals.resolve <floydd.cluster.driver.proposals.Proposals.resolve>`)
    and tells the hooks. ``applied`` is how far the state got."""

    def __init__(self, node_id: str, state: ClusterState,
                 resolve: Callable[[Entry, Any, FloyddError | None], None]) -> None:
        self.node_id = node_id
        self.state = state
        self._resolve = resolve
        self._hooks: list[Callable[[Applied], None]] = []
        self.applied = 0
        self.replay_until = 0
        """Entries up to here are re-applied at start-up (the commit index on disk)."""

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """Call ``callback`` (in the loop, synchronously: keep it short) for every applied entry."""
        self._hooks.append(callback)

    def restored(self, index: int, term: int) -> None:
        """The state was replaced by a snapshot at ``index``: tell the hooks."""
        self.applied = index
        self._emit(Applied(index=index, term=term, restored=True))

    def apply(self, entries: tuple) -> None:
        for e in entries:
            event = None
            if e.kind == EntryKind.CONF_CHANGE:
                cc = ConfChange.decode(e.data)
                self._resolve(e, None, None)
                event = Applied(index=e.index, term=e.term, conf_change=cc, replay=e.index <= self.replay_until)
                _log.info("[%s] membership: %s %s (index %d)", self.node_id, cc.op.name.lower(), cc.node, e.index)
            elif e.data:
                result = error = cmd = None
                try:
                    cmd = commands.decode(e.data)
                    result = self.state.apply(cmd, index=e.index, term=e.term)
                except Forbidden as exc:     # the same refusal on every box: say who tried what
                    error = exc
                    _log.warning("[%s] refused entry %d (%s from %s): %s", self.node_id, e.index, cmd.get("op"),
                                 cmd.get("proposer"), exc)
                except FloyddError as exc:
                    error = exc
                except Exception as exc:     # a bug; deterministic, so the same on every node
                    _log.exception("[%s] applying entry %d failed", self.node_id, e.index)
                    error = InternalError(f"applying {e.index} failed: {type(exc).__name__}: {exc}")
                self._resolve(e, result, error)
                event = Applied(index=e.index, term=e.term, command=cmd, result=result, error=error,
                                replay=e.index <= self.replay_until)
            else:
                self._resolve(e, None, None)
            self.applied = e.index
            if event is not None:
                self._emit(event)

    def _emit(self, event: Applied) -> None:
        for callback in self._hooks:
            try:
                callback(event)
            except Exception:
                _log.exception("[%s] on_apply hook failed at %d", self.node_id, event.index)
