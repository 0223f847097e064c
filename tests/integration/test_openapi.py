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
    assert {"gpus", "nodes", "data", "params", "max_runtime", "idem_key", "code_tree"} <= set(submit["properties"])
