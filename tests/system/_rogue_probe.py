"""What a process holding a node certificate can do to the boxes: run in a netns host by
``test_netns_rogue``. Prints one JSON list: per target, ``{"id", "status", "code", "message"}``.

    python -m tests.system._rogue_probe TLS_DIR raft TERM ID@HOST:PORT...
    python -m tests.system._rogue_probe TLS_DIR read ID@HOST:PORT...
    python -m tests.system._rogue_probe TLS_DIR propose CMD_JSON ID@HOST:PORT...
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
import msgpack

from floydd.cluster.state import versions
from floydd.cluster.raft import AppendEntries, RequestVote, encode_message
from floydd.cluster.net.transport import PROPOSE_PATH, RAFT_PATH, READ_PATH
from floydd.security.identity import NodeIdentity
from floydd.security.tls import client_context


async def _post(identity: NodeIdentity, node_id: str, address: str, path: str, body: dict) -> dict:
    ctx = client_context(identity, verify_node_id=True)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        async with session.post(f"https://{address}{path}", data=msgpack.packb(body, use_bin_type=True), ssl=ctx,
                                server_hostname=node_id, headers={"Content-Type": "application/msgpack",
                                                                  versions.HEADER: str(versions.PROTOCOL)}) as resp:
            raw = await resp.read()
            status = resp.status
    try:
        payload = msgpack.unpackb(raw, raw=False)
    except Exception:
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = {}
    err = payload.get("error", {}) if isinstance(payload, dict) else {}
    return {"id": node_id, "status": status, "code": err.get("code"), "message": err.get("message")}


async def main(argv: list[str]) -> list[dict]:
    identity = NodeIdentity.load(Path(argv[0]))
    action, rest = argv[1], argv[2:]
    me = identity.node_id
    out = []
    if action == "raft":
        term, targets = int(rest[0]), rest[1:]
        for target in targets:
            node_id, address = target.split("@")
            msgs = [AppendEntries(frm=me, to=node_id, term=term, index=0, log_term=0, commit=0),
                    RequestVote(frm=me, to=node_id, term=term, index=10**9, log_term=term)]
            out.append(await _post(identity, node_id, address, RAFT_PATH,
                                   {"from": me, "addr": None, "msgs": [encode_message(m) for m in msgs]}))
    elif action == "read":
        for target in rest:
            node_id, address = target.split("@")
            out.append(await _post(identity, node_id, address, READ_PATH,
                                   {"from": me, "query": "jobs", "args": {}, "timeout": 5}))
    elif action == "propose":
        cmd, targets = {"ts": time.time(), **json.loads(rest[0])}, rest[1:]
        for target in targets:
            node_id, address = target.split("@")
            out.append(await _post(identity, node_id, address, PROPOSE_PATH,
                                   {"from": me, "addr": None, "cmd": cmd, "timeout": 5}))
    else:
        raise SystemExit(f"unknown action {action}")
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
