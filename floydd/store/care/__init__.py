"""Keeping the store whole: maintenance, scrub, rebuilding and restoring its catalog."""
