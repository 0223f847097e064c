"""Typed keys for what the app shares between handlers (``web.AppKey``)."""

from __future__ import annotations

from aiohttp import web

CONFIG = web.AppKey("config", object)
RECORDS = web.AppKey("records", object)
STORE = web.AppKey("store", object)
JOBS = web.AppKey("jobs", object)
INVENTORY = web.AppKey("inventory", object)
STARTED = web.AppKey("started", float)
TCP_TOKEN = web.AppKey("tcp_token", str)
"""The shared token of the loopback dev port (``floydd start --dev-tcp``)."""
REMOTE_API = web.AppKey("remote_api", object)
"""``(host, port, ssl_context)`` where this node serves ``/v1`` over TLS to people with a
personal token (set by the control plane of a box in a cluster; None: nowhere)."""
CLUSTER = web.AppKey("cluster", object)
"""This node's :class:`~floydd.cluster.service.ClusterService` (a box alone: a cluster of one)."""
DATASETS = web.AppKey("datasets", object)
"""The cluster's dataset catalog, :class:`~floydd.cluster.replication.datasets.ClusterDatasets`."""
STORE_READY = web.AppKey("store_ready", object)
"""An ``asyncio.Event`` set once no re-seal under the cluster's secret is pending (a box that
joined re-seals its older objects while it serves: :mod:`floydd.store.keys.rekey`, online)."""
EPOCHS = web.AppKey("epochs", object)
"""Store key epochs and the background re-seal, :class:`~floydd.daemon.epochs.StoreEpochs`."""
TOKENS = web.AppKey("tokens", object)
"""Join tokens (``create(ttl) -> str``) where this node holds the cluster CA; else None."""
HANDOFFS = web.AppKey("handoffs", object)
"""Open files a local CLI handed over (:class:`~floydd.api.handoff.Handoffs`; absent in an app
that serves no unix socket)."""
