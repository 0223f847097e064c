"""Submit-to-running latency of a job placed on another box, vs the same job on a single box.

Two real daemons on loopback form a cluster (``floydd init`` / ``token create`` / ``join``):
box-a has no GPU, box-b one fake GPU (dev option), so a ``--gpu`` job submitted to box-a
goes through the leader's placement, box-b's reconcile loop, a fetch of the code tree over
mTLS, and box-b's runtime. The job prints the wall-clock time it started; latency is that
minus the moment the client began ``submit`` (both daemons and the client share one clock).

Baseline, same run: the same job on a single-box daemon (``bench/daemon_submit_latency.py``'s
path). The code folder holds ``--code-mb`` MB of random files (default 1) and one small file
changed before each run: the first run on box-b fetches the whole code tree, later runs only
the changed objects and the new manifest (content addressing; the max shows the first).
Median of ``--runs`` each (``--smoke``: 3).

    python bench/cluster_job_start.py [--runs 20] [--code-mb 1] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _daemon import daemon, floydd_cli, free_port  # noqa: E402
from floydd.client import Client  # noqa: E402
from floydd.config import socket_path_for  # noqa: E402

CMD = 'python -c "import time; print(time.time())"'


@contextlib.contextmanager
def two_boxes(tmp: Path):
    """box-a (no GPU, leader) and box-b (one fake GPU), formed as README's tour does."""
    procs: list[subprocess.Popen] = []
    try:
        clients = []
        for name, gpus in (("box-a", "0"), ("box-b", "1")):
            state = tmp / name
            port, api = free_port(), free_port()        # an API port of its own: the default is one per machine
            if name == "box-a":
                floydd_cli(state, "init", "--name", "bench", "--listen", f"127.0.0.1:{port}",
                        "--advertise", f"127.0.0.1:{port}", "--api-listen", f"127.0.0.1:{api}")
            else:
                token = floydd_cli(tmp / "box-a", "token", "create")
                floydd_cli(state, "join", token, "--listen", f"127.0.0.1:{port}", "--advertise", f"127.0.0.1:{port}",
                        "--api-listen", f"127.0.0.1:{api}")
            log = open(tmp / f"{name}.log", "wb")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state), "--node-name", name,
                 "--dev-fake-gpus", gpus, "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))
            client = Client(socket_path_for(state), timeout=60)
            _until(lambda: client.ping(), f"{name} to answer")
            clients.append(client)
        _until(lambda: len(clients[0].nodes()) == 2 and len(clients[1].nodes()) == 2, "both boxes listed")
        yield clients[0]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)


def _until(cond, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def measure(client: Client, project: Path, runs: int, gpus: int, where: str | None) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.time()
        job = client.submit({"project": "bench", "command": CMD, "code_path": str(project), "gpus": gpus})
        done = client.wait(job["id"], timeout=120)
        assert done["state"] == "success", done
        if where is not None:
            assert done["node"] == where, done
        line = b"".join(client.logs(job["id"])).decode().split()
        out.append(float(line[2]) - t0)
        (project / "touch.txt").write_text(str(t0))   # a new code tree each run (only this file differs)
    return out


def code_folder(root: Path, mb: float) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / ".floyd").write_text(json.dumps({"project": "bench"}))
    for i in range(max(1, int(mb * 4))):
        (root / f"blob{i}.bin").write_bytes(os.urandom(256 * 1024))
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--code-mb", type=float, default=1.0)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    runs = 3 if args.smoke else args.runs
    with tempfile.TemporaryDirectory(prefix="floydd-bench-") as tmp:
        project = code_folder(Path(tmp) / "proj", args.code_mb)
        with daemon() as (client, _proc, _project):
            single = measure(client, project, runs, 0, None)
        with two_boxes(Path(tmp)) as client:
            across = measure(client, project, runs, 1, "box-b")
    s, a = statistics.median(single), statistics.median(across)
    print(f"single box:             median {s * 1000:7.1f} ms  max {max(single) * 1000:7.1f} ms  ({runs} runs)")
    print(f"placed on another box:  median {a * 1000:7.1f} ms  max {max(across) * 1000:7.1f} ms  ({runs} runs, "
          f"{args.code_mb:g} MB of code, fetched whole by the first run)")
    print(f"cost of the cluster path: {1000 * (a - s):.1f} ms (ratio {a / s:.2f}x the single box)")


if __name__ == "__main__":
    main()
