"""``/v1/jobs``: submit, list, inspect, stop, restart, delete, logs, outputs, compare.

Every road to a job's code, output, logs and metrics asks :mod:`floydd.cluster.state.access` (with
this box's read rules) before it reads anything, on this box or from the box that ran the
job (the peer routes serve boxes, not people: the person is checked here, first). People
send code as a folder (``POST /v1/code``, answered with a handle) or a path of the daemon's
own user, never as a tree id."""

from __future__ import annotations

import asyncio
import os
from dataclasses import fields, replace
from typing import Any

import msgspec
from aiohttp import web

from floydd import logframe
from floydd.api import keys
from floydd.api.params import query_float, query_int, query_stale
from floydd.api.request import (acting_person, acting_user, body, check_dest, convert, error_event, ndjson, reply,
                                restore_into, same_user_only)
from floydd.api.tarstream import received_folder, send_tree
from floydd.cluster.state import access
from floydd.errors import Unavailable, UserError
from floydd.jobs.codesnap import snapshot_code
from floydd.jobs.listing import event_view
from floydd.model import (MAX_NODES, STATES, EventView, JobOrder, JobView, MetricView, Restart, Submission, filter_text,
                          parse_job_key)

routes = web.RouteTableDef()

_JOB = "/v1/jobs/{project}/{number}"
MAX_WAIT = 7 * 24 * 3600.0
"""The longest ``timeout`` of a wait (seconds); without one a wait lasts until the job ends."""
MAX_COMPARE = 100
"""The most jobs one comparison takes."""
MAX_LIST = 10**9
"""The largest ``limit`` and ``offset`` of a job listing."""


def _key(request: web.Request) -> str:
    key = f"{request.match_info['project']}/{request.match_info['number']}"
    parse_job_key(key)
    return key


@routes.post("/v1/code")
async def upload_code(request: web.Request) -> web.Response:
    """A project folder sent as a tar (a client whose files are not on this machine):
    snapshotted into the store like ``code_path``; answers a ``code_upload`` handle for
    /v1/jobs, good on this box, for the sender, for an hour (:class:`~floydd.jobs.codesnap.CodeUploads`)."""
    config, store = request.app[keys.CONFIG], request.app[keys.STORE]
    person = acting_user(request)               # a caller with no account is refused before the upload
    limit = int(config.max_code_mb * 1024 * 1024)
    async with received_folder(request, limit, "the code folder") as (folder, got):
        tree = await asyncio.to_thread(snapshot_code, store, folder, limit)
    handle = request.app[keys.JOBS].uploads.add(str(tree), person)
    return reply({"code_upload": handle, "files": got.files, "bytes": got.bytes, "skipped": got.skipped},
                 status=201)


@routes.post("/v1/jobs")
async def submit(request: web.Request) -> web.Response:
    raw = await body(request)
    if "code_tree" in raw:
        raise UserError("code_tree is not taken: a tree id could name anything in the store, someone else's "
                        "private data included", code="code_tree_refused",
                        hint="send the folder to POST /v1/code and submit with the code_upload it answers "
                             "(update floyd: it does this by itself)")
    submission = convert(raw, Submission)
    if submission.code_upload is None and submission.code_path is None:
        raise UserError("the job has no code", hint="send code_path (a folder on the daemon's machine) or "
                                                    "code_upload (POST /v1/code); floyd run does")
    if submission.code_upload is None:
        same_user_only(request, "a code_path")
    if submission.code_upload is None and not await asyncio.to_thread(os.path.isdir, submission.code_path):
        raise UserError(f"code_path {submission.code_path[:200]} is not a folder on the daemon's machine",
                        hint="run floyd from inside the project folder (from another machine, set FLOYD_HOST: "
                             "floyd then sends the folder)")
    job = await request.app[keys.JOBS].submit(submission, user=acting_user(request))
    return _answer(job, status=201)


@routes.post("/v1/jobs/check")
async def check_submission(request: web.Request) -> web.Response:
    """Would ``POST /v1/jobs`` take this job? The same body without the code (code fields are
    not looked at), refused as the submit would refuse it: a client sending its folder from
    another machine asks this before the upload (:meth:`JobService.check`)."""
    raw = await body(request)
    if not isinstance(raw, dict):
        raise UserError("request body: expected a JSON object", hint="send the job as POST /v1/jobs takes it")
    submission = convert({**{k: v for k, v in raw.items() if k != "code_tree"}, "code_path": None,
                          "code_upload": None}, Submission)
    submission, mounts, _ = await request.app[keys.JOBS].check(submission, user=acting_user(request))
    return reply({"ok": True, "data": [m.to_dict() for m in mounts], "cpus": submission.cpus,
                  "memory": submission.resources.memory})


