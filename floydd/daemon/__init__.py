"""The node daemon process: its long-lived services and how it starts and stops."""
