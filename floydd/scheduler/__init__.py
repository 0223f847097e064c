"""Placement as pure functions over a snapshot (no I/O, no clock reads)."""

from floydd.scheduler.placement import NodeSnapshot, PendingJob, Placement, Plan, place, unplaceable
from floydd.scheduler.views import node_snapshots

__all__ = ["NodeSnapshot", "PendingJob", "Placement", "Plan", "node_snapshots", "place", "unplaceable"]
