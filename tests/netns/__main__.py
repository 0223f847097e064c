"""``python -m tests.netns``: make, use and remove test networks by hand (see README.md here)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from tests.netns.network import (NetemUnavailable, NetnsUnavailable, SUBNET, TestNetwork, cleanup,
                                 list_networks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.netns",
                                     description="Multi-host test networks made of network namespaces.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="make N hosts on one bridge; they stay until `down`")
    up.add_argument("n", type=int)
    up.add_argument("--prefix", default="demo")
    up.add_argument("--octet", type=int, default=None, help=f"X in {SUBNET}.X.0/24")
    down = sub.add_parser("down", help="remove a network and kill what runs in it")
    down.add_argument("--prefix", default="demo")
    clean = sub.add_parser("cleanup", help="remove networks left behind by dead test runs")
    clean.add_argument("--prefix", default=None, help="remove this one, whoever made it")
    clean.add_argument("--all", action="store_true", help="also the ones made by hand with `up`")
    sub.add_parser("list", help="the test networks that exist")
    shell = sub.add_parser("shell", help="a shell (or CMD) in host N")
    shell.add_argument("n", type=int)
    shell.add_argument("command", nargs=argparse.REMAINDER)
    shell.add_argument("--prefix", default="demo")
    for name, text in (("cut", "unplug host N"), ("heal", "plug host N back"), ("clear-netem", "undo netem")):
        p = sub.add_parser(name, help=text)
        p.add_argument("n", type=int)
        p.add_argument("--prefix", default="demo")
    netem = sub.add_parser("netem", help="delay/drop what host N sends")
    netem.add_argument("n", type=int)
    netem.add_argument("--prefix", default="demo")
    netem.add_argument("--delay-ms", type=float, default=0)
    netem.add_argument("--jitter-ms", type=float, default=0)
    netem.add_argument("--loss-pct", type=float, default=0)
    args = parser.parse_args(argv)

    try:
        if args.cmd == "up":
            net = TestNetwork(args.prefix, octet=args.octet, manual=True).up(args.n)
            for h in net.hosts:
                print(f"host {h.index}: {h.ip:<15} netns {h.ns}")
            print(f"enter one: python -m tests.netns shell 1 --prefix {net.prefix}   "
                  f"remove: python -m tests.netns down --prefix {net.prefix}")
        elif args.cmd == "down":
            cleanup(args.prefix)
        elif args.cmd == "cleanup":
            removed = cleanup(args.prefix, everything=args.all)
            print("removed: " + (" ".join(removed) or "nothing"))
        elif args.cmd == "list":
            for n in list_networks():
                print(json.dumps(n))
        elif args.cmd == "shell":
            host = TestNetwork.attach(args.prefix).host(args.n)
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            argv = host.argv(command or [os.environ.get("SHELL", "/bin/bash")])
            os.execvpe(argv[0], argv, {**os.environ, "PS1": f"[{host.ns} {host.ip}] \\w# "})
        else:
            net = TestNetwork.attach(args.prefix)
            if args.cmd == "cut":
                net.cut(args.n)
            elif args.cmd == "heal":
                net.heal(args.n)
            elif args.cmd == "clear-netem":
                net.clear_netem(args.n)
            else:
                net.netem(args.n, delay_ms=args.delay_ms, jitter_ms=args.jitter_ms, loss_pct=args.loss_pct)
    except (NetnsUnavailable, NetemUnavailable, LookupError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
