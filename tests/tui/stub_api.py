"""A stub floydd API over a unix socket, serving a :class:`FakeCluster`.

The real :class:`floydd.client.Client` talks to it exactly as to a daemon, so
the banner/recovery test and ``bench/tui_refresh.py`` exercise the whole path
(HTTP, JSON, the poller thread). :class:`StubServer` runs the aiohttp app on
its own event loop in a background thread; ``stop()`` then ``start()`` again
on the same socket is how a test kills and revives "the daemon".

As a program (the bench runs it in its own process so its CPU is not counted
as the TUI's)::

    python -m tests.tui.stub_api --socket /tmp/x.sock --nodes 64 --gpus 8 --jobs 1000 --tick 1
"""

from __future__ import annotations

import argparse
import asyncio
import threading
from pathlib import Path

from aiohttp import web

from floydd import logframe
from floydd.errors import FloyddError, NotFound

try:
    from tests.tui.fake_cluster import FakeCluster
except ImportError:  # run as a script from tests/tui
    from fake_cluster import FakeCluster  # type: ignore[no-redef]

__all__ = ["create_app", "StubServer"]

CLUSTER = web.AppKey("cluster", FakeCluster)


def create_app(cluster: FakeCluster, tick: float | None = None) -> web.Application:
    """The stub API; with ``tick`` the cluster's time moves by that much each ``tick`` seconds."""
    app = web.Application(middlewares=[_errors])
    app[CLUSTER] = cluster
    routes = web.RouteTableDef()

    def c() -> FakeCluster:
        return app[CLUSTER]

    def key(request: web.Request) -> str:
        return f"{request.match_info['project']}/{request.match_info['number']}"

    @routes.get("/v1/info")
    async def info(request: web.Request) -> web.Response:
        return web.json_response(c().info())

    @routes.get("/v1/nodes")
    async def nodes(request: web.Request) -> web.Response:
        return web.json_response(c().list_nodes())

    @routes.get("/v1/jobs")
    async def jobs(request: web.Request) -> web.Response:
        q = request.query
        limit = int(q["limit"]) if q.get("limit") else None
        return web.json_response(c().list_jobs(q.get("project") or None, q.get("state") or None, limit=limit,
                                               offset=int(q.get("offset") or 0), sort=q.get("sort"),
                                               q=q.get("q")))

    @routes.get("/v1/jobs/{project}/{number}")
    async def job(request: web.Request) -> web.Response:
        return web.json_response(c().job(key(request)))

    @routes.get("/v1/jobs/{project}/{number}/metrics")
    async def metrics(request: web.Request) -> web.Response:
        return web.json_response(c().metrics(key(request)))

    @routes.get("/v1/jobs/{project}/{number}/logs")
    async def logs(request: web.Request) -> web.StreamResponse:
        offset = int(request.query.get("offset", "0"))
        text = b"".join(c().logs(key(request), offset))
        token = logframe.new_token()   # ends as the daemon's log answers do
        return web.Response(body=text + logframe.frame(token, {"result": {"offset": offset + len(text)}}),
                            content_type="text/plain", headers={logframe.HEADER: token})

    @routes.post("/v1/jobs/{project}/{number}/stop")
    async def stop(request: web.Request) -> web.Response:
        return web.json_response(c().stop(key(request)))

    @routes.post("/v1/jobs/{project}/{number}/restart")
    async def restart(request: web.Request) -> web.Response:
        return web.json_response(c().restart(key(request), await request.json()))

    @routes.get("/v1/compare")
    async def compare(request: web.Request) -> web.Response:
        keys = [k for k in request.query.get("jobs", "").split(",") if k]
        return web.json_response(c().compare(keys))

    app.add_routes(routes)
    if tick:
        app.cleanup_ctx.append(_ticker(tick))
    return app


@web.middleware
async def _errors(request: web.Request, handler):  # type: ignore[no-untyped-def]
    try:
        return await handler(request)
    except FloyddError as exc:
        return web.json_response(exc.to_payload(), status=exc.status)
    except web.HTTPNotFound:
        return web.json_response(NotFound(f"no route {request.path}").to_payload(), status=404)


def _ticker(seconds: float):  # type: ignore[no-untyped-def]
    async def ctx(app: web.Application):  # type: ignore[no-untyped-def]
        async def run() -> None:
            while True:
                await asyncio.sleep(seconds)
                app[CLUSTER].tick(seconds)

        task = asyncio.create_task(run())
        yield
        task.cancel()
    return ctx


class StubServer:
    """The stub API on ``socket_path``, served from a background thread."""

    def __init__(self, cluster: FakeCluster, socket_path: Path, tick: float | None = None) -> None:
        self.cluster = cluster
        self.socket_path = Path(socket_path)
        self.tick = tick
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None

    def start(self) -> "StubServer":
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._runner = web.AppRunner(create_app(self.cluster, self.tick))
            self._loop.run_until_complete(self._runner.setup())
            site = web.UnixSite(self._runner, str(self.socket_path))
            self._loop.run_until_complete(site.start())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=serve, name="stub-floydd", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("stub API did not start")
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket, like a daemon that died."""
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = self._loop = self._runner = None
        self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--tick", type=float, default=1.0)
    args = parser.parse_args()
    cluster = FakeCluster(nodes=args.nodes, gpus=args.gpus, jobs=args.jobs)
    web.run_app(create_app(cluster, args.tick or None), path=str(args.socket), print=None,
                handle_signals=True)


if __name__ == "__main__":
    main()
