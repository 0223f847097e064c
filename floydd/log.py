"""One logger per subsystem (as aiohttp's log.py). Libraries never configure handlers."""

import logging

api = logging.getLogger("floydd.api")
cluster = logging.getLogger("floydd.cluster")
raft = logging.getLogger("floydd.cluster.raft")
scheduler = logging.getLogger("floydd.scheduler")
store = logging.getLogger("floydd.store")
runtime = logging.getLogger("floydd.runtime")
records = logging.getLogger("floydd.records")
node = logging.getLogger("floydd.node")
daemon = logging.getLogger("floydd.daemon")
