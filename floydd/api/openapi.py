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
from floydd.api.schemas import (ApiToken, AuditCheck, AuditEntry, Cluster, CodeUpload, Compare, DatasetDeleted,
                                DatasetInfo, DatasetVersion, Drained, Error, GcReport, ImportResult, Info, JobCheck,
                                JobView, JoinToken, Left, Metrics, Node, Person, PersonRemoved, Removed, TokenRecord, WhoAmI)
from floydd.api.schemas import AuditHead, CaInfo, StoreKeyReport, StoreKeyRotated
from floydd.api.cluster import MAX_TTL
from floydd.api.jobs import MAX_LIST, MAX_WAIT
from floydd.model import MAX_FILTER, MAX_NODES, PROJECT_PATTERN, SORTS, Restart, Submission

routes = web.RouteTableDef()
"""Served through :func:`floydd.api.routes`, which loads this module on the first ask."""

_TYPES = (Submission, Restart, Error, Info, list[Node], JobView, list[JobView], Metrics, Compare, CodeUpload, JobCheck,
          list[DatasetVersion], DatasetInfo, DatasetDeleted, GcReport, Cluster, JoinToken, Left, Drained, Removed,
          list[TokenRecord],
          TokenRecord, list[AuditEntry], AuditCheck, list[Person], Person, PersonRemoved,
          list[ApiToken], ApiToken, WhoAmI, ImportResult, CaInfo, AuditHead, StoreKeyReport, StoreKeyRotated)
_REFS, COMPONENTS = msgspec.json.schema_components(_TYPES, ref_template="#/components/schemas/{name}")
"""One components table: the request bodies are the job model's types (:mod:`floydd.model`), which
the API decodes with msgspec; the answers are :mod:`floydd.api.schemas`, which the contract test
holds the daemon (and the TUI's test double) to."""
COMPONENTS["Restart"]["additionalProperties"] = False     # the handler refuses what a restart cannot change


def _schema(kind: type) -> dict:
    return _REFS[_TYPES.index(kind)]


_JOB = [{"name": "project", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": f"^(?:{PROJECT_PATTERN})$"}},
        {"name": "number", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1,
                                                                      "maximum": 10**18 - 1}}]
_ERROR = {"description": "error", "content": {"application/json": {"schema": _schema(Error)}}}
_NDJSON = {"content": {"application/x-ndjson": {"schema": {"type": "object"}}}}
_TEXT = {"type": "string"}


def _json(required: tuple[str, ...] = (), **properties: dict) -> dict:
    """A JSON object body with these ``properties`` (it may be left out when none is required)."""
    return {"required": bool(required), "content": {"application/json": {"schema": {
        "type": "object", "required": list(required), "properties": properties}}}}


_DEST = _json(("dest",), dest=_TEXT)
_ROLE = {"type": "string", "enum": ["admin", "user"]}
_UID = {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
_VISIBILITY = {"type": "string", "enum": ["lab", "private"]}
_PERSON = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]


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


def _q(*names: str, **typed: dict) -> list[dict]:
    """Optional query parameters: ``names`` are text, ``typed`` have the schemas given."""
    return [{"name": n, "in": "query", "required": False, "schema": schema}
            for n, schema in [*((n, _TEXT) for n in names), *typed.items()]]


def _count(minimum: int) -> dict:
    return {"type": "integer", "minimum": minimum, "maximum": MAX_LIST}