@routes.get("/v1/jobs")
async def list_jobs(request: web.Request) -> web.Response:
    """Jobs, newest first (archived ones too); in a cluster every node's, read through the leader
    unless ``stale=1``. A page: ``limit`` jobs from ``offset``, created at or after ``since``
    (unix seconds); without ``limit`` every job. ``sort``: a key of :data:`~floydd.model.SORTS`,
    ``-`` before it for descending (default ``-created``); ``q``: only jobs whose id, state,
    user, node, command or params hold this text (:mod:`floydd.model.order`); both before the page."""
    q = request.query
    unknown = {s.strip() for s in q.get("state", "").split(",")} - set(STATES) - {""}
    if unknown:
        raise UserError(f"unknown job state {sorted(unknown)[0][:40]!r}", hint=f"job states are: {', '.join(STATES)}")
    limit = query_int(q, "limit", None, minimum=1, maximum=MAX_LIST, hint="limit=20 lists the 20 newest jobs")
    offset = query_int(q, "offset", 0, minimum=0, maximum=MAX_LIST, hint="offset=20 skips the 20 newest jobs")
    since = query_float(q, "since", minimum=0, maximum=2**53, hint="since=1700000000 (unix seconds) lists jobs "
                                                                    "created since then")
    order, needle = JobOrder.parse(q.get("sort")), filter_text(q.get("q"))
    jobs = await request.app[keys.JOBS].list(q.get("project"), q.get("state"), stale=query_stale(request.query),
                                             limit=limit, offset=offset or 0, since=since,
                                             user=q.get("user") or None, order=order, needle=needle)
    return _answer(_hide_metrics(request, jobs))


@routes.get(_JOB)
async def get_job(request: web.Request) -> web.Response:
    service = request.app[keys.JOBS]
    key = _key(request)
    view = await service.get(key, stale=query_stale(request.query))
    try:
        events = tuple(event_view(e) for e in await service.events(key))
    except Unavailable as exc:  # the node that ran it is away: the job is still worth showing
        events = (EventView(seq=msgspec.UNSET, ts=None, kind="note", message=f"events unavailable: {exc.message}",
                            data=msgspec.UNSET),)
    warning = service.runtime.sandboxing.warning
    view = replace(view, events=events, **({"warnings": (warning,)} if warning else {}))
    return _answer(_hide_metrics(request, [view])[0])


@routes.get(_JOB + "/metrics")
async def metrics(request: web.Request) -> web.Response:
    key = await _check_reader(request, "metrics", "read")
    return reply(await request.app[keys.JOBS].metrics(key))


@routes.get(_JOB + "/wait")
async def wait(request: web.Request) -> web.Response:
    timeout = query_float(request.query, "timeout", minimum=0, maximum=MAX_WAIT,
                          hint="give seconds, e.g. timeout=60, or leave it out to wait until the job ends")
    job = await request.app[keys.JOBS].wait(_key(request), timeout)
    return _answer(_hide_metrics(request, [job])[0])


@routes.post(_JOB + "/stop")
async def stop(request: web.Request) -> web.Response:
    return _answer(await request.app[keys.JOBS].stop(_key(request), user=acting_user(request)))


@routes.post(_JOB + "/restart")
async def restart(request: web.Request) -> web.Response:
    changes = await body(request)
    unknown = set(changes) - {f.name for f in fields(Restart)}
    if unknown:
        raise UserError(f"cannot change {', '.join(sorted(unknown))} on restart",
                        hint=f"restart changes: {', '.join(f.name for f in fields(Restart))}")
    job = await request.app[keys.JOBS].restart(_key(request), convert(changes, Restart), user=acting_user(request))
    return _answer(job, status=201)


@routes.delete(_JOB)
async def delete(request: web.Request) -> web.Response:
    return _answer(await request.app[keys.JOBS].delete(_key(request), user=acting_user(request)))


@routes.get(_JOB + "/logs")
async def logs(request: web.Request) -> web.StreamResponse:
    """The raw job log from ``offset``; with ``follow=1`` until the job has ended. The answer
    ends with an end frame (:mod:`floydd.logframe`): one that stops without it was cut short."""
    service = request.app[keys.JOBS]
    config = request.app[keys.CONFIG]
    key = await _check_reader(request, "logs", "read")      # before any box is asked for it
    follow = request.query.get("follow") in ("1", "true", "yes")
    offset = query_int(request.query, "offset", 0, minimum=0, maximum=2**63 - 1, hint="offset=0 reads from the start")
    rank = query_int(request.query, "rank", None, minimum=0, maximum=MAX_NODES - 1,
                     hint="rank=1 reads the second part's log")
    attempt = query_int(request.query, "attempt", None, minimum=1, maximum=2**31 - 1,
                        hint="attempt=1 reads the first attempt's log; leave it out for the latest")
    # an unknown job, rank or attempt, or its box away: an error answer, not a stream
    chunk, final = await service.read_log(key, offset, rank=rank, attempt=attempt)
    token = logframe.new_token()
    resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8", logframe.HEADER: token})
    await resp.prepare(request)
    try:
        while True:
            # while the job runs, send only whole lines; once it ended, everything
            end = len(chunk) if final else chunk.rfind(b"\n") + 1
            if end:
                await resp.write(chunk[:end])
                offset += end
            elif not follow or final:
                break
            else:
                await asyncio.sleep(config.tail_interval)
            chunk, final = await service.read_log(key, offset, rank=rank, attempt=attempt)
        last = {"result": {"offset": offset}}
    except ConnectionError:
        raise                       # the client went away: nobody to tell
    except Exception as exc:        # e.g. the box that runs the job went away mid-stream
        last = error_event(exc)
    await resp.write(logframe.frame(token, last))
    await resp.write_eof()
    return resp


