"""A small Porcupine-style linearizability checker for per-key registers.

Wing & Gong's search with Lowe's memoization (as Porcupine does): walk the history
in real-time order, try to linearize each pending call, backtrack on a return that
cannot be explained, and never revisit a (linearized-set, state) pair. Keys are
independent registers, so each key's sub-history is checked on its own.

Writes whose outcome is unknown (timed out, node crashed) return at infinity: they
may or may not have taken effect, at any point after their call.
"""

from __future__ import annotations

from dataclasses import dataclass

INF = float("inf")


@dataclass(slots=True)
class Op:
    client: int
    key: int
    write: bool
    value: int | None      # written value, or the value a read returned
    call: float
    ret: float = INF
    id: int = 0


class _Event:
    __slots__ = ("op", "is_call", "prev", "next", "match")

    def __init__(self, op, is_call):
        self.op, self.is_call = op, is_call
        self.prev = self.next = self.match = None


def check_history(ops: list[Op], initial=None) -> list[int]:
    """Keys whose sub-history is not linearizable (empty: all good)."""
    by_key: dict = {}
    for op in ops:
        by_key.setdefault(op.key, []).append(op)
    return [key for key, sub in sorted(by_key.items()) if not check_register(sub, initial)]


def check_register(ops: list[Op], initial=None) -> bool:
    points = []
    for n, op in enumerate(ops):
        op.id = n
        call, ret = _Event(op, True), _Event(op, False)
        call.match = ret
        points.append((op.call, 0, n, call))
        points.append((op.ret, 1, n, ret))
    points.sort(key=lambda p: p[:3])
    head = _Event(None, False)
    prev = head
    for *_, ev in points:
        prev.next, ev.prev = ev, prev
        prev = ev
    state, linearized = initial, 0
    cache: set = set()
    stack: list = []
    entry = head.next
    while head.next is not None:
        if entry.is_call:
            op = entry.op
            if op.write or op.value == state:
                new_state = op.value if op.write else state
                new_lin = linearized | (1 << op.id)
                if (new_lin, new_state) not in cache:
                    cache.add((new_lin, new_state))
                    stack.append((entry, state))
                    state, linearized = new_state, new_lin
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            if not stack:
                return False
            entry, state = stack.pop()
            linearized &= ~(1 << entry.op.id)
            _unlift(entry)
            entry = entry.next
    return True


def _lift(call: _Event) -> None:
    for ev in (call, call.match):
        ev.prev.next = ev.next
        if ev.next is not None:
            ev.next.prev = ev.prev


def _unlift(call: _Event) -> None:
    for ev in (call.match, call):
        ev.prev.next = ev
        if ev.next is not None:
            ev.next.prev = ev
