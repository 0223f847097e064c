"""Applying what raft commits, for the raft driver: the state machine, then the hooks.

A mixin of :class:`~floydd.cluster.driver.loop.RaftDriver`, and :class:`Applied`, what its
``on_apply`` hooks see. Each committed entry is applied to the replicated
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
from floydd.cluster.raft import ConfChange, EntryKind
from floydd.errors import FloyddError, Forbidden, InternalError

__all__ = ["Applied", "AppliedMixin"]

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


class AppliedMixin:
    """Methods of RaftDriver that apply committed entries and tell the hooks."""

    def on_apply(self, callback: Callable[[Applied], None]) -> None:
        """Call ``callback`` (in the loop, synchronously: keep it short) for every applied entry."""
        self._on_apply.append(callback)

    def _apply(self, entries: tuple) -> None:
        for e in entries:
            event = None
            if e.kind == EntryKind.CONF_CHANGE:
                cc = ConfChange.decode(e.data)
                self._resolve(e, None, None)
                event = Applied(index=e.index, term=e.term, conf_change=cc, replay=e.index <= self._replay_until)
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
                                replay=e.index <= self._replay_until)
            else:
                self._resolve(e, None, None)
            self._applied = e.index
            if event is not None:
                self._emit(event)
        self._wake_readers()

    def _emit(self, event: Applied) -> None:
        for callback in self._on_apply:
            try:
                callback(event)
            except Exception:
                _log.exception("[%s] on_apply hook failed at %d", self.node_id, event.index)
