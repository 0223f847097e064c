"""floydd: a self-hosted FloydHub for labs that pool their own GPU workstations."""

__version__ = "0.3.0"
