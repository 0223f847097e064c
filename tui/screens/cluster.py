"""The cluster screen: every node and every GPU, who holds it, and how busy it is."""

from __future__ import annotations

from functools import partial
from typing import Any, Iterable, Mapping

from textual.widget import Widget

from floydd.tui.format import bar, health_style, human_bytes, level_style, spark, state_style, used_total
from floydd.tui.poll import Snapshot, View
from floydd.tui.screens.base import SnapshotScreen
from floydd.tui.widgets.panel import Panel
from floydd.tui.widgets.table import Column, Row, RowTable

__all__ = ["ClusterScreen", "cluster_rows", "cluster_summary", "COLUMNS"]

COLUMNS = (
    Column("Node / GPU", 16), Column("Role", 7), Column("Health", 9), Column("Util", 17),
    Column("History", 20), Column("Memory", 16, "right"), Column("Temp", 5, "right"),
    Column("Power", 6, "right"), Column("Job / node"),
)
_HISTORY = 20


class ClusterScreen(SnapshotScreen):
    VIEW = View.CLUSTER

    def compose_body(self) -> Iterable[Widget]:
        yield Panel(id="summary", classes="summary")
        yield RowTable(COLUMNS, id="cluster", empty="waiting for the daemon…")

    def draw(self, snap: Snapshot) -> None:
        self.query_one("#summary", Panel).show(cluster_summary(snap))
        rows = cluster_rows(snap)
        empty = "no nodes" if snap.nodes is not None else "waiting for the daemon…"
        self.query_one(RowTable).set_rows(rows, empty=empty)

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        event.stop()
        self._open(event.key)

    def _open(self, row_key: str | None) -> None:
        job = _job_of_row(self.app.snapshot, row_key)
        if job:
            self.app.open_job(job)
        elif row_key:
            self.notify("no job on this row", severity="warning", timeout=2)


def cluster_summary(snap: Snapshot) -> str:
    nodes = snap.nodes or ()
    gpus = [g for n in nodes for g in n.get("gpus") or ()]
    busy = sum(1 for g in gpus if g.get("job"))
    utils = [g["utilization"] for g in gpus if isinstance(g.get("utilization"), (int, float))]
    healthy = sum(1 for n in nodes if n.get("health") == "healthy")
    mean = f"{sum(utils) / len(utils):.0f}%" if utils else "-"
    running = sum(1 for j in snap.jobs or () if j.state == "running")
    return (f"{len(nodes)} nodes ({healthy} healthy) · {len(gpus)} GPUs, {busy} in use · "
            f"mean GPU util {mean} · {running} jobs running")


def cluster_rows(snap: Snapshot) -> list[Row]:
    """One row per node (CPU, RAM) followed by one row per GPU; keys ``node`` and ``node#gpu``."""
    users = {j.id: j.user for j in snap.jobs or ()}
    states = {j.id: j.state for j in snap.jobs or ()}
    rows = []
    for node in snap.nodes or ():
        name = str(node.get("name", "?"))
        gpus = node.get("gpus") or ()
        rows.append(Row(name, partial(_node_cells, node, name, gpus, snap.history.get((name, -1), ()))))
        dim = "dim" if node.get("health") != "healthy" else ""
        for i, gpu in enumerate(gpus):
            index = gpu.get("index", i)
            history = snap.history.get((name, int(index)), ())
            rows.append(Row(f"{name}#{index}", partial(_gpu_cells, gpu, index, history, users, states), dim))
    return rows


def _node_cells(node: Mapping[str, Any], name: str, gpus: Any, history: tuple[int, ...]) -> tuple:
    cpu = node.get("cpu_percent")
    total, avail = node.get("memory_total"), node.get("memory_available")
    used = total - avail if isinstance(total, (int, float)) and isinstance(avail, (int, float)) else None
    busy = sum(1 for g in gpus if g.get("job"))
    source = node.get("gpu_source") or "none"
    gpu_text = f"{busy}/{len(gpus)} GPUs in use" if gpus else f"no GPUs ({source})"
    role = str(node.get("role", ""))
    health = str(node.get("health", "?"))
    return (
        (name, "bold"),
        (role, "bold cyan" if role == "leader" else ""),
        (health, health_style(health)),
        (_util("cpu", cpu), level_style(cpu)),
        (spark(history, _HISTORY), "dim"),
        used_total(used, total),
        "", "",
        (f"{node.get('cpus', '?')} CPUs · {gpu_text} · disk {human_bytes(node.get('disk_free'))} free", "dim"),
    )


def _gpu_cells(gpu: Mapping[str, Any], index: Any, history: tuple[int, ...],
               users: Mapping[Any, Any], states: Mapping[Any, Any]) -> tuple:
    util = gpu.get("utilization")
    temp, power = gpu.get("temperature"), gpu.get("power_w")
    model = str(gpu.get("name") or "GPU").replace("NVIDIA ", "").replace("GeForce ", "")
    job = gpu.get("job")
    if job:
        user = gpu.get("user") or users.get(job)     # the API names the holder; else the jobs listing
        holder: Any = (f"{job} · {user}" if user else str(job), state_style(states.get(job, "running")))
    else:
        holder = ("idle", "dim")
    return (
        f" {index} {model}",
        "", "",
        (_util("gpu", util), level_style(util)),
        (spark(history, _HISTORY), level_style(util)),
        used_total(gpu.get("memory_used"), gpu.get("memory_total")),
        (f"{temp}°C" if temp is not None else "-", "red" if (temp or 0) >= 85 else ""),
        f"{power:.0f} W" if isinstance(power, (int, float)) else "-",
        holder,
    )


def _util(label: str, percent: Any) -> str:
    if not isinstance(percent, (int, float)):
        return f"{label} {'':8}    -"
    return f"{label} {bar(percent, 8)} {percent:3.0f}%"


def _job_of_row(snap: Snapshot | None, row_key: str | None) -> str | None:
    if snap is None or not row_key or "#" not in row_key:
        return None
    node, _, index = row_key.rpartition("#")
    for n in snap.nodes or ():
        if n.get("name") == node:
            for i, g in enumerate(n.get("gpus") or ()):
                if str(g.get("index", i)) == index:
                    return g.get("job")
    return None
