"""Tiny network probes run inside test hosts (no ``ping`` binary needed; we are root there).

    python -m tests.netns._probe ping 10.213.5.12 --count 3       -> {"rtt_ms": [0.08, ...]}
    python -m tests.netns._probe mcast-echo --iface 10.213.5.12   -> answers every datagram
    python -m tests.netns._probe mcast-rtt --iface 10.213.5.11 --expect 2
        -> {"t_start": ..., "t_done": ..., "replies": {"10.213.5.12": 0.1, ...}}  (monotonic s, ms)

The multicast pair measures what mDNS rests on: one datagram to a group, answers from every
other host. Times are ``time.monotonic()``, one clock for every namespace of the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import sys
import time

GROUP = "239.255.213.1"   # administratively scoped; only ever sent inside test namespaces
PORT = 51213


def ping(target: str, count: int, timeout: float, interval: float) -> list[float | None]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    rtts: list[float | None] = []
    for seq in range(count):
        if seq:
            time.sleep(interval)
        header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        payload = b"floydd-netns-probe"
        packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload
        sent = time.monotonic()
        sock.sendto(packet, (target, 0))
        rtts.append(None)
        while (left := sent + timeout - time.monotonic()) > 0:
            if not select.select([sock], [], [], left)[0]:
                break
            data, (source, _) = sock.recvfrom(2048)
            ihl = (data[0] & 0x0F) * 4
            kind, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if kind == 0 and rid == ident and rseq == seq and source == target:
                rtts[-1] = round((time.monotonic() - sent) * 1000, 3)
                break
    return rtts


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def mcast_echo(iface: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("", PORT))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                    socket.inet_aton(GROUP) + socket.inet_aton(iface))
    print(json.dumps({"ready": iface}), flush=True)
    while True:
        data, source = sock.recvfrom(2048)
        if source[0] != iface:
            sock.sendto(data, source)


def mcast_rtt(iface: str, expect: int, timeout: float) -> dict:
    t_start = time.monotonic()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    sock.bind((iface, 0))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    nonce = os.urandom(8)
    replies: dict[str, float] = {}
    sent = time.monotonic()
    sock.sendto(nonce, (GROUP, PORT))
    last_send = sent
    while len(replies) < expect and time.monotonic() - t_start < timeout:
        if time.monotonic() - last_send > 0.2:  # a lost datagram: ask again
            sock.sendto(nonce, (GROUP, PORT))
            last_send = time.monotonic()
        if select.select([sock], [], [], 0.05)[0]:
            data, (source, _) = sock.recvfrom(2048)
            if data == nonce and source not in replies:
                replies[source] = round((time.monotonic() - sent) * 1000, 3)
    return {"t_start": t_start, "t_done": time.monotonic(), "replies": replies}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.netns._probe")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ping")
    p.add_argument("target")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1.0)
    p.add_argument("--interval", type=float, default=0.05)
    e = sub.add_parser("mcast-echo")
    e.add_argument("--iface", required=True)
    r = sub.add_parser("mcast-rtt")
    r.add_argument("--iface", required=True)
    r.add_argument("--expect", type=int, required=True)
    r.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.cmd == "ping":
        print(json.dumps({"rtt_ms": ping(args.target, args.count, args.timeout, args.interval)}))
    elif args.cmd == "mcast-echo":
        mcast_echo(args.iface)
    else:
        print(json.dumps(mcast_rtt(args.iface, args.expect, args.timeout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
