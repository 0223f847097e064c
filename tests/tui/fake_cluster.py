"""A made-up cluster with the daemon API's shapes, for TUI tests and the TUI bench.

:class:`FakeCluster` holds nodes, GPUs and jobs generated from a seed; its
methods answer like :class:`floydd.client.Client` (same names, the same JSON
shapes, the same :mod:`floydd.errors` for bad requests): ``test_tui_contract.py``
holds its answers and a real daemon's to :mod:`floydd.api.schemas`. Nothing reads the
wall clock: time is ``cluster.now`` and moves only with :meth:`FakeCluster.tick`,
so the same arguments give the same answers (snapshot tests rely on it).
:class:`FakeClient` is the in-process client; ``stub_api.py`` serves the same
cluster over HTTP on a unix socket.
"""

from __future__ import annotations

import math
import random
import zlib
from typing import Iterator

from floydd.errors import Conflict, InvalidSpec, NotFound, Unavailable
from floydd.answers import decode_job
from floydd.model import JobOrder, JobView, MetricView, filter_text, job_text, matching, ordered

__all__ = ["FakeCluster", "FakeClient", "NOW"]

NOW = 1_700_000_000.0
GIB = 1 << 30


def job_view(**fields) -> JobView:
    """A job as the TUI holds it (decoded as the poller decodes the daemon's answers) with ``fields``;
    the rest empty."""
    return decode_job({"id": "p/1", "project": "p", "number": 1, "state": "running", **fields})


def metric_view(last: float | None) -> MetricView:
    """One metric's summary as the TUI holds it, with its last value."""
    return MetricView(last=last, last_step=None, min=None, max=None, count=1)
NAMES = ("atlas", "boreas", "cyrene", "delos", "eos", "faros", "gaia", "helios")
USERS = ("alice", "bob", "chen", "dana")
PROJECTS = ("mnist", "bert", "resnet")
ACTIVE = ("queued", "starting", "running")
FINISHED_POINTS = 40


