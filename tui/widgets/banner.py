"""The line under the header that says when the daemon cannot be reached."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from floydd.tui.format import duration
from floydd.tui.poll import Snapshot

__all__ = ["Banner", "banner_text"]


class Banner(Static):
    """Hidden while the daemon answers; a red band with the reason and the age of the data when not."""

    DEFAULT_CSS = """
    Banner { display: none; height: auto; padding: 0 1; }
    Banner.-down { display: block; background: $error; color: $text; text-style: bold; }
    Banner.-waiting { display: block; background: $panel; color: $text-muted; }
    """

    def show(self, snap: Snapshot | None, refresh: float) -> None:
        text = banner_text(snap, refresh)
        self.set_class(snap is None, "-waiting")
        self.set_class(snap is not None and not snap.reachable, "-down")
        if text is not None:
            self.update(text)


def banner_text(snap: Snapshot | None, refresh: float) -> Text | None:
    """What the banner says for ``snap``; None when all is well."""
    if snap is None:
        return Text("connecting to floydd…")
    if snap.reachable:
        return None
    text = Text("⚠ floydd is unreachable: ")
    text.append(snap.error or "no answer")
    if snap.hint:
        text.append(f" — {snap.hint}")
    age = "no data yet" if snap.last_ok is None else f"data shown is {duration(snap.now - snap.last_ok)} old"
    text.append(f"\n  retrying every {refresh:g}s; {age}")
    return text