async def _restore(request: web.Request, which: str) -> web.StreamResponse:
    store = request.app[keys.STORE]
    key = await _check_reader(request, which, "clone")       # whose it is, said before where it would go
    dest = check_dest((await body(request)).get("dest"), request)
    tree = await request.app[keys.JOBS].tree_for(key, which)
    return await ndjson(request, lambda progress: restore_into(store, tree, dest, progress),
                        finish=_done(dest))


def _done(dest: str):
    async def finish(_result) -> dict:
        return {"result": {"dest": dest}}
    return finish


@routes.post(_JOB + "/output")
async def output(request: web.Request) -> web.StreamResponse:
    return await _restore(request, "output")


@routes.post(_JOB + "/code")
async def code(request: web.Request) -> web.StreamResponse:
    return await _restore(request, "code")


@routes.get(_JOB + "/output.tar")
async def output_tar(request: web.Request) -> web.StreamResponse:
    """What the job wrote to /output, as a tar (for a client on another machine)."""
    key = await _check_reader(request, "output", "clone")
    return await send_tree(request, await request.app[keys.JOBS].tree_for(key, "output"))


@routes.get(_JOB + "/code.tar")
async def code_tar(request: web.Request) -> web.StreamResponse:
    """The code the job ran with, as a tar."""
    key = await _check_reader(request, "code", "clone")
    return await send_tree(request, await request.app[keys.JOBS].tree_for(key, "code"))


def _answer(value: Any, status: int = 200) -> web.Response:
    """A job or a list of jobs (:class:`~floydd.model.JobView`) as JSON: msgspec writes the
    fields in their order and leaves out those UNSET (thousands of jobs: ~7x faster than json;
    NaN and infinities become null, as :func:`~floydd.api.request.reply` makes them)."""
    return web.Response(body=msgspec.json.encode(value), status=status, content_type="application/json")


def _hide_metrics(request: web.Request, views: list[JobView]) -> list[JobView]:
    """``views``, each with an empty metric summary where the caller may not read its metrics
    (a box whose ``job_logs`` is ``owner``): the lab sees its jobs, not their numbers."""
    rules = request.app[keys.JOBS].rules
    if rules.job_logs == "lab":
        return views
    state, person = request.app[keys.CLUSTER].state, acting_person(request, required=False)
    return [v if access.allowed(state, person, access.job_target(v, "metrics"), "read", rules)
            else replace(v, metrics={}) for v in views]


async def _check_reader(request: web.Request, part: str, verb: str) -> str:
    """The job's key, once the caller may ``verb`` its ``part`` (code, output, logs, metrics:
    :mod:`floydd.cluster.state.access`, with this box's read rules); Forbidden naming whose it is."""
    service = request.app[keys.JOBS]
    view = await service.get(_key(request), stale=part in ("logs", "metrics"))     # polled: this box's copy
    access.check(request.app[keys.CLUSTER].state, acting_person(request, required=False),
                 access.job_target(view, part), verb, service.rules)
    return view.id


@routes.get("/v1/compare")
async def compare(request: web.Request) -> web.Response:
    """Params and last/best metrics of several jobs side by side."""
    names = [j for j in request.query.get("jobs", "").split(",") if j]
    if len(names) < 1:
        raise UserError("name at least one job", hint="floyd compare digits/1 digits/2")
    if len(names) > MAX_COMPARE:
        raise UserError(f"{len(names)} jobs to compare; at most {MAX_COMPARE} at once", hint="compare fewer jobs")
    service = request.app[keys.JOBS]
    jobs = [await service.get(n) for n in names]
    state, person = request.app[keys.CLUSTER].state, acting_person(request, required=False)
    for job in jobs:                # their metrics, side by side: each job's metrics rule
        access.check(state, person, access.job_target(job, "metrics"), "read", service.rules, doing="compare")
    params = sorted({p for j in jobs for p in j.params})
    metrics = sorted({m for j in jobs for m in j.metrics})
    rows = []
    for j in jobs:
        rows.append({
            "id": j.id, "state": j.state, "message": j.message, "command": j.command,
            "params": {p: j.params.get(p) for p in params},
            "metrics": {m: _last_best(m, j.metrics.get(m)) for m in metrics},
        })
    return reply({"params": params, "metrics": metrics, "jobs": rows})


def _last_best(name: str, summary: MetricView | None) -> dict | None:
    """Best is the minimum for losses and errors, else the maximum."""
    if summary is None:
        return None
    lower = any(w in name.lower() for w in ("loss", "err", "perplexity", "mse", "mae"))
    return {"last": summary.last, "best": summary.min if lower else summary.max,
            "goal": "min" if lower else "max", "count": summary.count}
