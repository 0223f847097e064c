"""``floyd top --serve``: the same TUI in a browser through textual-serve (slow: a real server)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
async def test_serve_streams_the_app_to_a_browser_session(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "FLOYDD_STATE_DIR": str(tmp_path / "nodaemon"), "PYTHONPATH": str(ROOT)}
    env.pop("FLOYD_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "floydd.tui", "--serve", f"127.0.0.1:{port}"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with aiohttp.ClientSession() as http:
            page = ""
            for _ in range(200):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/") as resp:
                        page = await resp.text()
                        break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            assert f"ws://127.0.0.1:{port}/ws" in page
            async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                await ws.send_json(["resize", {"width": 120, "height": 30}])
                seen = b""
                deadline = time.monotonic() + 30
                while b"unreachable" not in seen and time.monotonic() < deadline:
                    try:
                        msg = await asyncio.wait_for(ws.receive(), 1)
                    except asyncio.TimeoutError:
                        continue
                    if msg.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                        break
                    seen += msg.data if isinstance(msg.data, bytes) else msg.data.encode()
        assert b"floyd top" in seen and b"unreachable" in seen  # the app, with its banner (no daemon here)
    finally:
        proc.terminate()
        proc.wait(10)
