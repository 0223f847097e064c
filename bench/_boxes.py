"""A cluster of real daemons on loopback for the benches (tests.harness.processes boxes, fake
GPUs, an API port each): formed, joined, its leader found, a member's own certificate."""

from __future__ import annotations

import json
import time
from pathlib import Path

from floydd.security.identity import NodeIdentity
from tests.conftest import free_ports
from tests.harness.processes import box

__all__ = ["form", "join", "leader", "member_identity", "wait"]


def form(tmp: Path, n: int, boxes: list) -> list:
    """Form the cluster in ``boxes`` (empty; filled as they are made, so a failure stops them)."""
    boxes += [box(tmp, f"box{i + 1}") for i in range(n)]
    for b in boxes:
        b.env["FLOYDD_LOG_LEVEL"] = "warning"
    p, api = free_ports(2)
    boxes[0].floydd("init", "--name", "lab", "--listen", f"127.0.0.1:{p}", "--advertise", f"127.0.0.1:{p}",
                    "--api-listen", f"127.0.0.1:{api}")
    boxes[0].start("--dev-fake-gpus", "2")
    for b in boxes[1:]:
        join(boxes[0], b)
    for b in boxes:
        wait(lambda b=b: len(b.client.nodes()) == n, 60, "every box listed")
    boxes[0].floyd("init", "bench")
    return boxes


def join(first, new) -> float:
    """``floydd join`` then start the daemon; the time the daemon's start began."""
    token = first.floydd("token", "create").stdout.strip()
    p, api = free_ports(2)
    new.floydd("join", token, "--listen", f"127.0.0.1:{p}", "--advertise", f"127.0.0.1:{p}",
               "--api-listen", f"127.0.0.1:{api}")
    started = time.monotonic()
    new.start("--dev-fake-gpus", "2")
    return started


def leader(boxes) -> tuple[str, str]:
    """(node id, address) of the leader."""
    for _ in range(100):
        view = json.loads(boxes[0].floydd("members", "--json").stdout)
        for m in view["members"]:
            if m["leader"] and m["address"]:
                return m["id"], m["address"]
        time.sleep(0.1)
    raise SystemExit("no leader")


def member_identity(member) -> NodeIdentity:
    """A member box's own node certificate: since the trust boundary (issue 21) the leader
    takes proposals only from members, stamped with the sender's node id as proposer."""
    return NodeIdentity.load(member.state / "tls")


def wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)
