"""Deterministic simulator for the raft core (DESIGN §5, §6).

N :class:`~floydd.cluster.raft.RaftNode` cores are driven by one seeded event
scheduler with a virtual clock; a simulated network drops, duplicates, reorders,
delays and partitions messages; a simulated disk loses writes that were not
fsynced when its node crashes; crashes, restarts, membership changes and
leadership transfers are injected; clients run a key-value workload with writes
through the log and reads through ReadIndex. Every run checks Raft's safety
properties as it goes and the client history for linearizability at the end.

Entry points: ``python -m tests.sim.run --seed 1234 --steps 2000 --nodes 5`` and
:func:`tests.sim.world.run_seed`.
"""
