"""A fast read-only table: rows are plain tuples, only the visible lines are drawn.

Textual's ``DataTable`` measures and stores every cell it is given, which takes
about a second for 1,000 rows; the screens replace all their rows once a second,
so this table keeps rows as ``(text, style)`` tuples, or functions that make
them, and turns only the lines on screen into strips (the line API): with
1,000 rows a refresh formats and draws the fifty or so that are visible. The header stays on the first line; a
cursor follows the keyboard and the mouse and sticks to its row's key when the
rows are replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, NamedTuple, Sequence, Union

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

__all__ = ["Column", "Row", "Cell", "RowTable"]

Cell = Union[str, tuple[str, str]]
"""A cell: its text, or ``(text, rich style)``."""


@dataclass(frozen=True, slots=True)
class Column:
    title: str
    width: int = 0
    """Cells wide; 0 takes the width the fixed columns leave (use it once)."""
    align: str = "left"


class Row(NamedTuple):
    """A row; ``content`` may be a function making the cells, called only if the row is drawn."""

    key: str
    content: tuple[Cell, ...] | Callable[[], tuple[Cell, ...]]
    style: str = ""

    @property
    def cells(self) -> tuple[Cell, ...]:
        return self.content() if callable(self.content) else self.content


class RowTable(ScrollView, can_focus=True):
    """Rows under a sticky header, with a row cursor."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"rowtable--header", "rowtable--cursor"}
    DEFAULT_CSS = """
    RowTable { height: 1fr; background: $surface; }
    RowTable > .rowtable--header { text-style: bold; color: $text-accent; background: $panel; }
    RowTable > .rowtable--cursor { background: $block-cursor-blurred-background; }
    RowTable:focus > .rowtable--cursor { background: $block-cursor-background; color: $block-cursor-foreground; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "jump(0)", "Top", show=False),
        Binding("end,G", "jump(-1)", "Bottom", show=False),
        Binding("enter", "select", "Open"),
    ]

    cursor: reactive[int] = reactive(0, layout=False, init=False)

    class Highlighted(Message):
        def __init__(self, table: "RowTable", key: str | None) -> None:
            super().__init__()
            self.table, self.key = table, key

    class Selected(Message):
        def __init__(self, table: "RowTable", key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

    class HeaderClicked(Message):
        def __init__(self, table: "RowTable", column: int) -> None:
            super().__init__()
            self.table, self.column = table, column

    def __init__(self, columns: Sequence[Column], *, show_cursor: bool = True, empty: str = "",
                 name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns = tuple(columns)
        self.show_cursor = show_cursor
        self.empty = empty
        self.rows: tuple[Row, ...] = ()
        self._index: dict[str, int] = {}
        self._made: dict[int, tuple[Cell, ...]] = {}

    # -- data ---------------------------------------------------------------------------

    @property
    def cursor_key(self) -> str | None:
        return self.rows[self.cursor].key if 0 <= self.cursor < len(self.rows) else None

    def set_rows(self, rows: Sequence[Row], empty: str | None = None) -> None:
        """Replace every row; the cursor stays on the same key when it is still there."""
        key = self.cursor_key
        self.rows = tuple(rows)
        self._index = {row.key: i for i, row in enumerate(self.rows)}
        self._made = {}
        if empty is not None:
            self.empty = empty
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)
        target = self._index.get(key, min(self.cursor, len(self.rows) - 1)) if key else 0
        self.set_reactive(RowTable.cursor, max(0, target))
        self._keep_cursor_visible()
        self.refresh()

    def move_to(self, key: str) -> bool:
        index = self._index.get(key)
        if index is None:
            return False
        self.cursor = index
        return True

    # -- drawing ------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y == 0:
            style = base + self.get_component_rich_style("rowtable--header")
            return self._strip([c.title for c in self.columns], width, style)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self.rows):
            if not self.rows and y == 1 and self.empty:
                return Strip([Segment(set_cell_size(" " + self.empty, width), base + Style(dim=True))], width)
            return Strip.blank(width, base)
        row = self.rows[index]
        cells = self._made.get(index)
        if cells is None:
            cells = self._made[index] = row.cells
        style = base + Style.parse(row.style) if row.style else base
        if self.show_cursor and index == self.cursor:
            style += self.get_component_rich_style("rowtable--cursor")
        return self._strip(cells, width, style)

    def _strip(self, cells: Sequence[Cell], width: int, style: Style) -> Strip:
        widths = self._widths(width)
        segments = []
        for column, size, cell in zip(self.columns, widths, cells):
            text, cell_style = (cell, "") if isinstance(cell, str) else cell
            text = text.rjust(size) if column.align == "right" else text
            segments.append(Segment(set_cell_size(text, size), style + Style.parse(cell_style) if cell_style else style))
            segments.append(Segment(" ", style))
        return Strip(segments).crop_extend(0, width, style)

    def _widths(self, width: int) -> list[int]:
        fixed = sum(c.width for c in self.columns) + len(self.columns)
        return [c.width or max(0, width - fixed) for c in self.columns]

    # -- cursor -------------------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        self._keep_cursor_visible()
        self.refresh()
        self.post_message(self.Highlighted(self, self.cursor_key))

    def _keep_cursor_visible(self) -> None:
        page = max(1, self.size.height - 1)
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + page:
            self.scroll_to(y=self.cursor - page + 1, animate=False, immediate=True)

    def action_move(self, delta: int) -> None:
        if self.rows:
            self.cursor = max(0, min(len(self.rows) - 1, self.cursor + delta))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.size.height - 2))

    def action_jump(self, where: int) -> None:
        if self.rows:
            self.cursor = 0 if where == 0 else len(self.rows) - 1

    def action_select(self) -> None:
        if self.cursor_key is not None:
            self.post_message(self.Selected(self, self.cursor_key))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            x = 0
            for i, size in enumerate(self._widths(self.size.width)):
                if x <= offset.x < x + size + 1:
                    self.post_message(self.HeaderClicked(self, i))
                    return
                x += size + 1
            return
        index = int(self.scroll_offset.y) + offset.y - 1
        if 0 <= index < len(self.rows):
            self.cursor = index
            if event.chain >= 2:
                self.action_select()

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows) + 1)
        self._keep_cursor_visible()
