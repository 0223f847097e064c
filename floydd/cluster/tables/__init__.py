"""Tables kept beside the raft log, in its SQLite database: the archive and the audit chain."""
