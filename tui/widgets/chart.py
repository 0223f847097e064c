"""Metric curves in braille: one or more series overlaid, each in its own colour.

Each terminal cell holds 2×4 braille dots, so a 60×10 chart plots on a 120×40
grid. Lines are joined between points; where series cross, the dots of both
show and the cell takes the colour of the later series. The drawing is a pure
function (:func:`plot_lines`) of the series and the size, cached per size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich.text import Text
from textual.widget import Widget

from floydd.tui.format import number

__all__ = ["Series", "LineChart", "plot_lines", "COLORS"]

COLORS = ("cyan", "magenta", "yellow", "green", "bright_blue", "red", "bright_white", "orange1")
"""Series colours, in order (the experiments screen uses the same for its table headers)."""

_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))  # [row][col] within a cell
_LABEL = 9


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    color: str = "cyan"


class LineChart(Widget):
    """Overlaid line plots with a title, y labels on the left and the x range below."""

    DEFAULT_CSS = """
    LineChart { height: 12; padding: 0 1; }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._series: tuple[Series, ...] = ()
        self._title = ""
        self._cache: tuple[object, Text] | None = None

    def plot(self, series: Sequence[Series], title: str = "") -> None:
        series, title = tuple(series), title
        if series != self._series or title != self._title:
            self._series, self._title = series, title
            self._cache = None
            self.refresh()

    def render(self) -> Text:
        size = (self.content_size.width, self.content_size.height)
        key = (size, self._series, self._title)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, plot_lines(self._series, size[0], size[1], self._title))
        return self._cache[1]


def plot_lines(series: Sequence[Series], width: int, height: int, title: str = "") -> Text:
    """The chart as text: a title line, ``height - 2`` plot rows, an x-axis line."""
    out = Text(no_wrap=True, overflow="crop")
    out.append(title, style="bold")
    for s in series:
        out.append("  ■ ", style=s.color)
        out.append(s.label)
    rows, cols = height - 2, width - _LABEL - 1
    points = [p for s in series for p in s.points]
    if rows < 1 or cols < 2:
        return out
    if not points:
        out.append("\n" + "no data yet".center(width), style="dim")
        return out
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    gw, gh = cols * 2, rows * 4
    bits = [[0] * cols for _ in range(rows)]
    color: list[list[str | None]] = [[None] * cols for _ in range(rows)]
    for s in series:
        last = None
        for x, y in _thin(s.points, gw):
            gx = round((x - x0) / (x1 - x0) * (gw - 1))
            gy = round((y1 - y) / (y1 - y0) * (gh - 1))
            for px, py in _segment(last, (gx, gy)):
                bits[py // 4][px // 2] |= _DOTS[py % 4][px % 2]
                color[py // 4][px // 2] = s.color
            last = (gx, gy)
    for r in range(rows):
        label = number(y1) if r == 0 else number(y0) if r == rows - 1 else ""
        out.append("\n" + label.rjust(_LABEL - 1) + " ┤", style="dim")
        for c in range(cols):
            b = bits[r][c]
            out.append(chr(0x2800 + b) if b else " ", style=color[r][c] or "")
    left, right = number(x0), number(x1)
    out.append("\n" + " " * (_LABEL + 1) + left + right.rjust(max(1, cols - len(left))), style="dim")
    return out


def _thin(points: Sequence[tuple[float, float]], target: int) -> Sequence[tuple[float, float]]:
    """At most about ``2 * target`` points, keeping the first and last (enough for a dot grid)."""
    if len(points) <= 2 * target:
        return points
    step = len(points) / (2 * target)
    thinned = [points[int(i * step)] for i in range(2 * target)]
    thinned.append(points[-1])
    return thinned


def _segment(a: tuple[int, int] | None, b: tuple[int, int]) -> list[tuple[int, int]]:
    """Grid points from ``a`` to ``b`` inclusive (Bresenham); just ``b`` when there is no ``a``."""
    if a is None:
        return [b]
    (x, y), (x2, y2) = a, b
    dx, dy = abs(x2 - x), -abs(y2 - y)
    sx, sy = (1 if x < x2 else -1), (1 if y < y2 else -1)
    err = dx + dy
    out = []
    while True:
        out.append((x, y))
        if x == x2 and y == y2:
            return out
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x += sx
        if e2 <= dx:
            err += dx
            y += sy
