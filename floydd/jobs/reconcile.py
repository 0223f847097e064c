"""This node's half of the cluster's jobs: reconcile the committed state with the runtime.

A mixin of :class:`~floydd.jobs.cluster.ClusterJobService` (its state lives there). Each
node *reconciles* (level-triggered, like a kubelet): it compares the committed state (jobs,
or parts of gang jobs, placed on it) with its own records and acts on the difference —
start what it was given (local record, code and data fetched from the boxes holding them,
a gang's rendezvous), report what its runtime did (``job.update`` fenced by attempt, node
and rank), stop what it was told to stop or what the cluster gave up on. Every step can be
repeated after a crash or a lost answer, so it is driven by "what is" rather than by
events; applied entries only wake it early.

    committed (placed here)      local record         action
    ───────────────────────      ────────────         ──────
    starting / running           none, or older       make the record, fetch inputs, start
    starting                     running              report running
    running                      running              report the metric summary now and then
    any                          final                report final state, exit code, output
    stop requested               not final            stop it here
    not here / final / gone      running here         stop it here (the cluster gave it up)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from floydd import log
from floydd.errors import Conflict, FloyddError, NotFound, Unavailable
from floydd.jobs.gang import free_port, gang_env, interface_for, single_box_command, torchrun_command
from floydd.jobs.leader import REPORT_TIMEOUT, every_second_or_sooner
from floydd.jobs.service import _pin
from floydd.model import ACTIVE_STATES, FINAL_STATES, SPEC_FIELDS, parse_job_key
from floydd.store import ObjectId

__all__ = ["Reconciler"]

_log = log.scheduler.getChild("cluster")
_MAX_SUMMARY_METRICS = 64


class Reconciler:
    """Methods of ClusterJobService that run this node's part of the cluster's jobs."""

    async def _reconcile_forever(self) -> None:
        await every_second_or_sooner(self._reconcile_wake, self._reconcile, "reconciling this node's jobs")

    async def _reconcile(self) -> None:
        state = self.cluster.state
        mine = [state.job(k) for k, j in list(state.jobs.items()) if _unsettled(j, self.node_id)]
        for job in mine:
            await self._reconcile_job(job)
        active = {j["id"] for j in mine}
        for memo in (self._reported, self._summary_due):   # forget jobs no longer active here
            for key in [k for k in memo if k not in active]:
                del memo[key]
        held = self.runtime.running()
        for project, number in list(held):         # runs here that the cluster no longer wants here
            key = f"{project}/{number}"
            job = state.jobs.get(key)
            local = await asyncio.to_thread(self.records.get_job, project, number)
            if local.get("attempt", 0) == 0 or key in self._stopping:
                continue
            if job is not None and job["attempts"] == local["attempt"] and job["state"] in FINAL_STATES \
                    and job.get("parts"):
                self._spawn(self._stop_local(key, f"the job ended ({job['reason'] or job['state']})"))
            elif job is None or _part_of(job, self.node_id) is None or job["attempts"] != local["attempt"] \
                    or job["state"] in FINAL_STATES:
                why = "the cluster gave this run up (its node was out of touch) and may run it elsewhere"
                self._spawn(self._stop_local(key, why))

    async def _reconcile_job(self, job: dict) -> None:
        key = job["id"]
        project, number = job["project"], job["number"]
        part = _part_of(job, self.node_id)
        if key in self._launching:
            return
        try:
            local = await asyncio.to_thread(self.records.get_job, project, number)
        except NotFound:
            local = None
        if local is not None and local.get("attempt", 0) == 0:
            await self._report(job, state="failed", reason=f"node {self.cluster.name} already has a job "
                               f"{key} from before it joined the cluster; submit it again")
            return
        if job["state"] in FINAL_STATES:            # a gang that ended: settle this part's report
            never = "the job ended before this part started"
            if local is None or local["attempt"] < job["attempts"]:
                await self._report(job, state="stopped", reason=never)
            elif local["attempt"] != job["attempts"]:
                pass
            elif local["state"] in FINAL_STATES:
                await self._report_final(job, local)
            elif local["state"] == "queued" and (project, number) not in self.runtime.running():
                await asyncio.to_thread(self.records.set_state, project, number, "stopped", never)
                self.wake()
            return
        if local is None or (local["attempt"] < job["attempts"] and local["state"] in FINAL_STATES):
            self._launching.add(key)
            self._spawn(self._launch(job, replace=local is not None))
            return
        if local["attempt"] != job["attempts"]:
            return
        if job["stop_requested"] and local["state"] not in FINAL_STATES and key not in self._stopping:
            self._spawn(self._stop_local(key, job["stop_requested"]))
        if local["state"] == "queued" and (project, number) not in self.runtime.running():
            self._launching.add(key)                # a launch cut short by a restart
            self._spawn(self._launch(job, replace=False))
        elif local["state"] == "running" and part["state"] == "starting":
            await self._report(job, state="running")
        elif local["state"] == "running" and part["rank"] in (None, 0) \
                and time.monotonic() >= self._summary_due.get(key, 0.0):
            # metrics so far, so every box lists them (3 heartbeats apart: a few raft writes a minute)
            self._summary_due[key] = time.monotonic() + 3 * self.cluster.config.heartbeat_interval
            await self._report(job, summary=await self._summary(job))
        elif local["state"] in FINAL_STATES:
            await self._report_final(job, local)

    async def _launch(self, job: dict, *, replace: bool) -> None:
        """Make the local record of this placement, bring its inputs here, start it."""
        key, project, number = job["id"], job["project"], job["number"]
        try:
            if replace:
                await asyncio.to_thread(self.records.delete_job, project, number)
            spec = job["spec"]
            fields = {name: spec[name] for name in SPEC_FIELDS if spec.get(name) is not None}
            fields.update(attempt=job["attempts"], user=job["user"], node=self.config.node_name,
                          created=job["created"])
            try:
                await asyncio.to_thread(self.records.insert_job, project, number, fields)
            except Conflict:
                pass                                # a relaunch after a restart: the record is there
            try:
                await self._fetch_inputs(job)
            except FloyddError as exc:
                await asyncio.to_thread(self.records.set_state, project, number, "failed",
                                        f"could not bring its inputs to {self.config.node_name}: {exc.message}")
                return
            current = self.cluster.state.jobs.get(key) or {}
            if current.get("stop_requested"):
                await asyncio.to_thread(self.records.set_state, project, number, "stopped", current["stop_requested"])
                return
            part = _part_of(job, self.node_id)
            command, env = single_box_command(spec["command"], len(part["gpus"])), None
            if part["rank"] is not None:
                endpoint = await self._rendezvous(job, part["rank"])
                if endpoint is None:
                    await asyncio.to_thread(self.records.set_state, project, number, "stopped",
                                            "the job ended or was stopped before this part started")
                    return
                host, _, port = endpoint.rpartition(":")
                nnodes = len(job["parts"])
                command = torchrun_command(spec["command"], nnodes=nnodes, rank=part["rank"],
                                           nproc=max(1, len(part["gpus"])), host=host, port=int(port))
                mine = self.cluster.state.nodes[self.node_id]["address"]
                env = gang_env(nnodes=nnodes, rank=part["rank"], host=host, port=int(port),
                               ifname=await asyncio.to_thread(interface_for, mine))
                for name in spec.get("params") or {}:   # the job's own choice wins
                    env.pop(name, None)
            await self.runtime.start_job(project, number, list(part["gpus"]), command=command, env=env)
        except Exception as exc:
            _log.exception("starting %s failed", key)
            try:
                local = await asyncio.to_thread(self.records.get_job, project, number)
                if local["state"] not in FINAL_STATES:
                    await asyncio.to_thread(self.records.set_state, project, number, "failed",
                                            f"could not start: {exc}")
            except FloyddError:
                pass
        finally:
            self._launching.discard(key)
            self.wake()

    async def _rendezvous(self, job: dict, rank: int) -> str | None:
        """The gang's ``host:port``: rank 0 picks a free port on this box and commits it;
        the other ranks wait until it is committed. None when the attempt is over first."""
        key = job["id"]
        endpoint = None
        if rank == 0 and not job.get("endpoint"):
            host = self.cluster.state.nodes[self.node_id]["address"]
            endpoint = f"{host}:{await asyncio.to_thread(free_port)}"
        while True:
            changed = self._job_changed
            current = self.cluster.state.jobs.get(key)
            if current is None or current["attempts"] != job["attempts"] or current["state"] not in ACTIVE_STATES \
                    or current["stop_requested"]:
                return None
            if current.get("endpoint"):
                return current["endpoint"]
            if endpoint is not None:
                try:                                # retried through a change of leader
                    await self.cluster.update_job(key, attempt=job["attempts"], node=self.node_id, rank=0,
                                                  endpoint=endpoint, timeout=REPORT_TIMEOUT)
                    endpoint = None                 # committed: wait below until it is applied here
                    continue
                except Unavailable as exc:
                    _log.info("committing the rendezvous of %s: %s (trying again)", key, exc)
            try:
                await asyncio.wait_for(changed.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def _fetch_inputs(self, job: dict) -> None:
        spec = job["spec"]
        tree = spec["code_tree"]
        await self._ensure_tree(tree, self._code_sources(tree))
        await asyncio.to_thread(self.store.catalog.pin, ObjectId.from_hex(tree), _pin(job["project"], job["number"]))
        for mount in spec.get("data") or ():
            if self.datasets is not None:
                await self.datasets.ensure_local(mount["tree"], self._holders(mount["ref"]))
            else:
                await self._ensure_tree(mount["tree"], self._holders(mount["ref"]))

    def _code_sources(self, tree: str) -> list[str]:
        """Nodes likely to hold a code tree: where jobs with it were submitted, then where they ran."""
        jobs = [j for j in self.cluster.state.jobs.values() if j["spec"].get("code_tree") == tree]
        ids = [j["origin"] for j in jobs] + [j["node"] for j in jobs]
        return [n for n in dict.fromkeys(ids) if n and n != self.node_id]

    def _holders(self, ref: str) -> list[str]:
        name, _, number = ref.rpartition(":")
        version = self.cluster.state.datasets.get(name, {}).get("versions", {}).get(number, {})
        return [n for n in version.get("holders", []) if n != self.node_id]

    async def _ensure_tree(self, tree: str, sources: list[str]) -> None:
        oid = ObjectId.from_hex(tree)
        if await asyncio.to_thread(self._has_tree, oid):
            return
        if self._fetch_tree is None:
            raise Unavailable(f"tree {tree[:12]} is not on this node and no peer fetch is configured")
        others = [n for n in self.cluster.state.nodes if n != self.node_id and n not in sources]
        await self._fetch_tree(self.store, tree, sources + others, self.cluster.transport)

    def _has_tree(self, oid: ObjectId) -> bool:
        if not self.store.backend.has(oid):
            return False
        try:
            tree = self.store.read_tree(oid)
        except FloyddError:
            return False
        return all(self.store.backend.has(c) for c in tree.chunk_ids())

    async def _stop_local(self, key: str, reason: str) -> None:
        project, number = parse_job_key(key)
        self._stopping.add(key)
        try:
            if (project, number) in self.runtime.running():
                await self.runtime.stop_job(project, number, reason)
        except FloyddError as exc:
            _log.warning("stopping %s here: %s", key, exc)
        finally:
            self._stopping.discard(key)
            self.wake()

    async def _report(self, job: dict, **fields: Any) -> None:
        """Tell the cluster what happened to this node's attempt (fenced by attempt and node)."""
        key = job["id"]
        rank = (_part_of(job, self.node_id) or {}).get("rank")
        if rank is not None:
            fields["rank"] = rank
        stamp = (job["attempts"], tuple(sorted((k, repr(v)) for k, v in fields.items())))
        if self._reported.get(key) == stamp:        # sent and not yet seen applied: not again yet
            return
        self._reported[key] = stamp
        try:
            await self.cluster.update_job(key, attempt=job["attempts"], node=self.node_id,
                                          timeout=REPORT_TIMEOUT, **fields)
        except Conflict as exc:
            _log.info("report on %s refused: %s", key, exc)
        except FloyddError as exc:
            _log.info("report on %s not committed (will retry): %s", key, exc)
            self._reported.pop(key, None)

    async def _report_final(self, job: dict, local: dict) -> None:
        part = _part_of(job, self.node_id)
        if part["state"] == "starting" and local["state"] in ("success", "timeout"):
            await self._report(job, state="running")  # it ran and ended between two looks
        fields: dict[str, Any] = {"state": local["state"], "reason": local["reason"] or "",
                                  "exit_code": local["exit_code"]}
        if part["rank"] in (None, 0):                 # rank 0 speaks for a gang: metrics, /output
            fields["summary"] = await self._summary(job)
            if local.get("output_version"):
                fields["output_version"] = await self._publish_output(job, local["output_version"])
        await self._report(job, **fields)

    async def _summary(self, job: dict) -> dict:
        summary = await asyncio.to_thread(self.records.metric_summary, job["project"], job["number"])
        return {"metrics": dict(list(summary.items())[:_MAX_SUMMARY_METRICS]), "ran_on": self.cluster.name}

    async def _publish_output(self, job: dict, ref: str) -> str:
        """Put the job's /output version in the cluster catalog (this node holds it)."""
        version = await asyncio.to_thread(self.store.catalog.resolve, ref)
        try:
            added = await self.cluster.add_dataset_version(
                version.name, str(version.tree), idem_key=f"output:{job['id']}:{job['attempts']}",
                size=int(version.size or 0), files=int(version.files or 0), message=f"output of {job['id']}",
                timeout=REPORT_TIMEOUT)
            return added["ref"]
        except FloyddError as exc:
            _log.info("publishing the output of %s: %s", job["id"], exc)
            return ref


def _part_of(job: dict, node_id: str) -> dict | None:
    """``node_id``'s part of a placed job: rank (None for a job on one node), node, gpus, state."""
    parts = job.get("parts") or ()
    for part in parts:
        if part["node"] == node_id:
            return part
    if not parts and job["node"] == node_id:
        return {"rank": None, "node": node_id, "gpus": job["gpus"], "state": job["state"]}
    return None


def _unsettled(job: dict, node_id: str) -> bool:
    """Is there something for ``node_id`` to do about this job: run or report its part (a
    gang's part is reported even after the job ended, so every part ends up final)?"""
    part = _part_of(job, node_id)
    if part is None:
        return False
    return job["state"] in ACTIVE_STATES or (part["rank"] is not None and part["state"] in ACTIVE_STATES)
