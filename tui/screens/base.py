"""What every screen shares: header, banner, footer, and drawing from the latest snapshot."""

from __future__ import annotations

from typing import ClassVar, Iterable

from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header

from floydd.tui.poll import Snapshot, View, Want
from floydd.tui.widgets.banner import Banner

__all__ = ["SnapshotScreen"]


class SnapshotScreen(Screen):
    """A screen that draws snapshots; subclasses give ``compose_body`` and ``draw``.

    When it becomes visible it tells the app what it needs (:meth:`want`) and
    draws the latest snapshot at once; after that the app hands it each new one.
    """

    VIEW: ClassVar[str] = View.CLUSTER
    DEFAULT_CSS = """
    SnapshotScreen .summary { height: 1; padding: 0 1; color: $text-muted; }
    """
    _ready = False

    def compose(self) -> Iterable[Widget]:
        yield Header()
        yield Banner()
        yield from self.compose_body()
        yield Footer()

    def compose_body(self) -> Iterable[Widget]:
        return ()

    def want(self) -> Want:
        return Want(view=self.VIEW)

    def want_changed(self) -> None:
        """Call when what :meth:`want` returns has changed (the poller fetches at once)."""
        if self.is_current:
            self.app.set_want(self.want())

    def on_mount(self) -> None:
        self._ready = True
        self.show(self.app.snapshot)

    def on_screen_resume(self) -> None:
        self.app.set_want(self.want())
        self.show(self.app.snapshot)

    def show(self, snap: Snapshot | None) -> None:
        if not self._ready:
            return  # not composed yet; on_mount draws
        try:
            self.query_one(Banner).show(snap, self.app.refresh_seconds)
            if snap is not None:
                self.draw(snap)
        except NoMatches:
            return  # the app is closing and has taken the widgets down already: nothing to draw on

    def draw(self, snap: Snapshot) -> None:
        raise NotImplementedError
