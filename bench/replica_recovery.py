"""Replicas kept (issue 12): time to a new copy after a holder dies, and from a holder's
return to its copies being counted again.

Three real daemons on loopback form a cluster (``floydd init`` / ``token create`` /
``join``), with ``--heartbeat`` seconds between heartbeats and ``--grace`` seconds of
replica grace (``FLOYDD_CLUSTER_HEARTBEAT``, ``FLOYDD_REPLICA_GRACE``). Each round uploads a
fresh dataset of ``--mb`` MB of random bytes on box-a, kills the box holding its second
copy with SIGKILL, and times:

- **new copy**: from the kill until the third box is committed as a holder. The floor is
  the grace minus one heartbeat (the silence counts from the last heartbeat, up to one
  interval before the kill); what is above it is detection (the watch looks every
  ``min(1 s, grace/4, stale_after/4)``) plus the fetch. Baseline, same round: the upload's own
  second copy, from the end of the snapshot to the answer (a peer fetching the same bytes
  and committing, no death to detect).
- **counted again**: the killed box is started again; from the start of its process, and
  from its API answering, until ``floyd data ls`` lists it among the holders heard from
  (it used to wait for three copies; since the copy keeper trims, the leader then drops
  the surplus copy, so the count goes back to the replicas). Baseline: the daemon's own
  start, process to API.

    python bench/replica_recovery.py [--rounds 3] [--mb 64] [--grace 5] [--heartbeat 1] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from floydd.client import Client  # noqa: E402
from floydd.config import socket_path_for  # noqa: E402
from floydd.errors import FloyddError  # noqa: E402
from tests.conftest import free_ports, wait_until  # noqa: E402

BOXES = ("box-a", "box-b", "box-c")


class Box:
    def __init__(self, tmp: Path, name: str, env: dict[str, str]) -> None:
        self.name, self.state, self.env = name, tmp / name, env
        self.log = tmp / f"{name}.log"
        self.client = Client(socket_path_for(self.state), timeout=60)
        self.proc: subprocess.Popen | None = None

    def floydd(self, *args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", *args, "--state-dir", str(self.state)],
                             capture_output=True, text=True, timeout=120, env=self.env)
        if res.returncode:
            raise SystemExit(f"floydd {' '.join(args)} failed: {res.stderr}")
        return res.stdout.strip()

    def start(self) -> tuple[float, float]:
        """Start the daemon: (when its process started, when its API answered), monotonic."""
        began = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(self.state), "--node-name",
                 self.name, "--dev-fake-gpus", "0", "--log-level", "info"], stdout=log, stderr=subprocess.STDOUT,
                env=self.env, start_new_session=True)
        wait_until(self.client.ping, timeout=60, interval=0.05, what=f"{self.name} to answer")
        return began, time.monotonic()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


@contextlib.contextmanager
def cluster(tmp: Path, grace: float, heartbeat: float):
    env = {**os.environ, "FLOYDD_CLUSTER_HEARTBEAT": str(heartbeat), "FLOYDD_REPLICA_GRACE": str(grace),
           "FLOYDD_STORE_SCRUB_RATE": "0"}
    env.pop("FLOYD_HOST", None)
    boxes = [Box(tmp, name, env) for name in BOXES]
    try:
        for box in boxes:
            port, api = free_ports(2)           # an API port of its own: the default is one per machine
            addr, api = f"127.0.0.1:{port}", ("--api-listen", f"127.0.0.1:{api}")
            if box is boxes[0]:
                box.floydd("init", "--name", "bench", "--listen", addr, "--advertise", addr, *api)
            else:
                box.floydd("join", boxes[0].floydd("token", "create"), "--listen", addr, "--advertise", addr, *api)
            box.start()
        wait_until(lambda: _roles(boxes[0]) == ["voter"] * 3, timeout=60, what="three voters")
        yield boxes
    finally:
        for box in boxes:
            box.stop()


def one_round(boxes: list[Box], src: Path, name: str, grace: float) -> dict:
    a = boxes[0]
    ids = {n["name"]: n["id"] for n in a.client.nodes()}
    snapshot_done = answered = 0.0
    for event in a.client.upload(src, name):
        if "progress" in event:
            snapshot_done = time.monotonic()
        elif "result" in event:
            answered = time.monotonic()
            result = event["result"]
        elif "error" in event:
            raise SystemExit(f"upload failed: {event['error']}")
    assert result["copies"] == 2, result
    second = next(b for b in boxes[1:] if ids[b.name] in result["holders"])
    third = next(b for b in boxes[1:] if b is not second)
    second.kill()
    killed = time.monotonic()
    wait_until(lambda: ids[third.name] in _listed(a, name)["holders"], timeout=grace + 120, interval=0.05,
               what=f"a new copy of {name} on {third.name}")
    new_copy = time.monotonic() - killed
    began, answering = second.start()
    # counted again: held and heard from (the leader then trims the surplus copy back to the
    # version's replicas, so the count itself need not reach 3)
    wait_until(lambda: _counted(_listed(a, name), second.name), timeout=60, interval=0.01,
               what=f"{second.name} counted", details=lambda: f"the version as listed: {_listed(a, name)}")
    counted = time.monotonic()
    return {"first_copy": answered - snapshot_done, "new_copy": new_copy, "start": answering - began,
            "counted_from_start": counted - began, "counted_from_answer": counted - answering}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=float, default=64.0)
    ap.add_argument("--grace", type=float, default=5.0)
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--smoke", action="store_true", help="1 round, 4 MB, grace 2 s, heartbeat 0.5 s")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.mb, args.grace, args.heartbeat = 1, 4.0, 2.0, 0.5
    rows = []
    with tempfile.TemporaryDirectory(prefix="floydd-bench-") as tmp, \
            cluster(Path(tmp), args.grace, args.heartbeat) as boxes:
        for i in range(args.rounds):
            src = Path(tmp) / f"data{i}"
            src.mkdir()
            (src / "blob.bin").write_bytes(os.urandom(int(args.mb * 1e6)))
            rows.append(one_round(boxes, src, f"round{i}", args.grace))
            r = rows[-1]
            print(f"round {i + 1}: new copy {r['new_copy']:.2f} s after the kill (grace {args.grace:g} s; "
                  f"the upload's own second copy {r['first_copy']:.2f} s); counted again "
                  f"{r['counted_from_answer']:.2f} s after the daemon answered, {r['counted_from_start']:.2f} s "
                  f"after its process started (start alone {r['start']:.2f} s)")
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    floor = args.grace - args.heartbeat
    above = med["new_copy"] - floor
    print(f"\n{args.rounds} rounds, {args.mb:g} MB, grace {args.grace:g} s, heartbeat {args.heartbeat:g} s, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"new copy after a holder dies:  median {med['new_copy']:.2f} s after the kill, {above:.2f} s above "
          f"the floor (grace - one heartbeat = {floor:g} s): detection + fetch; baseline, the upload's own "
          f"second copy (a fetch with no death to detect): {med['first_copy']:.2f} s "
          f"({above / max(med['first_copy'], 1e-3):.1f}x)")
    print(f"holder's return to re-counted: median {med['counted_from_answer']:.2f} s from its API answering, "
          f"{med['counted_from_start']:.2f} s from its process start (baseline, the start alone: "
          f"{med['start']:.2f} s; {med['counted_from_start'] / max(med['start'], 1e-3):.2f}x)")


def _roles(box: Box) -> list[str]:
    try:
        return sorted(m["role"] for m in box.client.cluster()["members"])
    except FloyddError:
        return []


def _counted(version: dict, box: str) -> bool:
    return box in version.get("held_by", ()) and box not in version.get("silent_holders", ())


def _listed(box: Box, name: str) -> dict:
    try:
        versions = box.client.datasets(name)
    except FloyddError:
        versions = []
    return versions[0] if versions else {"holders": [], "copies": 0}


if __name__ == "__main__":
    main()
