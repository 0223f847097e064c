"""The replicated state and its rules: pure (no I/O, no clock), applied alike on every box."""
