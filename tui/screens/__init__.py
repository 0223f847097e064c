"""One module per screen; each draws the latest snapshot and says what it needs (a Want)."""
