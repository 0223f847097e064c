"""A debugging aid: announce one node over mDNS and print its cluster's peers as they change.

Run as ``python -m floydd.cluster.net.discovery`` (or ``... .discovery_watch``); the netns
tests drive it with ``--json``. :mod:`floydd.cluster.net.discovery` owns discovery itself.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Sequence

from floydd.cluster.net.discovery import Discovery
from floydd.cluster.net.seeds import DEFAULT_PORT


def main(argv: Sequence[str] | None = None) -> int:
    """Announce a node and print its peers as they come and go, until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m floydd.cluster.net.discovery",
        description="Announce one node over mDNS and print the peers of its cluster as they change.")
    parser.add_argument("--fingerprint", required=True, help="cluster fingerprint (nodes of others are ignored)")
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="node-to-node port to announce")
    parser.add_argument("--api-port", type=int, default=None)
    parser.add_argument("--name", default=None, help="human node name to announce")
    parser.add_argument("--interface", action="append", default=None, metavar="ADDRESS",
                        help="local address to run mDNS on (repeatable; default: all)")
    parser.add_argument("--seed", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--query-interval", type=float, default=5.0)
    parser.add_argument("--expire-after", type=float, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object a line (for scripts)")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(_watch(args))
    except KeyboardInterrupt:
        pass
    return 0


async def _watch(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def emit(event: str, **fields: object) -> None:
        if args.json:
            print(json.dumps({"event": event, "node": args.node_id, "t": loop.time(), **fields}), flush=True)
        elif event == "peers":
            listed = ", ".join(f"{p['node_id'] or '?'}@{'/'.join(p['addresses'])}:{p['port']}"
                               for p in fields["peers"]) or "(none)"
            print(f"{args.node_id}: peers {listed}", flush=True)
        else:
            print(f"{args.node_id}: {event}", flush=True)

    discovery = Discovery(
        fingerprint=args.fingerprint, node_id=args.node_id, port=args.port, api_port=args.api_port,
        name=args.name, interfaces=args.interface, seeds=args.seed, query_interval=args.query_interval,
        expire_after=args.expire_after,
        on_change=lambda peers: emit("peers", peers=[dataclasses.asdict(p) for p in peers]))
    emit("starting")
    await discovery.start()
    emit("started")
    await stop.wait()
    await discovery.close()
    emit("closed")


if __name__ == "__main__":
    sys.exit(main())
