"""Jobs as the API shows them: the :class:`~floydd.model.JobView` of a replicated
:class:`~floydd.model.Job` (:func:`job_view`) and of a record of this box's history
(:func:`history_view`), with their metric summaries and events (:func:`metric_views`,
:func:`event_view`); a listing's text filter and sort over both (:func:`filtered_and_sorted`).

A view answers as the daemon answered when it built dicts: its values are the stored ones (a
spec from an older release shows what it holds), and what the stored form leaves out is
``msgspec.UNSET`` in the view, which msgspec omits from the answer (:mod:`floydd.model.view`).
"""

from __future__ import annotations

from typing import Any, Mapping

from msgspec import UNSET

from floydd.cluster.state.commands import copy_of
from floydd.model import Job, JobOrder, JobView, Mount, job_text, matching, ordered
from floydd.model.view import EventView, MetricView, PartView, ResourcesView, RestartView

__all__ = ["job_view", "history_view", "metric_views", "event_view", "filtered_and_sorted"]


def job_view(job: Job, node_names: dict[str, str]) -> JobView:
    """A replicated job as the API and CLI show it (node ids named by ``node_names``); it
    shares no mutable value with the state (the job's stored spec and summary are the state's own)."""
    spec = job.stored_spec
    params, resources, restart = spec.get("params"), spec.get("resources"), spec.get("restart")
    imported = job.extra.get("imported")
    return JobView(
        command=spec.get("command"), params=None if params is None else dict(params), code_tree=spec.get("code_tree"),
        data=_mounts(spec.get("data")), resources=None if resources is None else _resources(resources),
        env=spec.get("env"), message=spec.get("message"), mode=spec.get("mode"), max_runtime=spec.get("max_runtime"),
        restart=None if restart is None else _restart(restart),
        id=job.id, project=job.project, number=job.number, state=job.state, reason=job.reason,
        waiting_for=job.waiting_for, created=job.created, started=job.started, ended=job.ended, gpus=job.gpu_ids,
        exit_code=job.exit_code, output_version=job.output_version, attempts=job.attempts,
        stop_requested=job.stop_requested, user=job.user, origin=job.origin, endpoint=job.endpoint,
        unknown_since=job.unknown_since, imported=None if imported is None else copy_of(imported),
        node=node_names.get(job.node, job.node or ""), node_id=job.node,
        metrics=metric_views(job.summary.get("metrics") or {}), workspace="", agent_pid=None, latest=None,
        attempt=job.attempts, reruns=job.reruns, archived=job.archived_at is not None,
        parts=tuple(PartView(rank=p.rank, node=node_names.get(p.node, p.node), gpus=p.gpu_ids, state=p.state,
                             exit_code=p.exit_code, reason=p.reason, node_id=p.node) for p in job.parts),
        history=False, events=UNSET, warnings=UNSET)


def history_view(record: Mapping[str, Any], metrics: Mapping[str, Mapping[str, Any]]) -> JobView:
    """A job of this box's history (attempt 0: :mod:`floydd.jobs.local`) from its record
    (:meth:`floydd.records.Records.get_job`) and metric summary: what a cluster's job has that
    it has not (``node_id``, ``restart``, ``reruns``...) is left out."""
    resources = record["resources"]
    return JobView(
        command=record["command"], params=record["params"], code_tree=record["code_tree"],
        data=_mounts(record["data"]), resources=None if resources is None else _resources(resources),
        env=record["env"], message=record["message"], mode=record["mode"], max_runtime=record["max_runtime"],
        restart=UNSET, id=record["id"], project=record["project"], number=record["number"], state=record["state"],
        reason=record["reason"], waiting_for=record["waiting_for"], created=record["created"],
        started=record["started"], ended=record["ended"], gpus=tuple(record["gpus"]), exit_code=record["exit_code"],
        output_version=record["output_version"], attempts=0, stop_requested="", user=record["user"], origin="",
        endpoint=None, unknown_since=UNSET, imported=UNSET, node=record["node"], node_id=UNSET,
        metrics=metric_views(metrics), workspace=record["workspace"], agent_pid=record["agent_pid"],
        latest=record["latest"], attempt=record["attempt"], reruns=UNSET, archived=UNSET, parts=(), history=True,
        events=UNSET, warnings=UNSET)


def metric_views(summary: Mapping[str, Mapping[str, Any]]) -> dict[str, MetricView]:
    """A metric summary (:meth:`floydd.records.Records.metric_summary`, a job's replicated summary) as views."""
    return {name: MetricView(last=m["last"], last_step=m["last_step"], last_ts=m.get("last_ts", UNSET),
                             min=m["min"], max=m["max"], count=m["count"]) for name, m in summary.items()}


def event_view(event: Mapping[str, Any]) -> EventView:
    """An event as the records (:meth:`floydd.records.Records.events`) or the cluster's history hold it."""
    return EventView(seq=event.get("seq", UNSET), ts=event["ts"], kind=event["kind"], message=event["message"],
                     data=event.get("data", UNSET))


def filtered_and_sorted(items: list[Job | JobView], needle: str, order: JobOrder, node_names: dict[str, str],
                        now: float) -> list[Job | JobView]:
    """``items`` (cluster jobs and views of this box's history, newest first) whose text holds
    ``needle`` (:func:`floydd.model.filter_text`; node ids named by ``node_names``), sorted by
    ``order``: the one rule of :mod:`floydd.model.order`, before a listing takes its page."""
    def text(item: Job | JobView) -> str:
        if isinstance(item, Job):
            spec = item.stored_spec
            return job_text(item.id, item.state, item.user, node_names.get(item.node, item.node or ""),
                            spec.get("command"), spec.get("params"))
        return job_text(item.id, item.state, item.user, item.node, item.command, item.params)
    return ordered(matching(items, needle, text), order, now)


def _mounts(data: list | None) -> tuple[Mount, ...]:
    return tuple(Mount(ref=m["ref"], tree=m["tree"], mount=m["mount"]) for m in data or ())


def _resources(raw: Mapping[str, Any]) -> ResourcesView:
    """As stored (:meth:`floydd.model.Resources.to_dict`): ``nodes``, ``cpus``, ``memory`` only when asked for."""
    return ResourcesView(gpus=raw.get("gpus", UNSET), cpu=raw.get("cpu", UNSET), nodes=raw.get("nodes", UNSET),
                         cpus=raw.get("cpus", UNSET), memory=raw.get("memory", UNSET))


def _restart(raw: Mapping[str, Any]) -> RestartView:
    return RestartView(policy=raw["policy"], max_attempts=raw["max_attempts"], lost_after=raw.get("lost_after", UNSET))
