"""Store key epochs as replicated records: ``store.epoch`` (level 3).

The cluster records, for each epoch after the first, its number, the fingerprint of its
secret (public: it names the secret without revealing it), the box that made the secret and
who asked; never the secret itself (the raft log and its snapshots are copied to boxes that
join later and kept on disk). The secret travels box to box over mutual TLS, only to boxes
that are members when they ask (:mod:`floydd.daemon.epochs`), so a removed box never
receives it. Epochs are numbered 1, 2, ... in log order: a ``store.epoch`` for any other
number than the next one is refused alike on every box (two rotations at once: one wins, the
other is asked again).

    store.epoch   epoch, fingerprint, made_on, reason?, user?
"""

from __future__ import annotations

from typing import Any

from floydd.errors import Conflict, InvalidSpec

__all__ = ["OP", "current", "record", "apply_epoch"]

OP = "store.epoch"


def current(state: Any) -> int:
    """The cluster's newest store key epoch (0: the store secret's own)."""
    epochs = getattr(state, "store_epochs", None) or []
    return epochs[-1]["epoch"] if epochs else 0


def record(state: Any, epoch: int) -> dict | None:
    for rec in getattr(state, "store_epochs", None) or []:
        if rec["epoch"] == epoch:
            return rec
    return None


def apply_epoch(state: Any, cmd: dict) -> dict:
    """``store.epoch`` on apply: the next epoch, or Conflict (``epoch_taken``)."""
    want = current(state) + 1
    if cmd["epoch"] != want:
        raise Conflict(f"store key epoch {cmd['epoch']} is not the next one ({want}): another rotation came first",
                       code="epoch_taken", hint="run floydd rotate-store-key again if a newer epoch is still wanted")
    fp = cmd["fingerprint"]
    if len(fp) != 16 or not all(c in "0123456789abcdef" for c in fp):
        raise InvalidSpec("a store key epoch's fingerprint is 16 hex digits")
    rec = {"epoch": want, "fingerprint": fp, "made_on": cmd["made_on"], "reason": cmd.get("reason", ""),
           "by": cmd.get("user", ""), "ts": cmd["ts"]}
    state.store_epochs = [*(getattr(state, "store_epochs", None) or []), rec]
    return rec
