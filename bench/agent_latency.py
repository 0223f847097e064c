"""Start latency of a trivial job through the node runtime vs a direct spawn.

Both run ``python -c "import time; print(time.time())"``; latency is the printed time
minus the moment the caller began (``subprocess.Popen``, or ``NodeRuntime.start_job``
on a queued job with a real Store and Records: workspace, code restore, agent spawn,
the agent's own start, the sandbox). Also reported: how long ``start_job`` itself
takes (the job is ``running`` in the records when it returns). Target: < 150 ms
above the direct spawn. Median of ``--runs`` each (``--smoke``: 5).

    python bench/agent_latency.py [--runs 30] [--sandbox auto|bwrap|none] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from floydd.records import Records
from floydd.runtime import NodeRuntime
from floydd.store import Store

CMD = 'python -c "import time; print(time.time())"'


def direct(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.time()
        res = subprocess.run(["/bin/sh", "-c", CMD], capture_output=True, text=True, check=True)
        out.append(float(res.stdout) - t0)
    return out


async def through_runtime(root: Path, runs: int, sandbox: str) -> tuple[list[float], list[float], str]:
    store, records = Store.open(root / "state" / "store"), Records(root / "state" / "records.db")
    done: asyncio.Queue = asyncio.Queue()
    loop = asyncio.get_running_loop()
    runtime = NodeRuntime(state_dir=root / "state", store=store, records=records, sandbox=sandbox,
                          tail_interval=0.05, on_finished=lambda p, n: loop.call_soon(done.put_nowait, n))
    code = root / "code"
    code.mkdir()
    tree = str(store.snapshot(code))
    latency, call = [], []
    try:
        for _ in range(runs):
            number = records.allocate_job("bench", dict(command=CMD, params={}, code_tree=tree, data=[],
                                                        resources={"gpus": 0}, env="default", max_runtime=None))
            t0 = time.time()
            await runtime.start_job("bench", number, [])
            call.append(time.time() - t0)
            assert await done.get() == number
            job = records.get_job("bench", number)
            assert job["state"] == "success", job
            first = (Path(job["workspace"]) / "job.log").read_text().split()[2]
            latency.append(float(first) - t0)
        return latency, call, runtime.sandbox_mode
    finally:
        await runtime.close()
        records.close()
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    runs = 5 if args.smoke else args.runs
    root = Path(tempfile.mkdtemp(prefix="floydd-bench-", dir="/var/tmp"))
    try:
        base = direct(runs)
        ours, call, mode = asyncio.run(through_runtime(root, runs, args.sandbox))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    b, o = statistics.median(base), statistics.median(ours)
    print(f"direct spawn:         median {b * 1000:7.1f} ms  max {max(base) * 1000:7.1f} ms  ({runs} runs)")
    print(f"runtime + agent ({mode}): median {o * 1000:7.1f} ms  max {max(ours) * 1000:7.1f} ms"
          f"   (start_job returns after median {statistics.median(call) * 1000:.1f} ms)")
    print(f"overhead: {1000 * (o - b):.1f} ms above direct spawn (target < 150 ms); ratio {o / b:.2f}x")
    print(json.dumps({"runs": runs, "sandbox": mode, "direct_ms": b * 1000, "runtime_ms": o * 1000,
                      "start_job_ms": statistics.median(call) * 1000, "overhead_ms": (o - b) * 1000}))


if __name__ == "__main__":
    main()
