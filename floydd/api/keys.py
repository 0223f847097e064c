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
CLUSTER = web.AppKey("cluster", object)
CLUSTER_DATASETS = web.AppKey("cluster_datasets", object)
"""The cluster's :class:`~floydd.cluster.datasets.ClusterDatasets`; None on a single box."""
