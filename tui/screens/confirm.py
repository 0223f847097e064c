"""A yes/no dialog for actions that cannot be undone (stop, restart)."""

from __future__ import annotations

from typing import Iterable

from textual.containers import Grid
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Label

__all__ = ["Confirm"]


class Confirm(ModalScreen[bool]):
    """Dismisses with True for yes; ``y``/``n``/``escape`` or the buttons. Cancel has the focus."""

    AUTO_FOCUS = "#no"
    BINDINGS = [("y", "answer(True)", "Yes"), ("n,escape", "answer(False)", "No")]
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Grid {
        grid-size: 2; grid-gutter: 1 2; grid-rows: auto 3; padding: 1 2;
        width: 64; height: auto; border: thick $error 60%; background: $surface;
    }
    Confirm #question { column-span: 2; width: 1fr; }
    Confirm Button { width: 100%; }
    """

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> Iterable[Widget]:
        with Grid():
            yield Label(self.question, id="question")
            yield Button(f"{self.yes} (y)", variant="error", id="yes")
            yield Button("Cancel (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
