"""The published OpenAPI document matches the routes the app really serves."""

from __future__ import annotations

from floydd.api.openapi import spec
from floydd.daemon.app import create_app
from floydd.config import preset_for_tests


def test_every_route_is_documented_and_every_documented_route_exists(tmp_path):
    app = create_app(preset_for_tests(tmp_path))
    served = {(r.method.lower(), r.resource.canonical) for r in app.router.routes()
              if r.method not in ("HEAD", "OPTIONS")}
    documented = {(method, path) for path, ops in spec()["paths"].items() for method in ops}
    assert served == documented


def test_every_operation_has_a_summary_and_an_error_response():
    for path, ops in spec()["paths"].items():
        for method, op in ops.items():
            assert op["summary"], (method, path)
            assert op["responses"], (method, path)


def test_every_schema_reference_resolves_and_request_bodies_are_the_models_types():
    doc = spec()
    refs = set()

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                refs.add(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(doc)
    names = {ref.removeprefix("#/components/schemas/") for ref in refs}
    assert names and names <= set(doc["components"]["schemas"])
    submit = doc["components"]["schemas"]["Submission"]
    assert set(submit["required"]) == {"project", "command"}
    assert {"gpus", "nodes", "data", "params", "max_runtime", "idem_key", "code_upload"} <= set(submit["properties"])
    assert "code_tree" not in submit["properties"]          # people never hand the daemon a tree id


ANSWERS = {
    ("get", "/v1/info"): "Info", ("get", "/v1/nodes"): "Node[]", ("get", "/v1/jobs"): "JobView[]",
    ("post", "/v1/jobs"): "JobView", ("post", "/v1/jobs/check"): "JobCheck", ("get", "/v1/jobs/{project}/{number}"): "JobView",
    ("delete", "/v1/jobs/{project}/{number}"): "JobView", ("get", "/v1/jobs/{project}/{number}/wait"): "JobView",
    ("post", "/v1/jobs/{project}/{number}/stop"): "JobView", ("post", "/v1/jobs/{project}/{number}/restart"): "JobView",
    ("get", "/v1/jobs/{project}/{number}/metrics"): "Metrics", ("get", "/v1/compare"): "Compare",
    ("get", "/v1/cluster"): "Cluster", ("get", "/v1/datasets"): "DatasetVersion[]",
    ("get", "/v1/datasets/info"): "DatasetInfo", ("post", "/v1/code"): "CodeUpload",
    ("post", "/v1/datasets/delete"): "DatasetDeleted", ("post", "/v1/store/gc"): "GcReport",
    ("post", "/v1/cluster/tokens"): "JoinToken", ("post", "/v1/cluster/leave"): "Left",
    ("post", "/v1/cluster/remove"): "Removed",
    ("get", "/v1/cluster/tokens"): "TokenRecord[]", ("delete", "/v1/cluster/tokens/{token_id}"): "TokenRecord",
    ("get", "/v1/audit"): "AuditEntry[]", ("get", "/v1/audit/verify"): "AuditCheck",
    ("get", "/v1/audit/head"): "AuditHead",
    ("get", "/v1/people"): "Person[]", ("post", "/v1/people"): "Person", ("delete", "/v1/people/{name}"): "PersonRemoved",
    ("post", "/v1/people/{name}/role"): "Person", ("post", "/v1/people/{name}/uids"): "Person",
    ("post", "/v1/people/{name}/boxes"): "Person",
    ("post", "/v1/tokens"): "ApiToken", ("get", "/v1/tokens"): "ApiToken[]",
    ("delete", "/v1/tokens/{token_id}"): "ApiToken", ("get", "/v1/whoami"): "WhoAmI",
    ("post", "/v1/import"): "ImportResult", ("post", "/v1/cluster/drain"): "Drained",
    ("get", "/v1/ca"): "CaInfo",
    ("post", "/v1/cluster/store-key"): "StoreKeyRotated", ("get", "/v1/cluster/store-key"): "StoreKeyReport",
}
"""Each JSON answer and the :mod:`floydd.api.schemas` type describing it (``[]``: a list of them)."""


def _answer(op: dict) -> dict:
    status = "201" if "201" in op["responses"] else "200"
    return op["responses"][status]["content"]["application/json"]["schema"]


def _name(schema: dict) -> str:
    if schema.get("type") == "array":
        return _name(schema["items"]) + "[]"
    return schema["$ref"].removeprefix("#/components/schemas/")


def test_every_json_answer_and_error_is_described_by_its_type():
    doc = spec()
    components = doc["components"]["schemas"]
    json_answers = {(method, path) for path, ops in doc["paths"].items() for method, op in ops.items()
                    if "application/json" in op["responses"].get("201", op["responses"].get("200", {})).get(
                        "content", {})}
    assert json_answers - {("get", "/v1/openapi.json")} == set(ANSWERS)
    for (method, path), name in ANSWERS.items():
        op = doc["paths"][path][method]
        assert _name(_answer(op)) == name, (method, path)
        assert _name(op["responses"]["default"]["content"]["application/json"]["schema"]) == "Error"
        described = components[name.removesuffix("[]")]
        assert described["type"] == "object" and described["properties"] and described["required"], name


def test_the_answers_require_what_the_tui_and_the_cli_read():
    schemas = spec()["components"]["schemas"]
    assert {"id", "state", "node", "user", "gpus", "resources", "metrics", "waiting_for", "created", "started",
            "ended", "exit_code", "output_version", "params", "data", "command", "message"} <= set(
        schemas["JobView"]["required"])
    assert {"parts", "events"} <= set(schemas["JobView"]["properties"]) - set(schemas["JobView"]["required"])
    assert {"id", "name", "role", "health", "cpus", "memory_total", "gpus", "gpu_source"} <= set(
        schemas["Node"]["required"])
    assert "healthy" in schemas["Node"]["properties"]["health"]["enum"]
    assert {"index", "utilization", "memory_used", "job"} <= set(schemas["Gpu"]["required"])
    assert set(schemas["Metrics"]["required"]) == {"metrics", "system"}
    assert {"name", "version", "files", "size", "created", "held_by", "silent_holders", "copies", "replicas"} <= set(
        schemas["DatasetVersion"]["required"])
    assert {"held_by", "silent_holders", "copies", "replicas", "copies_note"} <= set(schemas["DatasetInfo"]["required"])
