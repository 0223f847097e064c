"""Run one control-plane node alone: ``python -m floydd.cluster.devnode --help``.

For development, system tests and benchmarks: a :class:`ClusterService` with its own mTLS
listener and nothing else of the daemon. With ``--events`` it prints one JSON line per
event on stdout, each with ``t`` = ``time.monotonic()`` (one clock for every process on the
machine, network namespaces included)::

    {"event": "listening", "node_id", "address", "t"}
    {"event": "leader", "leader", "term", "t"}          every leader change this node sees
    {"event": "serving", "term", "t"}                   this node leads and has committed in its term
    {"event": "stepped_down", "term", "t"}              it led and no longer does
    {"event": "status", ...}                            answer to the "status" command

Commands on stdin, one per line: ``status``, ``isolate`` (drop all traffic to and from
peers, as if the cable were pulled), ``heal``, ``leave`` (clean shutdown), ``crash``
(exit at once without leaving).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from floydd.cluster.driver.autopilot import AutopilotConfig
from floydd.cluster.config import DEFAULT_CLUSTER_CONFIG
from floydd.cluster.raft import RaftConfig
from floydd.cluster.service import ClusterService
from floydd.errors import FloyddError
from floydd.security.identity import NodeIdentity

__all__ = ["main"]


def _emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


async def _run(args: argparse.Namespace) -> int:
    identity = NodeIdentity.load(Path(args.tls))
    defaults = DEFAULT_CLUSTER_CONFIG
    config = replace(defaults, raft=RaftConfig(tick_interval_ms=args.tick_ms, election_ticks=args.election_ticks,
                                               heartbeat_ticks=args.heartbeat_ticks),
                     autopilot=AutopilotConfig(grace=args.grace), heartbeat_interval=args.heartbeat_interval)
    service = ClusterService(identity, Path(args.state), name=args.name, config=config)
    host, _, port = args.listen.rpartition(":")
    address = await service.listen(host, int(port), advertise_host=args.advertise)
    events = args.events
    if events:
        _emit("listening", node_id=identity.node_id, address=address)
    founders = dict(item.split("=", 1) for item in args.founders.split(",")) if args.founders else None
    loop = asyncio.get_running_loop()
    led_term = [0]
    watchers: set[asyncio.Task] = set()

    async def announce_serving(term: int) -> None:
        try:
            await service.driver.read_index(timeout=5.0)    # answered once this term has committed
        except FloyddError:
            return
        if service.is_leader and service.status().term == term:
            _emit("serving", term=term)

    def on_leader(lead, term) -> None:
        if not events:
            return
        _emit("leader", leader=lead, term=term)
        if lead == identity.node_id:
            led_term[0] = term
            task = loop.create_task(announce_serving(term))
            watchers.add(task)
            task.add_done_callback(watchers.discard)
        elif led_term[0]:
            _emit("stepped_down", term=led_term[0])
            led_term[0] = 0

    service.driver.on_leader_change(on_leader)
    await service.start(bootstrap=args.bootstrap, founders=founders, join=args.join or (),
                        rejoin=bool(args.join), recover=args.recover)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if line in ("", "leave"):
            await service.close(leave=True)
            return 0
        if line == "crash":
            os._exit(3)
        if line == "isolate":
            service.transport.drop = lambda frm, to: True
            _emit("isolated")
        elif line == "heal":
            service.transport.drop = None
            _emit("healed")
        elif line == "status":
            st = service.status()
            _emit("status", role=st.role, term=st.term, leader=st.leader, commit=st.commit, applied=st.applied,
                  voters=list(st.voters), learners=list(st.learners), jobs=len(service.state.jobs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m floydd.cluster.devnode", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tls", required=True, help="identity folder (node-id, node.key, node.pem, ca.pem)")
    ap.add_argument("--state", required=True, help="state folder (raft.db, peers.json)")
    ap.add_argument("--listen", default="127.0.0.1:7654", help="HOST:PORT of the mTLS listener")
    ap.add_argument("--advertise", help="host to tell peers (default: the listen host)")
    ap.add_argument("--name")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--bootstrap", action="store_true", help="found a cluster of this node alone")
    mode.add_argument("--founders", help="found a cluster of ID=HOST:PORT,... (this node included)")
    mode.add_argument("--join", action="append", help="join through a member at HOST:PORT")
    ap.add_argument("--recover", action="store_true", help="restart as a new one-node cluster (loud)")
    ap.add_argument("--tick-ms", type=int, default=DEFAULT_CLUSTER_CONFIG.raft.tick_interval_ms)
    ap.add_argument("--election-ticks", type=int, default=DEFAULT_CLUSTER_CONFIG.raft.election_ticks)
    ap.add_argument("--heartbeat-ticks", type=int, default=DEFAULT_CLUSTER_CONFIG.raft.heartbeat_ticks)
    ap.add_argument("--grace", type=float, default=30.0, help="seconds before autopilot removes a dead voter")
    ap.add_argument("--heartbeat-interval", type=float, default=5.0)
    ap.add_argument("--events", action="store_true", help="print JSON event lines on stdout")
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return asyncio.run(_run(args))
    except FloyddError as exc:
        print(f"error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
