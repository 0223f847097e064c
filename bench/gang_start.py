"""Submit-to-all-reduce time of a job over two boxes, vs bare ``torchrun`` of the same script.

Two real daemons on loopback form a cluster (as ``bench/cluster_job_start.py`` does).
``floyd run --nodes 2`` of a gloo script goes through the leader's gang placement, both
boxes' reconcile loops, rank 0's rendezvous commit, the code fetch to the other box, both
runtimes (sandbox included) and torchrun; the script prints the wall-clock time right
after its first ``all_reduce`` across the two processes. Latency is that minus the moment
the client began ``submit`` (one clock for all).

Baseline, same run: two ``python -m torch.distributed.run --nnodes 2`` processes started by
hand on this machine with the same script (what a user would type on two boxes), timed
from their start to the same printed moment. Both are dominated by importing torch; the
difference is what floydd adds. Median of ``--runs`` each (``--smoke``: 1).

    python bench/gang_start.py [--runs 5] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _daemon import free_port  # noqa: E402
from cluster_job_start import two_boxes  # noqa: E402

SCRIPT = """\
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
if dist.get_rank() == 0:
    print("reduced", total.item(), time.time(), flush=True)
dist.destroy_process_group()
"""


def bare(project: Path) -> float:
    port, t0 = free_port(), time.time()
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={rank}",
                               "--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}", "ddp.py"],
                              cwd=project, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for rank in (0, 1)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    line = next(line for out in outs for line in out.splitlines() if line.startswith("reduced"))
    return float(line.split()[2]) - t0


def through_floydd(client, project: Path) -> float:
    t0 = time.time()
    job = client.submit({"project": "bench", "command": "python ddp.py", "code_path": str(project), "nodes": 2})
    done = client.wait(job["id"], timeout=300)
    assert done["state"] == "success", done
    assert len({p["node"] for p in done["parts"]}) == 2, done
    line = next(line for line in b"".join(client.logs(job["id"])).decode().splitlines() if "reduced" in line)
    return float(line.split()[-1]) - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    runs = 1 if args.smoke else args.runs
    with tempfile.TemporaryDirectory(prefix="floydd-bench-") as tmp:
        project = Path(tmp) / "proj"
        project.mkdir()
        (project / ".floyd").write_text(json.dumps({"project": "bench"}))
        (project / "ddp.py").write_text(SCRIPT)
        baseline = [bare(project) for _ in range(runs)]
        with two_boxes(Path(tmp)) as client:
            gang = [through_floydd(client, project) for _ in range(runs)]
    b, g = statistics.median(baseline), statistics.median(gang)
    print(f"bare torchrun, 2 processes by hand:   median {b:6.2f} s  max {max(baseline):6.2f} s  ({runs} runs)")
    print(f"floyd run --nodes 2 over two boxes:  median {g:6.2f} s  max {max(gang):6.2f} s  ({runs} runs)")
    print(f"what floydd adds (placement, rendezvous, fetch, sandbox): {g - b:+.2f} s (ratio {g / b:.2f}x bare torchrun)")
    print(f"load average during the run: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