_LOG_QUERY = _q("follow", offset={"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                rank={"type": "integer", "minimum": 0, "maximum": MAX_NODES - 1},
                attempt={"type": "integer", "minimum": 1, "maximum": 2**31 - 1})


_TAR = {"required": True, "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}


def _op_tar(summary: str, **kw) -> dict:
    return {**_op(summary, **kw), "responses": {"200": {"description": "tar", "content": {"application/x-tar": {
        "schema": {"type": "string", "format": "binary"}}}}, "default": _ERROR}}


def _too_large(op: dict, setting: str) -> dict:
    """``op`` refusing a tar that would unpack past the box's ``setting`` (sparse files counted
    at their real size) with 413."""
    op["responses"]["413"] = {**_ERROR, "description": f"the tar would unpack past {setting}"}
    return op


def _queue_limited(op: dict) -> dict:
    """``op`` refusing a job past the person's ``max_queued_per_person`` with 429."""
    op["responses"]["429"] = {**_ERROR, "description": "the person has max_queued_per_person jobs queued"}
    return op


def _body(kind: type) -> dict:
    return {"required": True, "content": {"application/json": {"schema": _schema(kind)}}}


SUBMIT = _body(Submission)

PATHS = {
    "/v1/info": {"get": _op("This daemon: version, node, state dir, uptime", Info)},
    "/v1/nodes": {"get": _op("Nodes with CPUs, memory, disk, GPUs and which job holds each GPU; stale=1 reads "
                             "this node's copy of the cluster state", list[Node], params=_q("stale"))},
    "/v1/jobs": {"get": _op("Jobs, newest first (archived ones too) or by sort (created, state, project, user, "
                            "time; -KEY descending): limit jobs from offset (default: every job), created at or after "
                            "since (unix seconds), submitted by user (a person's name), whose id, state, user, node, "
                            "command or params hold q (case aside; sort and q apply before the page); stale=1 reads "
                            "this node's copy",
                            list[JobView], params=_q("project", "state", "stale", "user", limit=_count(1), offset=_count(0),
                                                 since={"type": "number", "minimum": 0, "maximum": 2**53},
                                                 sort={"type": "string", "pattern": f"^[-+]?({'|'.join(SORTS)})$"},
                                                 q={"type": "string", "maxLength": MAX_FILTER})),
                 "post": _queue_limited(_op("Submit a job", JobView, body=SUBMIT, status="201"))},
    "/v1/jobs/check": {"post": _queue_limited(_op("Would POST /v1/jobs take this job? The same body, the code not "
                                                  "looked at; refused as the submit would be (ask before sending the "
                                                  "code)", JobCheck, body=SUBMIT))},
    "/v1/jobs/{project}/{number}": {"get": _op("One job with metric summary and events", JobView, params=_JOB),
                                    "delete": _op("Delete an ended job, its records and output", JobView, params=_JOB)},
    "/v1/jobs/{project}/{number}/metrics": {"get": _op("Metric series and system samples", Metrics, params=_JOB)},
    "/v1/jobs/{project}/{number}/wait": {"get": _op("Block until the job ended (or timeout seconds passed)", JobView,
                                                    params=_JOB + _q(timeout={"type": "number", "minimum": 0,
                                                                              "maximum": MAX_WAIT}))},
    "/v1/jobs/{project}/{number}/stop": {"post": _op("Stop a queued or running job", JobView, params=_JOB)},
    "/v1/jobs/{project}/{number}/restart": {"post": _queue_limited(_op("Run the job again with overrides", JobView,
                                                                       params=_JOB, body=_body(Restart),
                                                                       status="201"))},
    "/v1/jobs/{project}/{number}/logs": {"get": {
        **_op("The job log, raw lines '<ts> <o|e> <text>', then the end frame '<token> {\"result\"|\"error\": ...}' "
              "(token: the Floydd-Log-End header); rank: a part of a distributed job (default 0); attempt: an "
              "earlier attempt's log, kept on the box that ran it (default: the latest)",
              params=_JOB + _LOG_QUERY),
        "responses": {"200": {"description": "log", "content": {"text/plain": {"schema": {"type": "string"}}},
                              "headers": {"Floydd-Log-End": {"schema": {"type": "string"},
                                                             "description": "the token of the end frame"}}},
                      "default": _ERROR}}},
    "/v1/jobs/{project}/{number}/output": {"post": _op("Restore the job's /output into dest", params=_JOB,
                                                       body=_DEST, stream=True)},
    "/v1/jobs/{project}/{number}/code": {"post": _op("Restore the job's code snapshot into dest", params=_JOB,
                                                     body=_DEST, stream=True)},
    "/v1/code": {"post": _too_large(_op("Snapshot a project folder sent as a tar (clients on another machine); "
                                        "answers code_upload, a handle for /v1/jobs good on this box for whoever "
                                        "sent it (an hour)", CodeUpload, body=_TAR, status="201"),
                                    "max_code_mb")},
    "/v1/jobs/{project}/{number}/output.tar": {"get": _op_tar("The job's /output as a tar", params=_JOB)},
    "/v1/jobs/{project}/{number}/code.tar": {"get": _op_tar("The job's code snapshot as a tar", params=_JOB)},
    "/v1/datasets/tar": {
        "get": _op_tar("Dataset version ref=NAME[:N] as a tar", params=_q("ref")),
        "post": _too_large(_op("Upload a folder sent as a tar as the next version of ?name=",
                               params=_q("name", "message", "idem_key", visibility=_VISIBILITY), body=_TAR,
                               stream=True), "max_upload_gb")},
    "/v1/compare": {"get": _op("Params and last/best metrics of jobs side by side", Compare, params=_q("jobs"))},
    "/v1/datasets": {"get": _op("Dataset versions the caller may read", list[DatasetVersion], params=_q("name")),
                     "post": _op("Upload a folder on the daemon's machine as a new dataset version (not as "
                                 "PROJECT/N/output: that is a job's output)", stream=True,
                                 body=_json(("name", "path"), name=_TEXT, path=_TEXT, message=_TEXT,
                                            idem_key=_TEXT, visibility=_VISIBILITY))},
    "/v1/datasets/info": {"get": _op("One dataset version and its files", DatasetInfo, params=_q("ref"))},
    "/v1/datasets/clone": {"post": _op("Restore a dataset version into dest", stream=True,
                                       body=_json(("ref", "dest"), ref=_TEXT, dest=_TEXT))},
    "/v1/datasets/delete": {"post": _op("Delete a dataset version or a whole dataset", DatasetDeleted,
                                        body=_json(("ref",), ref=_TEXT))},
    "/v1/store/verify": {"post": _op("Re-read and re-hash every object (or one dataset's); admins", stream=True,
                                     body=_json(name=_TEXT, repair={"type": "boolean"}))},
    "/v1/store/gc": {"post": _op("Remove objects no version or running upload needs; admins", GcReport)},
    "/v1/cluster": {"get": _op("Membership: this node, the leader, voters and learners", Cluster)},
    "/v1/cluster/tokens": {"post": _op("Make a one-time join token (on any voter); sign_in: the people signed in "
                                       "on the box it admits (left out: its maker; []: nobody)", JoinToken,
                                       status="201", body=_json(ttl={"type": "number", "exclusiveMinimum": 0,
                                                                     "maximum": MAX_TTL},
                                                                sign_in={"type": "array", "items": _TEXT})),
                           "get": _op("The cluster's join tokens (never their secrets)", list[TokenRecord])},
    "/v1/cluster/tokens/{token_id}": {"delete": _op("Revoke a join token; one already used by a box that is not a "
                                                    "member yet cancels that join", TokenRecord, params=[
        {"name": "token_id", "in": "path", "required": True, "schema": {"type": "string",
                                                                      "pattern": "^[0-9a-f]{16}$"}}])},
    "/v1/cluster/leave": {"post": _op("Leave the cluster for good (admins)", Left)},
    "/v1/cluster/drain": {"post": _op("No new placements on this box, or again (drain false); admins", Drained,
                                      body=_json(drain={"type": "boolean"}))},
    "/v1/cluster/remove": {"post": _op("Take another node (id or name) out for good and revoke its certificate, or "
                                       "cancel a join redeemed but not started (admins)", Removed,
                                       body=_json(node={"type": "string", "minLength": 1}))},
    "/v1/cluster/store-key": {"post": _op("Start a new store key epoch, made on this box (admins): new data is "
                                          "sealed under it, older data re-sealed in the background on every box; "
                                          "only current members receive it", StoreKeyRotated, status="201"),
                              "get": _op("The cluster's store key epochs and this box's background re-seal",
                                         StoreKeyReport)},
    "/v1/tokens": {"post": _op("Make a personal API token for the caller (an admin: for person); the secret "
                               "is in this answer only", ApiToken, status="201",
                               body=_json(label=_TEXT, person=_TEXT, ttl={"type": "number", "exclusiveMinimum": 0})),
                   "get": _op("The caller's personal API tokens (an admin: everyone's), never their secrets "
                              "(stale=1: this box's copy as it is)", list[ApiToken], params=_q("stale"))},
    "/v1/tokens/{token_id}": {"delete": _op("Revoke a personal API token: every box refuses it once applied", ApiToken,
                                            params=[{"name": "token_id", "in": "path", "required": True,
                                                     "schema": {"type": "string"}}])},
    "/v1/whoami": {"get": _op("The person this call is made as", WhoAmI)},
    "/v1/ca": {"get": {**_op("The cluster CA certificate (PEM), without a token: what floyd login pins; asked for "
                             "JSON (Accept: application/json), also the box that answered, the lab's members and "
                             "revoked certificates, which a laptop keeps for the box it pins"),
                       "responses": {"200": {"description": "PEM, or JSON when asked", "content": {
                           "application/x-pem-file": {"schema": {"type": "string"}},
                           "application/json": {"schema": _schema(CaInfo)}}}, "default": _ERROR},
                       "security": []}},
    "/v1/audit": {"get": _op("The audit chain as this box holds it, in order: who changed what, when, from which "
                             "box, including every change committed before the call (stale=1: this box's copy as it is); "
                             "since: entries made at or after (unix seconds)", list[AuditEntry],
                             params=_q("stale", since={"type": "number", "minimum": 0, "maximum": 2**53}))},
    "/v1/audit/verify": {"get": _op("Check this box's stored audit chain; names the first bad entry. head=SEQ:HASH "
                                    "(recorded from /v1/audit/head): also that the chain still holds that entry "
                                    "at that seq (a chain cut short, or rewritten with its hashes recomputed, "
                                    "fails)", AuditCheck,
                                    params=_q(head={"type": "string", "pattern": "^([0-9]{1,18}:)?[0-9a-f]{64}$"}))},
    "/v1/audit/head": {"get": _op("The audit chain's newest entry as SEQ:HASH, for an auditor to record and check "
                                  "later (verify?head=); after catching up with the leader (stale=1: this box's "
                                  "copy as it is)", AuditHead, params=_q("stale"))},
    "/v1/people": {"get": _op("The lab's people, their roles and mapped uids (stale=1: this box's copy as it is)",
                              list[Person], params=_q("stale")),
                   "post": _op("Add a person (admins; in a lab of one, its user, who becomes its admin)", Person,
                               status="201", body=_json(("name",), name=_TEXT, role=_ROLE, uids={
                                   "type": "object", "additionalProperties": {"type": "array", "items": _UID}},
                                   boxes={"type": "array", "items": _TEXT}, every_box={"type": "boolean"}))},
    "/v1/people/{name}": {"delete": _op("Remove a person's account (admins; never the last admin)", PersonRemoved,
                                        params=_PERSON)},
    "/v1/people/{name}/role": {"post": _op("Make a person an admin or a user (admins; never the last admin a user)",
                                           Person, params=_PERSON, body=_json(("role",), role=_ROLE))},
    "/v1/people/{name}/uids": {"post": _op("The local uids acting as a person on one box (admins; [] for the "
                                           "login-name default)", Person, params=_PERSON,
                                           body=_json(("node", "uids"), node=_TEXT,
                                                      uids={"type": "array", "items": _UID}))},
    "/v1/people/{name}/boxes": {"post": _op("Sign a person in on (on) or out of one box (node: its login name acts "
                                            "as them there; out also drops the uids mapped there), or every box "
                                            "(every_box) (admins)", Person, params=_PERSON,
                                            body=_json(("on",), node=_TEXT, every_box={"type": "boolean"},
                                                       on={"type": "boolean"}))},
    "/v1/openapi.json": {"get": _op("This document")},
    **{  # export files between sites (floydd.api.exchange)
        "/v1/export": {"post": {
            **_op("Export ended jobs (PROJECT or PROJECT/N: records, logs, code, outputs, mounted data) and dataset "
                  "versions as one signed file sealed under key (64 hex digits; kdf: how a passphrase made it)",
                  body=_json(("key",), jobs={"type": "array", "items": _TEXT}, datasets={"type": "array", "items": _TEXT},
                             key=_TEXT, kdf={"type": "object"}, to_ticket=_TEXT)),
            "responses": {"200": {"description": "the export file, ending with its trailer (or an error record); "
                                                 "with to_ticket (a file a CLI on this machine handed over the socket "
                                                 "beside the API's, SCM_RIGHTS) it is written there and fsynced, and "
                                                 "the answer is NDJSON progress events, then {\"result\": {\"bytes\"}}",
                                  "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                      "format": "binary"}},
                                              "application/x-ndjson": {"schema": {"type": "string"}}},
                                  "headers": {"Floydd-Export-Size": {"schema": {"type": "integer"},
                                                                     "description": "about how many bytes"}}},
                          "default": _ERROR}}},
        "/v1/import": {"post": _op(
            "Verify an export file (the body) and add its jobs, finished, under new numbers and its dataset versions; "
            "a file imported before adds nothing. With Floydd-File-Ticket (a file a CLI on this machine handed over "
            "the socket beside the API's) there is no body: the daemon reads that file, and answers NDJSON progress "
            "events, then {\"result\": what it made}", ImportResult, status="201",
            params=_q("name", "expect_origin") + [{"name": "Floydd-Export-Key", "in": "header", "required": True,
                                                   "schema": {"type": "string"}},
                                                  {"name": "Floydd-File-Ticket", "in": "header", "required": False,
                                                   "schema": {"type": "string"}}],
            body={"required": False, "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                        "format": "binary"}}}})},
    },
}


_SECURITY = {"personalToken": {
    "type": "http", "scheme": "bearer",
    "description": "Over TLS (a cluster's box, api_listen): a personal token FLP1.<id>.<secret> from "
                   "floyd token create; /v1/ca needs none. On the unix socket the kernel names the caller "
                   "and no token is sent. Past api_auth_failures failed tokens per api_auth_window seconds from "
                   "one source, answers are 429 (code auth_throttled) with Retry-After, the token unread. "
                   "Authenticated answers carry Floydd-Trust: the digest of /v1/ca's members and revoked "
                   "certificates (ask /v1/ca again when it changes)."}}


def spec() -> dict:
    return {"openapi": "3.1.0",
            "info": {"title": "floydd node API", "version": floydd.__version__},
            "security": [{"personalToken": []}],
            "paths": PATHS,
            "components": {"schemas": COMPONENTS, "securitySchemes": _SECURITY}}


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return reply(spec())
