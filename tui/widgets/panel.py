"""A Static that repaints only when what it shows has changed.

``Static.update`` lays the whole screen out again; at one snapshot a second on
screens with 500 rows that is most of the cost of a refresh. :meth:`Panel.show`
skips unchanged content and, for panels whose size is fixed by the layout,
repaints without a layout pass.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from textual.widgets import Static

__all__ = ["Panel"]


class Panel(Static):
    _shown: Any = None

    def show(self, content: RenderableType, *, key: Any = None, layout: bool = False) -> None:
        """Show ``content``; ``key`` stands for it when it cannot be compared (a rich Table)."""
        key = content if key is None else key
        if key != self._shown:
            self._shown = key
            self.update(content, layout=layout)
