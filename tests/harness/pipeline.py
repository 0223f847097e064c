"""The job pipeline in one event loop: real control planes, records, stores, catalogs and job
services; a fake runtime (no processes) whose runs a test ends as it likes.

:class:`Lone` is a box alone (a one-voter cluster, no listener, no certificate), as the
daemon runs by default; :class:`Boxes` is N nodes of the cluster harness with the whole
node-to-node app (store objects, job details) on their mTLS listeners. A job the harness
hands a test (:meth:`Box.run`, ``ended``) is the job as the API sends it (:func:`answered`).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

import msgspec

from floydd.cluster.config import TEST_CONFIG
from floydd.cluster.replication.datasets import ClusterDatasets
from floydd.cluster.replication.peerstore import fetch_tree
from floydd.cluster.service import ClusterService
from floydd.config import preset_for_tests
from floydd.daemon.peers import peer_app
from floydd.errors import Conflict
from floydd.jobs.service import JobService
from floydd.model import FINAL_STATES, Job, Submission
from floydd.records import Records
from floydd.runtime import checkpoint
from floydd.runtime.disk import Disk
from floydd.runtime.sandboxing import Sandboxing
from floydd.security.identity import NodeIdentity
from floydd.store import Store
from tests.conftest import wait_until_async
from tests.harness.cluster import Cluster, Node

Key = tuple[str, int]


def answered(value: object) -> object:
    """A job (:class:`~floydd.model.JobView`) or a list of them as the API sends it: the JSON
    of the job service's answer, read back (what these tests compare)."""
    return json.loads(msgspec.json.encode(value))


class FakeRuntime:
    """:class:`~floydd.runtime.NodeRuntime`'s interface over the records, without processes.

    A run of ``true`` succeeds and one of ``false`` fails (exit 1) as soon as it runs; ``save``
    succeeds having written ``/output/model.txt`` (saved as the job's output, as the real
    runtime does); any other command runs until the test calls :meth:`finish` or someone
    stops it. Each run writes one log line, ``ran COMMAND``, to ``WORKSPACE/job.log``."""

    sandbox_mode = "none"
    sandboxing = Sandboxing(policy="off", bwrap=None, why="a test double runs no processes")

    def __init__(self, records: Records, store: Store, jobs_dir: Path) -> None:
        self.records, self.store, self.jobs_dir = records, store, jobs_dir
        self.on_finished = None
        self.held: dict[Key, list[int]] = {}
        self.started: list[dict] = []
        self.disk = Disk(jobs_dir)  # the real one: only its checks are used (a test disk has room)

    def running(self) -> dict[Key, list[int]]:
        return {k: list(v) for k, v in self.held.items()}

    async def reattach(self) -> None:
        for job in self.records.list_jobs(None, ["starting", "running"]):
            self.held[(job["project"], job["number"])] = list(job["gpus"])

    async def scan_runs(self) -> dict:
        """Runs found by their processes (none: a fake run has no process)."""
        return {}

    async def sweep(self) -> int:
        return 0

    async def checkpoint(self, project: str, number: int, previous: str | None = None):
        """The real runtime's snapshot of ``/output`` (a ``ckpt`` run writes one file there)."""
        if (project, number) not in self.held:
            return None
        output = self.jobs_dir / project / str(number) / "output"
        return await asyncio.to_thread(checkpoint.save, output, self.store, previous)

    async def start_job(self, project: str, number: int, gpus: list[int], *, command: str | None = None,
                        env: dict | None = None, resume: str | None = None) -> None:
        key = (project, number)
        if key in self.held:
            return
        job = self.records.get_job(project, number)
        if job["state"] != "queued":
            raise Conflict(f"{project}/{number} is {job['state']}; only a queued job can start")
        self.held[key] = list(gpus)
        ws = self.jobs_dir / project / str(number)
        ws.mkdir(parents=True, exist_ok=True)
        command = command or job["command"]
        (ws / "job.log").write_text(f"ran {command}\n")
        self.started.append({"key": f"{project}/{number}", "gpus": list(gpus), "command": command, "env": env,
                             "resume": resume})
        self.records.set_state(project, number, "starting", "", gpus=list(gpus), workspace=str(ws))
        self.records.set_state(project, number, "running", "", agent_pid=0)
        if job["command"] == "ckpt":            # runs on, with a checkpoint in /output
            (ws / "output").mkdir(exist_ok=True)
            (ws / "output" / "step.txt").write_text(f"attempt {job['attempt']}\n")
        if job["command"] == "save":
            (ws / "output").mkdir()
            (ws / "output" / "model.txt").write_text(f"trained {project}/{number}\n")
            version = self.store.upload(ws / "output", f"{project}/{number}/output")
            self.records.update_job(project, number, output_version=version.ref)
        if job["command"] == "empty":           # /output was empty: the runtime saves no version
            self.records.update_job(project, number, output_version="")
        if job["command"] in ("true", "false", "save", "empty"):
            self.finish(key, "failed" if job["command"] == "false" else "success",
                        exit_code=1 if job["command"] == "false" else 0)

    async def stop_job(self, project: str, number: int, reason: str = "stopped by user") -> None:
        if (project, number) in self.held:
            self.finish((project, number), "stopped", reason=reason)

    def request_stop(self, project: str, number: int, reason: str = "stopped by user", *,
                     outcome: str = "stopped") -> bool:
        if (project, number) not in self.held:
            return False
        self.finish((project, number), outcome, reason=reason)
        return True

    def finish(self, key: Key, state: str = "success", *, exit_code: int | None = 0, reason: str = "") -> None:
        self.records.set_state(*key, state, reason, exit_code=exit_code)
        del self.held[key]
        if self.on_finished is not None:
            self.on_finished(*key)

    async def close(self) -> None:
        pass


