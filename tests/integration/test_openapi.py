"""The published OpenAPI document matches the routes the app really serves."""

from __future__ import annotations

from floydd.api.openapi import spec
from floydd.api.server import create_app
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
