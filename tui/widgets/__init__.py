"""Widgets that draw parts of a snapshot; none of them talks to the daemon."""
