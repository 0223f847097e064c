"""What a listing of the cluster's jobs costs to read out of the replicated state (issue 22).

    python bench/job_reads.py [--smoke] [--rounds N]

A state of 10,000 jobs (--smoke: 200) made by real commands through ``ClusterState.apply``:
two boxes of 8 GPUs, each job submitted with a spec as ``floyd run`` makes it (params, a
dataset, cores, a restart policy), placed, run and ended with a metric summary, so each has
a placement, times and a history. Timed, interleaved in each round (CPU seconds of this
process, min/median/max over ``--rounds``):

- the read: before, a deep copy of every stored job (``copy_of`` of the dicts the state held,
  what ``list_jobs`` gave before the reads were typed); now, ``list_jobs()``: the state's own
  frozen :class:`~floydd.model.Job` values (its spec read when first asked);
- the API's listing, its JSON included (``GET /v1/jobs``, msgspec): before, the dicts of the
  old ``job_view`` (kept here, :func:`old_job_view`) over the copies; now, the
  :class:`~floydd.model.JobView` values of ``job_view`` over ``list_jobs()``, and the same with
  each job's typed spec read as well.
- a page of 500 of the listing sorted by time or filtered by text, as ``GET /v1/jobs?sort=-time&limit=500``
  and ``?q=...&limit=500`` take it (every job sorted or filtered, then the page's views: issue 23),
  against the views of every job (what the TUI fetched for a sort or a filter before).

Exits 1 if the typed reads differ from the copies or the views' JSON from the old views'
(byte for byte: key order, nulls and missing keys included).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec  # noqa: E402

from floydd.cluster.state.commands import copy_of  # noqa: E402
from floydd.cluster.state.machine import ClusterState  # noqa: E402
from floydd.jobs.listing import filtered_and_sorted, job_view  # noqa: E402
from floydd.model import SPEC_FIELDS, Job, JobOrder, filter_text  # noqa: E402

SPEC = {"command": "python train.py --epochs 30", "params": {"lr": "0.05", "batch": "64"}, "code_tree": "ab" * 32,
        "data": [{"ref": "mnist:1", "tree": "cd" * 32, "mount": "/input"}],
        "resources": {"gpus": 1, "cpu": False, "cpus": 4.0, "memory": 8 << 30}, "env": "default",
        "message": "a sweep point", "mode": "job", "max_runtime": None,
        "restart": {"policy": "on-failure", "max_attempts": 3, "lost_after": None}}


_OLD_JOB_FIELDS = ("id", "project", "number", "state", "reason", "waiting_for", "created", "started", "ended",
                   "gpus", "exit_code", "output_version", "attempts", "stop_requested", "user", "origin", "endpoint",
                   "unknown_since", "imported")


def old_job_view(job: dict, node_names: dict[str, str]) -> dict:
    """``jobs/listing.job_view`` as it was before the reads were typed (over a copied dict)."""
    view = {name: job["spec"].get(name) for name in SPEC_FIELDS}
    view.update({name: job.get(name) for name in _OLD_JOB_FIELDS})
    view.update(node=node_names.get(job["node"], job["node"] or ""), node_id=job["node"],
                metrics=dict(job["summary"].get("metrics") or {}), workspace="", agent_pid=None,
                latest=None, attempt=job["attempts"], reruns=job.get("reruns") or 0,
                archived=job.get("archived_at") is not None,
                parts=[{**part, "node": node_names.get(part["node"], part["node"]), "node_id": part["node"]}
                       for part in job.get("parts") or ()], history=False)
    view["data"] = view["data"] or []
    return view


def build(jobs: int) -> ClusterState:
    state, index = ClusterState(), 0

    def apply(cmd: dict) -> dict:
        nonlocal index
        index += 1
        return state.apply({"ts": 1_800_000_000.0 + index, **cmd}, index=index, term=1)

    for box in ("n1", "n2"):
        apply({"op": "node.upsert", "id": box, "name": f"box-{box}", "address": "10.0.0.1", "cluster_port": 7654,
               "resources": {"gpus": list(range(8))}})
    for i in range(jobs):
        key = apply({"op": "job.submit", "idem_key": f"k{i}", "project": "sweep", "user": "alice",
                     "spec": {**SPEC, "params": {**SPEC["params"], "seed": str(i)}}})["id"]
        node, gpu = ("n1", "n2")[i % 2], i % 8
        apply({"op": "job.place", "job": key, "node": node, "gpus": [gpu], "term": 1})
        apply({"op": "job.update", "job": key, "attempt": 1, "node": node, "state": "running"})
        apply({"op": "job.update", "job": key, "attempt": 1, "node": node, "state": "success",
               "reason": "exit code 0", "exit_code": 0, "output_version": f"{key}/output:1",
               "summary": {"metrics": {"loss": {"last": 0.1, "last_step": 690, "min": 0.05, "max": 2.3,
                                                "count": 30}}}})
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="200 jobs, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args(argv)
    jobs, rounds = (200, args.rounds or 2) if args.smoke else (10_000, args.rounds or 7)
    state = build(jobs)
    names = {nid: n["name"] for nid, n in state.nodes.items()}
    stored = [job.to_dict() for job in state.jobs.values()]     # what the state held before it held Jobs
    cases = {
        "read: copies (before)": lambda: copy_of(stored),
        "read: typed Jobs (now)": state.list_jobs,
        "listing: views of copies (before)": lambda: msgspec.json.encode(
            [old_job_view(j, names) for j in copy_of(stored)]),
        "listing: views of Jobs (now)": lambda: msgspec.json.encode([job_view(j, names) for j in state.list_jobs()]),
        "listing, each spec read (now)": lambda: msgspec.json.encode(
            [job_view(j, names) for j in state.list_jobs() if j.spec]),
        "page of 500, sorted by -time": lambda: msgspec.json.encode(
            [job_view(j, names) for j in filtered_and_sorted(state.list_jobs()[::-1], "", JobOrder.parse("-time"),
                                                             names, 1_900_000_000.0)[:500]]),
        "page of 500, filtered 'seed=1'": lambda: msgspec.json.encode(
            [job_view(j, names) for j in filtered_and_sorted(state.list_jobs()[::-1], filter_text("seed=1"),
                                                             JobOrder(), names, 1_900_000_000.0)[:500]]),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():         # interleaved: each round times every case once
            start = time.process_time()
            fn()
            times[name].append(time.process_time() - start)
    copies = copy_of(stored)
    views, old_views = [job_view(j, names) for j in state.list_jobs()], [old_job_view(raw, names) for raw in copies]
    same = [j.to_dict() for j in state.list_jobs()] == [Job.from_dict(raw).to_dict() for raw in copies] and \
        msgspec.json.encode(views) == msgspec.json.encode(old_views)     # keys in their order too
    print(f"job_reads: {jobs:,} ended jobs in the replicated state; CPU ms over {rounds} interleaved rounds")
    print(f"{'':<34} {'min':>8} {'median':>8} {'max':>8} {'vs before':>10}")
    for name, values in times.items():
        median = statistics.median(values)
        base = statistics.median(times["read: copies (before)" if name.startswith("read") else
                                       "listing: views of Jobs (now)" if name.startswith("page")
                                       else "listing: views of copies (before)"])
        print(f"{name:<34} {min(values) * 1e3:>8.1f} {median * 1e3:>8.1f} {max(values) * 1e3:>8.1f} "
              f"{median / base:>9.2f}x")
    print("(a page's ratio is to the views of every job, what a sort or a filter fetched before)")
    print(f"typed reads and their views match the copies and the old views: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
