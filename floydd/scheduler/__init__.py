"""Placement as pure functions over a snapshot (no I/O, no clock reads)."""

from floydd.scheduler.placement import NodeSnapshot, PendingJob, Placement, Plan, place, unplaceable

__all__ = ["NodeSnapshot", "PendingJob", "Placement", "Plan", "place", "unplaceable"]
