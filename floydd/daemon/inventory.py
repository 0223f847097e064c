"""Keeps the latest inventory sample of this node, refreshed off the event loop."""

from __future__ import annotations

import asyncio

from floydd import log
from floydd.node import Inventory, NodeInfo

__all__ = ["InventoryState"]


class InventoryState:
    """Samples the node every ``interval`` seconds in a worker thread."""

    def __init__(self, inventory: Inventory, interval: float) -> None:
        self.inventory = inventory
        self.interval = interval
        self.latest: NodeInfo | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self.latest = await asyncio.to_thread(self.inventory.sample)
        self._task = asyncio.create_task(self._loop(), name="floydd.inventory")

    async def refresh(self) -> NodeInfo:
        self.latest = await asyncio.to_thread(self.inventory.sample)
        return self.latest

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.refresh()
            except Exception:
                log.node.exception("inventory sample failed")

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.to_thread(self.inventory.close)
