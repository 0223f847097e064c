"""``/v1/openapi.json``: the published API description, kept true by a test.

Errors everywhere are ``{"error": {"code", "message", "hint", "kind"}}`` with
the matching status. Streams (``application/x-ndjson``) send ``{"progress":
[done, total]}`` events and end with ``{"result": ...}`` or ``{"error": ...}``.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

import floydd
from floydd.api.request import reply
from floydd.api.schemas import (Cluster, CodeUpload, Compare, DatasetDeleted, DatasetInfo, DatasetVersion, Error,
                                GcReport, Info, Job, JoinToken, Left, Metrics, Node)
from floydd.model import Restart, Submission

routes = web.RouteTableDef()

_TYPES = (Submission, Restart, Error, Info, list[Node], Job, list[Job], Metrics, Compare, CodeUpload,
          list[DatasetVersion], DatasetInfo, DatasetDeleted, GcReport, Cluster, JoinToken, Left)
_REFS, COMPONENTS = msgspec.json.schema_components(_TYPES, ref_template="#/components/schemas/{name}")
"""One components table: the request bodies are the job model's types (:mod:`floydd.model`), which
the API decodes with msgspec; the answers are :mod:`floydd.api.schemas`, which the contract test
holds the daemon (and the TUI's test double) to."""


def _schema(kind: type) -> dict:
    return _REFS[_TYPES.index(kind)]


_JOB = [{"name": "project", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "number", "in": "path", "required": True, "schema": {"type": "integer"}}]
_ERROR = {"description": "error", "content": {"application/json": {"schema": _schema(Error)}}}
_NDJSON = {"content": {"application/x-ndjson": {"schema": {"type": "object"}}}}
_DEST = {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["dest"], "properties": {"dest": {"type": "string"}}}}}}


def _op(summary: str, answer: type | None = None, *, params=None, body=None, stream=False, status="200") -> dict:
    """An operation answering ``answer`` (a type of :mod:`floydd.api.schemas`) as JSON, or
    NDJSON events with ``stream``."""
    if stream:
        ok = {"description": "ok", **_NDJSON}
    else:
        schema = {"type": "object"} if answer is None else _schema(answer)
        ok = {"description": "ok", "content": {"application/json": {"schema": schema}}}
    op = {"summary": summary, "responses": {status: ok, "default": _ERROR}}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = body
    return op


def _q(*names: str) -> list[dict]:
    return [{"name": n, "in": "query", "required": False, "schema": {"type": "string"}} for n in names]


_TAR = {"required": True, "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}


def _op_tar(summary: str, **kw) -> dict:
    return {**_op(summary, **kw), "responses": {"200": {"description": "tar", "content": {"application/x-tar": {
        "schema": {"type": "string", "format": "binary"}}}}, "default": _ERROR}}


def _body(kind: type) -> dict:
    return {"required": True, "content": {"application/json": {"schema": _schema(kind)}}}


SUBMIT = _body(Submission)

PATHS = {
    "/v1/info": {"get": _op("This daemon: version, node, state dir, uptime", Info)},
    "/v1/nodes": {"get": _op("Nodes with CPUs, memory, disk, GPUs and which job holds each GPU; stale=1 reads "
                             "this node's copy of the cluster state", list[Node], params=_q("stale"))},
    "/v1/jobs": {"get": _op("Jobs, newest first", list[Job], params=_q("project", "state")),
                 "post": _op("Submit a job", Job, body=SUBMIT, status="201")},
    "/v1/jobs/{project}/{number}": {"get": _op("One job with metric summary and events", Job, params=_JOB),
                                    "delete": _op("Delete an ended job, its records and output", Job, params=_JOB)},
    "/v1/jobs/{project}/{number}/metrics": {"get": _op("Metric series and system samples", Metrics, params=_JOB)},
    "/v1/jobs/{project}/{number}/wait": {"get": _op("Block until the job ended (or timeout seconds passed)", Job,
                                                    params=_JOB + _q("timeout"))},
    "/v1/jobs/{project}/{number}/stop": {"post": _op("Stop a queued or running job", Job, params=_JOB)},
    "/v1/jobs/{project}/{number}/restart": {"post": _op("Run the job again with overrides", Job, params=_JOB,
                                                        body=_body(Restart), status="201")},
    "/v1/jobs/{project}/{number}/logs": {"get": {
        **_op("The job log, raw lines '<ts> <o|e> <text>'; rank: a part of a distributed job (default 0)",
              params=_JOB + _q("offset", "follow", "rank")),
        "responses": {"200": {"description": "log", "content": {"text/plain": {"schema": {"type": "string"}}}},
                      "default": _ERROR}}},
    "/v1/jobs/{project}/{number}/output": {"post": _op("Restore the job's /output into dest", params=_JOB,
                                                       body=_DEST, stream=True)},
    "/v1/jobs/{project}/{number}/code": {"post": _op("Restore the job's code snapshot into dest", params=_JOB,
                                                     body=_DEST, stream=True)},
    "/v1/code": {"post": _op("Snapshot a project folder sent as a tar (clients on another machine); answers "
                             "code_tree for /v1/jobs", CodeUpload, body=_TAR, status="201")},
    "/v1/jobs/{project}/{number}/output.tar": {"get": _op_tar("The job's /output as a tar", params=_JOB)},
    "/v1/jobs/{project}/{number}/code.tar": {"get": _op_tar("The job's code snapshot as a tar", params=_JOB)},
    "/v1/datasets/tar": {
        "get": _op_tar("Dataset version ref=NAME[:N] as a tar", params=_q("ref")),
        "post": _op("Upload a folder sent as a tar as the next version of ?name=", params=_q("name", "message"),
                    body=_TAR, stream=True)},
    "/v1/compare": {"get": _op("Params and last/best metrics of jobs side by side", Compare, params=_q("jobs"))},
    "/v1/datasets": {"get": _op("Dataset versions", list[DatasetVersion], params=_q("name")),
                     "post": _op("Upload a folder as a new dataset version", stream=True)},
    "/v1/datasets/info": {"get": _op("One dataset version and its files", DatasetInfo, params=_q("ref"))},
    "/v1/datasets/clone": {"post": _op("Restore a dataset version into dest", body=_DEST, stream=True)},
    "/v1/datasets/delete": {"post": _op("Delete a dataset version or a whole dataset", DatasetDeleted)},
    "/v1/store/verify": {"post": _op("Re-read and re-hash every object (or one dataset's)", stream=True)},
    "/v1/store/gc": {"post": _op("Remove objects no version or running upload needs", GcReport)},
    "/v1/cluster": {"get": _op("Membership: this node, the leader, voters and learners", Cluster)},
    "/v1/cluster/tokens": {"post": _op("Make a one-time join token (on the node holding the CA)", JoinToken,
                                       status="201")},
    "/v1/cluster/leave": {"post": _op("Leave the cluster for good", Left)},
    "/v1/openapi.json": {"get": _op("This document")},
}


def spec() -> dict:
    return {"openapi": "3.1.0",
            "info": {"title": "floydd node API", "version": floydd.__version__},
            "paths": PATHS, "components": {"schemas": COMPONENTS}}


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return reply(spec())
