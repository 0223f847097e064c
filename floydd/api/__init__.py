"""The ``/v1`` API: one module per resource, the middleware, and the published spec.

Handlers are thin: they read what the daemon's composition root (:mod:`floydd.daemon.app`)
put in the app under :mod:`floydd.api.keys` and map :class:`~floydd.errors.FloyddError` to
JSON errors at the edge. The node-to-node API is :mod:`floydd.daemon.peers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # importing floydd.api.schemas (plain types) must not load aiohttp
    from aiohttp import web

__all__ = ["routes"]

EXCHANGE_ROUTES = (("POST", "/v1/export", "export"), ("POST", "/v1/import", "import_"))
"""The routes of :mod:`floydd.api.exchange` (method, path, its handler's name), served by
handlers that load it on the first export or import: it brings the export file's format
(:mod:`floydd.bundle`) and ``cryptography``, ~8 MiB of every idle box alone (issue 23). A
test checks this is the module's own list."""


def routes() -> list[web.AbstractRouteDef]:
    """Every ``/v1`` route (what ``/v1/openapi.json`` describes)."""
    from aiohttp import web

    from floydd.api import apitokens, audit, cluster, datasets, jobs, nodes, people
    return [*(route for module in (nodes, jobs, datasets) for route in module.routes),
            *(web.route(method, path, _exchange(name)) for method, path, name in EXCHANGE_ROUTES),
            *(route for module in (cluster, apitokens, audit, people) for route in module.routes),
            web.get("/v1/openapi.json", _openapi)]


async def _openapi(request: web.Request) -> web.StreamResponse:
    """The spec's module is loaded when first asked, not at start: its tables and msgspec's
    schemas are ~1 MiB of every idle daemon (issue 23)."""
    from floydd.api import openapi
    return await openapi.openapi(request)


def _exchange(name: str):
    """The handler of :mod:`floydd.api.exchange` named ``name``, that module loaded on its first call."""
    async def handler(request: web.Request) -> web.StreamResponse:
        from floydd.api import exchange
        return await getattr(exchange, name)(request)
    handler.__name__ = handler.__qualname__ = name
    return handler
