"""Whether a box's store can take new data, as its heartbeats say (DESIGN §5b "Replicas are kept").

A box reports its store in each heartbeat, inside ``node.health``'s ``usage`` (a field every
release has stored as it came, so saying it changes nothing on apply, at any level):
``usage["store"] = {"state": "ok" | "full" | "failing", "why", "free", "total"}``
(:class:`floydd.runtime.disk.StoreWatch`). While a box says ``full`` or ``failing``:

- no dataset copy is asked of it (:meth:`floydd.cluster.replication.replicas.Liveness.takes`): the next
  box in the order takes it at once, so a copy that failed for space lands elsewhere;
- no job is placed on it (the placer's snapshot: ``trouble``; a waiting job says why);
- ``floyd nodes`` and ``floydd members`` show it (:func:`health_word`), with why.

Its copies already made still count (a full disk still reads), and are trimmed first when a
version has more than R (:func:`floydd.cluster.replication.replicas.extra_copies`). A box that never
says (an older release, or before its first heartbeat) is taken to be fine. Pure.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["STATES", "WORDS", "store_of", "trouble", "why", "health_word"]

STATES = ("ok", "full", "failing")
WORDS = {"full": "disk full", "failing": "store failing"}
"""A store's trouble as a node's health word (``floyd nodes``, ``floydd members``)."""


def store_of(node: Mapping | None) -> Mapping:
    """What ``node`` last said of its store (``{}``: nothing)."""
    usage = (node or {}).get("usage")
    store = usage.get("store") if isinstance(usage, Mapping) else None
    return store if isinstance(store, Mapping) else {}


def trouble(node: Mapping | None) -> str:
    """``"disk full"`` or ``"store failing"`` while ``node`` says so, else ``""``."""
    state = store_of(node).get("state")
    return WORDS.get(state, "") if isinstance(state, str) else ""


def why(node: Mapping | None) -> str:
    """The box's own words for its trouble (``disk full at /var/lib/floydd (12 KiB free)``)."""
    text = store_of(node).get("why")
    return text[:300] if isinstance(text, str) and trouble(node) else ""


def health_word(word: str, node: Mapping | None) -> str:
    """A node's health word (``healthy``, ``stale``, ...) with its store's trouble: a box that
    is up but whose disk is full is ``disk full``, not ``healthy``."""
    said = trouble(node)
    return said if said and word == "healthy" else word