@dataclass
class Box:
    """One node's job pipeline: records, store, catalog, runtime and job service."""

    name: str
    folder: Path
    service: ClusterService
    records: Records
    store: Store
    datasets: ClusterDatasets | None = None
    runtime: FakeRuntime | None = None
    jobs: JobService | None = None
    project: Path = field(default=None)  # type: ignore[assignment]
    replica_grace: float | None = None
    """Seconds a silent holder's copies still count (None: the daemon's default)."""

    async def attach(self) -> None:
        """Start the dataset catalog and the job service over ``service`` (started)."""
        grace = {} if self.replica_grace is None else {"grace": self.replica_grace}
        self.datasets = ClusterDatasets(self.service, self.store, state=self.service.state, retry=(0.05, 0.2),
                                        import_marker=self.folder / "cluster" / "imported-datasets", **grace)
        self.datasets.start()
        config = preset_for_tests(self.folder, node_name=self.name, checkpoint_interval=0.3)
        self.runtime = FakeRuntime(self.records, self.store, config.jobs_dir)
        service = self.service

        async def fetch(store, tree, sources):
            return await fetch_tree(store, tree, sources, service.transport)
        self.jobs = JobService(config=config, cluster=service, datasets=self.datasets, records=self.records,
                               store=self.store, runtime=self.runtime, fetch_tree=fetch, lost_after=2.0)
        self.runtime.on_finished = self.jobs.on_finished
        await self.jobs.start()
        self.project = self.folder / "project"
        self.project.mkdir(exist_ok=True)
        (self.project / "train.py").write_text(f"print('hello from {self.name}')\n")

    async def detach(self) -> None:
        if self.jobs is not None:
            await self.jobs.close()
        if self.datasets is not None:
            await self.datasets.close()
        self.jobs = self.datasets = None

    async def run(self, command: str = "true", **fields) -> dict:
        """``floyd run COMMAND`` from this box: the job as committed."""
        fields.setdefault("project", "mnist")
        submission = Submission(command=command, code_path=str(self.project), **fields)
        return answered(await self.jobs.submit(submission, user="alice"))

    def job(self, key: str) -> Job | None:
        """The job in this node's copy of the replicated state."""
        return self.service.state.jobs.get(key)


