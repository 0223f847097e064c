"""The raft driver: the thin asyncio loop around the pure core in :mod:`floydd.cluster.raft`."""
