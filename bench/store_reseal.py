"""Background re-seal after a store key rotation (issue 21): its throughput, and the daemon's
API latency while it runs, against the same latency with no re-seal running.

One real daemon (a box alone: a cluster of one, level 3) holds ``--mb`` MB of random data in
one dataset. Each round, interleaved:

- **baseline**: ``--window`` seconds of back-to-back ``GET /v1/jobs?limit=50`` calls (what
  ``floyd status`` asks) with no re-seal running;
- **re-seal**: ``floydd rotate-store-key``'s call (``POST /v1/cluster/store-key``), then the same
  calls back to back until the daemon reports every object re-sealed under the new epoch
  (``GET /v1/cluster/store-key``, every 0.25 s); throughput = bytes re-sealed / the time the
  daemon measured from the rotation to the lap that found nothing left.

The latency is measured on the API call alone (a ``floyd status`` process adds its own
Python start-up, the same with or without a re-seal). Printed: per round and min / median /
max over rounds, the re-seal's MB/s against ``store_reseal_rate`` (``--rate``), and p50 /
p99 / max latency during the re-seal against the baseline's, with the ratio.

    python bench/store_reseal.py [--mb 1024] [--rounds 3] [--rate 100] [--window 5] [--smoke]

Target (issue 21): ``floyd status`` p99 < 1 s while re-sealing 1 GiB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._daemon import serve  # noqa: E402
from floydd.client import Client  # noqa: E402


def make_data(folder: Path, mb: int) -> None:
    folder.mkdir(parents=True)
    left, i = mb << 20, 0
    while left > 0:
        n = min(left, 64 << 20)
        with open(folder / f"part{i:03d}", "wb") as f:
            for _ in range(0, n, 1 << 20):
                f.write(os.urandom(min(1 << 20, n)))
        left -= n
        i += 1


def status_call(client: Client) -> float:
    t0 = time.perf_counter()
    client.jobs(limit=50)
    return time.perf_counter() - t0


def baseline(client: Client, window: float) -> list[float]:
    out, end = [], time.monotonic() + window
    while time.monotonic() < end:
        out.append(status_call(client))
    return out


def reseal(client: Client, timeout: float) -> tuple[list[float], dict]:
    rotated = client.rotate_store_key()
    epoch = rotated["epoch"]
    out, next_look, deadline = [], 0.0, time.monotonic() + timeout
    while True:
        out.append(status_call(client))
        if time.monotonic() >= next_look:
            report = client.store_key()
            if report["seal_epoch"] == epoch and report["resealed"]:
                return out, report
            next_look = time.monotonic() + 0.25
        if time.monotonic() > deadline:
            raise SystemExit(f"the re-seal under epoch {epoch} did not finish in {timeout:.0f} s: {report}")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def spread(xs: list[float], fmt: str = "{:.3f}") -> str:
    return f"min {fmt.format(min(xs))} / median {fmt.format(statistics.median(xs))} / max {fmt.format(max(xs))}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100.0, help="store_reseal_rate, MB/s")
    ap.add_argument("--window", type=float, default=5.0, help="seconds of baseline calls per round")
    ap.add_argument("--smoke", action="store_true", help="16 MB, 1 round (CI)")
    ap.add_argument("--dir", type=Path, default=None, help="where to put the daemon's state (default: a temp folder)")
    args = ap.parse_args()
    if args.smoke:
        args.mb, args.rounds, args.window = 16, 1, 1.0
    with tempfile.TemporaryDirectory(prefix="floydd-reseal-", dir=args.dir) as tmp:
        tmp = Path(tmp)
        env = {"FLOYDD_STORE_RESEAL_RATE": str(args.rate), "FLOYDD_STORE_EPOCH_CHECK": "0.5"}
        make_data(tmp / "data", args.mb)
        with serve(tmp / "state", tmp / "daemon.log", "--log-level", "info", env=env, timeout=60) as (client, _):
            for _ in client.upload(tmp / "data", "bench-reseal"):
                pass
            print(f"{args.mb} MB uploaded; re-seal rate {args.rate:g} MB/s; load {os.getloadavg()[0]:.1f}")
            rows = []
            for r in range(1, args.rounds + 1):
                base = baseline(client, args.window)
                during, report = reseal(client, timeout=max(120.0, 20 * args.mb / max(args.rate, 1)))
                mbps = report["resealed_bytes"] / 1e6 / max(report["reseal_seconds"] or 1e-9, 1e-9)
                rows.append((base, during, report, mbps))
                print(f"round {r}: re-sealed {report['resealed_bytes'] / 1e6:,.0f} MB in "
                      f"{report['reseal_seconds']:.1f} s = {mbps:.0f} MB/s (epoch {report['seal_epoch']}); "
                      f"status p50 {pct(during, .5) * 1e3:.1f} ms p99 {pct(during, .99) * 1e3:.1f} ms "
                      f"max {max(during) * 1e3:.1f} ms over {len(during)} calls; baseline p50 "
                      f"{pct(base, .5) * 1e3:.1f} ms p99 {pct(base, .99) * 1e3:.1f} ms over {len(base)} calls; "
                      f"load {os.getloadavg()[0]:.1f}")
        p99s = [pct(d, .99) for _, d, _, _ in rows]
        base99 = [pct(b, .99) for b, _, _, _ in rows]
        ratios = [p / max(b, 1e-9) for p, b in zip(p99s, base99)]
        print(f"throughput MB/s: {spread([m for *_, m in rows], '{:.0f}')} (rate limit {args.rate:g})")
        print(f"status p99 during re-seal, s: {spread(p99s)}; baseline p99, s: {spread(base99)}; "
              f"ratio: {spread(ratios, '{:.2f}')}x")
        worst = max(p99s)
        print(f"target p99 < 1 s: {'met' if worst < 1.0 else 'MISSED'} (worst round {worst:.3f} s)")


if __name__ == "__main__":
    main()