class _Boxes:
    boxes: list[Box]
    wait_for: Callable[..., Awaitable[object]]

    async def ended(self, box: Box, key: str, timeout: float = 10.0) -> dict:
        """The job once every box's copy of the state says it ended."""
        await self.wait_for(lambda: all((job := b.job(key)) is not None and job.state in FINAL_STATES
                                            for b in self.boxes),
                            timeout, what=f"{key} to end")
        return answered(await box.jobs.get(key))


class Lone(_Boxes):
    """A box alone: a one-voter control plane with no listener, as the daemon runs by default."""

    def __init__(self, root: Path, gpus: list[int] = (0, 1), **resources) -> None:
        self.root = root
        self.gpus = list(gpus)
        self.resources = resources
        """More of the box's resources (``cpus``, ``memory``), as its inventory would report them."""
        self.boxes = []

    async def wait_for(self, cond, timeout: float = 10.0, what: str = "condition"):
        return await wait_until_async(cond, timeout, what=what)

    async def start(self) -> Box:
        folder = self.root / "box"
        identity = NodeIdentity.load_or_create(folder / "tls")
        service = ClusterService(identity, folder / "cluster", name="box", advertise="", config=TEST_CONFIG,
                                 resources={"gpus": self.gpus, **self.resources}, rng=random.Random(7))
        await service.start(bootstrap=True)
        box = Box(name="box", folder=folder, service=service, records=Records(folder / "records.db"),
                  store=Store.open(folder / "store"))
        await box.attach()
        self.boxes = [box]
        return box

    async def restart(self, box: Box) -> Box:
        """The daemon stopped cleanly and started again on the same state folder."""
        await box.detach()
        await box.service.close()
        box.service = ClusterService(box.service.identity, box.folder / "cluster", name="box", advertise="",
                                     config=TEST_CONFIG, resources={"gpus": self.gpus, **self.resources}, rng=random.Random(8))
        await box.service.start(bootstrap=True)
        await box.attach()
        return box

    async def close(self) -> None:
        for box in self.boxes:
            await box.detach()
            await box.service.crash()
            box.records.close()
            box.store.close()


class Boxes(_Boxes, Cluster):
    """N nodes of the cluster harness (mTLS on loopback), each with a whole job pipeline."""

    def __init__(self, root: Path, *, replica_grace: float | None = None) -> None:
        Cluster.__init__(self, root)
        self.by_node: dict[str, Box] = {}
        self.replica_grace = replica_grace

    @property
    def boxes(self) -> list[Box]:
        return [self.by_node[n.name] for n in self.nodes if n.alive and n.name in self.by_node]

    def node(self, box: Box) -> Node:
        return next(n for n in self.nodes if n.name == box.name)

    def box(self, node: Node) -> Box:
        if node.name not in self.by_node:
            folder = node.folder
            store_dir = folder / "store"
            if self.by_node:                      # one store secret, as after a join
                store_dir.mkdir(mode=0o700, parents=True)
                shutil.copy(next(iter(self.by_node.values())).store.root / "key", store_dir / "key")
            self.by_node[node.name] = Box(name=node.name, folder=folder, service=node.service,
                                          records=Records(folder / "records.db"), store=Store.open(store_dir),
                                          replica_grace=self.replica_grace)
        box = self.by_node[node.name]
        box.service = node.service
        return box

    async def _listen(self, node: Node) -> None:
        box = self.box(node)
        address = await node.service.listen("127.0.0.1", node.port,
                                            app=peer_app(node.service, store=box.store, jobs=lambda: box.jobs))
        node.port = int(address.rsplit(":", 1)[1])

    async def start(self, n: int) -> list[Box]:
        nodes = await Cluster.start(self, n)
        await self.wait_for(lambda: all(len(node.service.state.nodes) == n for node in nodes),
                            what=f"every node to know all {n}")
        for node in nodes:
            await self.box(node).attach()
        return [self.box(node) for node in nodes]

    async def close(self) -> None:
        for box in self.by_node.values():
            await box.detach()
        await Cluster.close(self)
        for box in self.by_node.values():
            box.records.close()
            box.store.close()