class FakeCluster:
    """``gpus`` is a count for every node, or one count per node."""

    def __init__(self, *, nodes: int = 3, gpus: int | tuple[int, ...] = (4, 2, 0), jobs: int = 14,
                 projects: tuple[str, ...] = PROJECTS, now: float = NOW, seed: int = 1,
                 unhealthy: tuple[str, ...] = ("cyrene",)) -> None:
        """``unhealthy`` nodes are ``stale`` (their heartbeats stopped coming)."""
        self.now = now
        self.rng = random.Random(seed)
        counts = gpus if isinstance(gpus, tuple) else (gpus,) * nodes
        self.nodes = [self._node(i, counts[i]) for i in range(nodes)]
        for node in self.nodes:
            if node["name"] in unhealthy:
                node["health"] = "stale"
        self.jobs: dict[str, dict] = {}
        self._summary_cache: dict[tuple[str, int], dict] = {}
        self._make_jobs(jobs, projects)

    # -- generation ---------------------------------------------------------------------

    def _node(self, i: int, gpus: int) -> dict:
        name = NAMES[i] if i < len(NAMES) else f"ws{i:02d}"
        role = "leader" if i == 0 else "voter" if i < 5 else "learner"
        return {
            "id": _node_id(name), "name": name, "role": role, "health": "healthy",
            "address": f"10.0.0.{i + 10}:7443", "hostname": f"{name}.lab", "cpus": 32,
            "cpu_percent": 10.0 + (i * 7) % 50,
            "memory_total": 128 * GIB, "memory_available": (96 - (i * 5) % 40) * GIB,
            "disk_path": "/var/lib/floydd", "disk_total": 2048 * GIB, "disk_free": (1500 - i * 11) * GIB,
            "gpu_source": "fake" if gpus else "none",
            "gpus": [{"index": g, "uuid": f"GPU-{name}-{g}", "name": "NVIDIA RTX A6000",
                      "memory_total": 48 * GIB, "memory_used": 512 << 20, "utilization": 0,
                      "temperature": 34 + g, "power_w": 22.0, "fake": True, "job": None}
                     for g in range(gpus)],
        }

    def _make_jobs(self, count: int, projects: tuple[str, ...]) -> None:
        numbers = {p: 0 for p in projects}
        queued = max(1, count // 20)
        running = max(1, count // 4)
        for n in range(count):
            project = projects[n % len(projects)]
            numbers[project] += 1
            newest = count - 1 - n  # 0 for the newest job
            created = self.now - (newest + 1) * 600.0
            job = self._job(project, numbers[project], created, wants=1 + (n % 3 == 0))
            if newest < queued:
                job["waiting_for"] = f"no node has {job['resources']['gpus']} free GPUs"
            elif newest < queued + running and self._place(job):
                started = self.now - 60.0 * (5 + (n * 37) % 180)  # up to 3 hours ago
                job.update(state="running", created=started - 5.0, started=started)
            else:
                kind = ("failed" if n % 7 == 3 else "stopped" if n % 11 == 5 else
                        "timeout" if n % 23 == 9 else "success")
                started = created + 5.0
                job.update(state=kind, started=started, ended=started + 60.0 * (FINISHED_POINTS + n % 9),
                           exit_code={"success": 0, "failed": 1, "stopped": -15, "timeout": -9}[kind],
                           output_version=f"{job['id']}/output:1" if kind == "success" else None,
                           attempt=1, attempts=1)
                ran_on = self.nodes[n % len(self.nodes)]
                job.update(node=ran_on["name"], node_id=ran_on["id"])
                job["message"] = {"failed": "exit code 1: CUDA out of memory", "timeout": "max runtime exceeded"}.get(kind, "")
            self.jobs[job["id"]] = job
        self._refresh_gpus()

    def _job(self, project: str, number: int, created: float, wants: int) -> dict:
        key = f"{project}/{number}"
        lr = ("0.1", "0.01", "0.001", "0.0003")[number % 4]
        return {
            "id": key, "project": project, "number": number, "state": "queued", "reason": "",
            "command": f"python train.py --epochs {10 + number % 3 * 5}",
            "params": {"lr": lr, "batch": str(32 << (number % 3)), "optimizer": ("adam", "sgd")[number % 2]},
            "code_tree": f"{zlib.crc32(key.encode()):08x}" * 4,
            "data": [{"ref": f"{project}-data:{1 + number % 3}", "tree": f"{number:064x}", "mount": "/input"}],
            "resources": {"gpus": wants, "cpu": False}, "gpus": [], "env": "default", "message": "",
            "mode": "job", "max_runtime": None, "created": created, "started": None, "ended": None,
            "exit_code": None, "output_version": None, "node": "", "node_id": None, "workspace": "",
            "agent_pid": None, "latest": None, "attempt": 0, "attempts": 0, "stop_requested": "",
            "origin": self.nodes[0]["id"] if self.nodes else "", "endpoint": None, "parts": [],
            "user": USERS[(number + len(project)) % len(USERS)], "waiting_for": "",
        }

    def _place(self, job: dict) -> bool:
        wants = job["resources"]["gpus"]
        for node in self.nodes:
            free = [g for g in node["gpus"] if g["job"] is None]
            if node["health"] == "healthy" and len(free) >= wants:
                for g in free[:wants]:
                    g["job"] = job["id"]
                job.update(node=node["name"], node_id=node["id"], gpus=[g["index"] for g in free[:wants]],
                           attempt=1, attempts=1, agent_pid=20000 + job["number"],
                           workspace=f"/var/lib/floydd/jobs/{job['id']}")
                return True
        return False

    def _refresh_gpus(self) -> None:
        """Busy GPUs look busy; a seeded random walk so a history has a shape."""
        for node in self.nodes:
            for g in node["gpus"]:
                if g["job"]:
                    util = max(40, min(100, (g["utilization"] or 80) + self.rng.randint(-12, 12)))
                    g.update(utilization=util, memory_used=int((20 + util / 5) * GIB),
                             temperature=55 + util // 5, power_w=round(90.0 + util * 2.1, 1))
                else:
                    g.update(utilization=self.rng.randint(0, 3), memory_used=512 << 20,
                             temperature=34 + g["index"], power_w=22.0)
            node["cpu_percent"] = float(max(1, min(99, node["cpu_percent"] + self.rng.randint(-6, 6))))

    def tick(self, seconds: float = 1.0) -> None:
        """Time passes: GPUs move, running jobs log and report one more step."""
        self.now += seconds
        self._refresh_gpus()

    # -- series -------------------------------------------------------------------------

    def _points(self, job: dict) -> int:
        if not job.get("started"):
            return 0
        end = job.get("ended") or self.now
        return max(1, min(100_000, int((end - job["started"]) / 60.0) + 1))

    def series(self, job: dict) -> dict[str, list[list[float]]]:
        count = self._points(job)
        seed = zlib.crc32(job["id"].encode())
        tau = 8.0 + seed % 13 + float(job["params"]["lr"]) * 40
        loss, acc = [], []
        for step in range(count):
            noise = ((seed * (step + 7) * 2654435761) % 1000) / 1000.0 - 0.5
            value = 2.3 * math.exp(-step / tau) + 0.05 + noise * 0.04
            ts = job["started"] + step * 60.0
            loss.append([step * 10, round(value, 4), ts])
            acc.append([step * 10, round(max(0.0, min(1.0, 1.0 - value / 2.4)), 4), ts])
        return {"accuracy": acc, "loss": loss} if count else {}

    def _summary(self, job: dict) -> dict:
        count = self._points(job)
        cached = self._summary_cache.get((job["id"], count))
        if cached is None:
            cached = {name: {"last": pts[-1][1], "last_step": pts[-1][0], "min": min(p[1] for p in pts),
                             "max": max(p[1] for p in pts), "count": len(pts)}
                      for name, pts in self.series(job).items()}
            self._summary_cache[(job["id"], count)] = cached
        return cached

    def _log_bytes(self, job: dict) -> bytes:
        if not job.get("started"):
            return b""
        t0 = job["started"]
        lines = [f"{t0:.3f} o loading data from /input ({job['data'][0]['ref']})",
                 f"{t0 + 0.5:.3f} e warning: falling back to 4 dataloader workers"]
        loss = self.series(job).get("loss", [])
        for i, (step, value, ts) in enumerate(loss):
            lines.append(f"{ts:.3f} o epoch {i + 1} step {step} loss={value:.4f}")
        if job["state"] == "failed":
            lines.append(f"{job['ended']:.3f} e RuntimeError: CUDA out of memory")
        return "".join(line + "\n" for line in lines).encode()

    # -- the API --------------------------------------------------------------------------

    def get(self, key: str) -> dict:
        if "/" not in key:
            raise InvalidSpec(f"{key!r} is not a job name", hint="jobs are named PROJECT/NUMBER")
        job = self.jobs.get(key)
        if job is None:
            raise NotFound(f"no job {key}", hint="`floyd status` lists jobs")
        return job

    def info(self) -> dict:
        leader = self.nodes[0]["name"] if self.nodes else "?"
        leader_id = self.nodes[0]["id"] if self.nodes else ""
        return {"version": "0.1.0", "node": leader, "pid": 4242, "state_dir": "/var/lib/floydd",
                "socket": "/var/lib/floydd/api.sock", "log": "/var/lib/floydd/floydd.log",
                "started": self.now - 18000, "uptime": 18000.0, "sandbox": "bwrap",
                "running": sum(j["state"] == "running" for j in self.jobs.values()),
                "role": "leader", "cluster_size": len(self.nodes),
                "cluster": leader_id, "leader": leader_id or None}

    def list_nodes(self) -> list[dict]:
        return self.nodes

    def list_jobs(self, project: str | None = None, state: str | None = None, limit: int | None = None,
                  offset: int = 0, sort: str | None = None, q: str | None = None) -> list[dict]:
        """Newest first or by ``sort``, with the text filter ``q``, as the daemon lists them
        (the rule of :mod:`floydd.model.order`; ``state``: comma-separated, as the API takes it)."""
        states = set(state.split(",")) if state else None
        out = []
        for job in reversed(list(self.jobs.values())):
            if (project and job["project"] != project) or (states and job["state"] not in states):
                continue
            out.append(job)
        order, needle = JobOrder.parse(sort), filter_text(q)
        if needle or not order.newest_first:
            out = ordered(matching(out, needle, _text), order, self.now, _Fields)
        out = out[offset:] if limit is None else out[offset:offset + limit]
        return [{**job, "metrics": self._summary(job)} for job in out]

    def job(self, key: str) -> dict:
        job = self.get(key)
        events = [{"ts": job["created"], "kind": "submitted", "message": f"by {job['user']}"}]
        if job["started"]:
            events.append({"ts": job["started"], "kind": "started",
                           "message": f"on {job['node']}, GPUs {','.join(map(str, job['gpus'])) or '-'}"})
        if job["ended"]:
            events.append({"ts": job["ended"], "kind": job["state"], "message": f"exit code {job['exit_code']}"})
        return {**job, "metrics": self._summary(job), "events": events}

    def metrics(self, key: str) -> dict:
        job = self.get(key)
        series = self.series(job)
        system = [{"ts": p[2], "cpu_percent": 50.0, "rss_bytes": 2 * GIB, "gpu_util": 90, "gpu_mem_bytes": 20 * GIB}
                  for p in series.get("loss", [])[-20:]]
        return {"metrics": series, "system": system}

    def logs(self, key: str, offset: int = 0) -> list[bytes]:
        data = self._log_bytes(self.get(key))[offset:]
        return data.splitlines(keepends=True)

    def stop(self, key: str) -> dict:
        job = self.get(key)
        if job["state"] not in ACTIVE:
            raise Conflict(f"{key} is not running (it is {job['state']})", hint="only active jobs can be stopped")
        for node in self.nodes:
            for g in node["gpus"]:
                if g["job"] == key:
                    g["job"] = None
        job.update(state="stopped", ended=self.now, exit_code=-15, message="stopped by user")
        return {**job, "metrics": self._summary(job)}

    def restart(self, key: str, overrides: dict) -> dict:
        old = self.get(key)
        number = 1 + max(j["number"] for j in self.jobs.values() if j["project"] == old["project"])
        job = self._job(old["project"], number, self.now, old["resources"]["gpus"])
        job["params"] = {**old["params"], **(overrides.get("params") or {})}
        job["command"] = old["command"]
        self.jobs[job["id"]] = job
        return {**job, "metrics": {}}

    def compare(self, keys: list[str]) -> dict:
        jobs = [self.get(k) for k in keys]
        params = sorted({p for j in jobs for p in j["params"]})
        summaries = {j["id"]: self._summary(j) for j in jobs}
        metric_names = sorted({m for s in summaries.values() for m in s})
        out = []
        for j in jobs:
            entry = {}
            for m in metric_names:
                s = summaries[j["id"]].get(m)
                goal = "min" if "loss" in m else "max"
                entry[m] = None if s is None else {"last": s["last"], "best": s["min"] if goal == "min" else s["max"],
                                                   "goal": goal, "count": s["count"]}
            out.append({"id": j["id"], "state": j["state"], "message": j["message"], "command": j["command"],
                        "params": dict(j["params"]), "metrics": entry})
        return {"params": params, "metrics": metric_names, "jobs": out}


class FakeClient:
    """In-process stand-in for :class:`floydd.client.Client` over a :class:`FakeCluster`.

    ``calls`` records every API call by name, ``listed`` what each ``jobs`` call asked for
    (its keywords); set ``down`` to make every call
    raise :class:`~floydd.errors.Unavailable`, as a dead daemon does.
    """

    def __init__(self, cluster: FakeCluster | None = None) -> None:
        self.cluster = cluster or FakeCluster()
        self.calls: list[str] = []
        self.listed: list[dict] = []
        self.down = False
        self.where = "/tmp/fake/api.sock"

    def _enter(self, name: str) -> FakeCluster:
        self.calls.append(name)
        if self.down:
            raise Unavailable(f"no floydd daemon answers at {self.where} (Connection refused)",
                              hint="start one with `floydd start`")
        return self.cluster

    def info(self) -> dict:
        return self._enter("info").info()

    def nodes(self) -> list[dict]:
        return self._enter("nodes").list_nodes()

    def jobs(self, project: str | None = None, state: str | None = None, *, limit: int | None = None,
             offset: int = 0, sort: str | None = None, q: str | None = None) -> list[dict]:
        self.listed.append({"project": project, "state": state, "limit": limit, "offset": offset, "sort": sort, "q": q})
        return self._enter("jobs").list_jobs(project, state, limit=limit, offset=offset, sort=sort, q=q)

    def job(self, key: str) -> dict:
        return self._enter("job").job(key)

    def metrics(self, key: str) -> dict:
        return self._enter("metrics").metrics(key)

    def logs(self, key: str, *, follow: bool = False, offset: int = 0) -> Iterator[bytes]:
        return iter(self._enter("logs").logs(key, offset))

    def stop(self, key: str) -> dict:
        return self._enter("stop").stop(key)

    def restart(self, key: str, overrides: dict) -> dict:
        return self._enter("restart").restart(key, overrides)

    def compare(self, keys: list[str]) -> dict:
        return self._enter("compare").compare(list(keys))


def _node_id(name: str) -> str:
    """A node's id: 16 hex digits, as the daemon's."""
    return f"{zlib.crc32(name.encode()):08x}{zlib.crc32(name[::-1].encode()):08x}"


def _text(job: dict) -> str:
    """What the daemon's text filter looks in (:func:`floydd.model.job_text`)."""
    return job_text(job["id"], job["state"], job["user"], job["node"], job["command"], job["params"])


class _Fields:
    """A job's dict read as :class:`floydd.model.order.Sortable`, as the daemon sorts its jobs."""

    __slots__ = ("created", "number", "state", "project", "user", "started", "ended")

    def __init__(self, job: dict) -> None:
        for name in self.__slots__:
            setattr(self, name, job[name])
