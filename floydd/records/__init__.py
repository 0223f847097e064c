"""Experiment records of one node in SQLite (``records.db``): jobs, metrics, events, samples.

One writer connection (``BEGIN IMMEDIATE`` under a lock), per-thread read connections,
WAL with ``synchronous=NORMAL``; the schema is built by ``_migrations.Migrations`` (the table
sqlite-utils kept, on plain sqlite3).
"""

from floydd.records._records import Records
from floydd.records._schema import MIGRATIONS

__all__ = ["Records", "MIGRATIONS"]
