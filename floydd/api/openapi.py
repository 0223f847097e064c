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
from floydd.model import Restart, Submission

routes = web.RouteTableDef()

_JOB = [{"name": "project", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "number", "in": "path", "required": True, "schema": {"type": "integer"}}]
_JSON = {"content": {"application/json": {"schema": {"type": "object"}}}}
_NDJSON = {"content": {"application/x-ndjson": {"schema": {"type": "object"}}}}
_DEST = {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["dest"], "properties": {"dest": {"type": "string"}}}}}}


def _op(summary: str, *, params=None, body=None, stream=False, status="200") -> dict:
    op = {"summary": summary, "responses": {status: {"description": "ok", **(_NDJSON if stream else _JSON)},
                                             "default": {"description": "error", **_JSON}}}
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
        "schema": {"type": "string", "format": "binary"}}}}, "default": {"description": "error", **_JSON}}}


_TYPES = (Submission, Restart)
_REFS, COMPONENTS = msgspec.json.schema_components(_TYPES, ref_template="#/components/schemas/{name}")
"""Request bodies are the job model's types (:mod:`floydd.model`): the API decodes them with
msgspec, which draws these schemas from the same types."""


def _body(kind: type) -> dict:
    return {"required": True, "content": {"application/json": {"schema": _REFS[_TYPES.index(kind)]}}}


SUBMIT = _body(Submission)

PATHS = {
    "/v1/info": {"get": _op("This daemon: version, node, state dir, uptime")},
    "/v1/nodes": {"get": _op("Nodes with CPUs, memory, disk, GPUs and which job holds each GPU; stale=1 reads "
                             "this node's copy of the cluster state", params=_q("stale"))},
    "/v1/jobs": {"get": _op("Jobs, newest first", params=_q("project", "state")),
                 "post": _op("Submit a job", body=SUBMIT, status="201")},
    "/v1/jobs/{project}/{number}": {"get": _op("One job with metric summary and events", params=_JOB),
                                    "delete": _op("Delete an ended job, its records and output", params=_JOB)},
    "/v1/jobs/{project}/{number}/metrics": {"get": _op("Metric series and system samples", params=_JOB)},
    "/v1/jobs/{project}/{number}/wait": {"get": _op("Block until the job ended", params=_JOB + _q("timeout"))},
    "/v1/jobs/{project}/{number}/stop": {"post": _op("Stop a queued or running job", params=_JOB)},
    "/v1/jobs/{project}/{number}/restart": {"post": _op("Run the job again with overrides", params=_JOB,
                                                        body=_body(Restart), status="201")},
    "/v1/jobs/{project}/{number}/logs": {"get": {
        **_op("The job log, raw lines '<ts> <o|e> <text>'; rank: a part of a distributed job (default 0)",
              params=_JOB + _q("offset", "follow", "rank")),
        "responses": {"200": {"description": "log", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/v1/jobs/{project}/{number}/output": {"post": _op("Restore the job's /output into dest", params=_JOB,
                                                       body=_DEST, stream=True)},
    "/v1/jobs/{project}/{number}/code": {"post": _op("Restore the job's code snapshot into dest", params=_JOB,
                                                     body=_DEST, stream=True)},
    "/v1/code": {"post": _op("Snapshot a project folder sent as a tar (clients on another machine); answers "
                             "code_tree for /v1/jobs", body=_TAR, status="201")},
    "/v1/jobs/{project}/{number}/output.tar": {"get": _op_tar("The job's /output as a tar", params=_JOB)},
    "/v1/jobs/{project}/{number}/code.tar": {"get": _op_tar("The job's code snapshot as a tar", params=_JOB)},
    "/v1/datasets/tar": {
        "get": _op_tar("Dataset version ref=NAME[:N] as a tar", params=_q("ref")),
        "post": _op("Upload a folder sent as a tar as the next version of ?name=", params=_q("name", "message"),
                    body=_TAR, stream=True)},
    "/v1/compare": {"get": _op("Params and last/best metrics of jobs side by side", params=_q("jobs"))},
    "/v1/datasets": {"get": _op("Dataset versions", params=_q("name")),
                     "post": _op("Upload a folder as a new dataset version", stream=True)},
    "/v1/datasets/info": {"get": _op("One dataset version and its files", params=_q("ref"))},
    "/v1/datasets/clone": {"post": _op("Restore a dataset version into dest", body=_DEST, stream=True)},
    "/v1/datasets/delete": {"post": _op("Delete a dataset version or a whole dataset")},
    "/v1/store/verify": {"post": _op("Re-read and re-hash every object (or one dataset's)", stream=True)},
    "/v1/store/gc": {"post": _op("Remove objects no version or running upload needs")},
    "/v1/cluster": {"get": _op("Membership: this node, the leader, voters and learners")},
    "/v1/cluster/tokens": {"post": _op("Make a one-time join token (on the node holding the CA)", status="201")},
    "/v1/cluster/leave": {"post": _op("Leave the cluster for good")},
    "/v1/openapi.json": {"get": _op("This document")},
}


def spec() -> dict:
    return {"openapi": "3.1.0",
            "info": {"title": "floydd node API", "version": floydd.__version__},
            "paths": PATHS, "components": {"schemas": COMPONENTS}}


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return reply(spec())
