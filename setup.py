"""Package layout only; all metadata is in pyproject.toml.

Everything installs under the one namespace ``floydd``: the repo folders
``agent/``, ``tui/`` and ``plugins/`` become ``floydd.agent``, ``floydd.tui``
and ``floydd.plugins`` (DESIGN §4), so nothing generic lands in site-packages.
"""

from setuptools import find_packages, setup

MAPPED = {"floydd.agent": "agent", "floydd.tui": "tui", "floydd.plugins": "plugins"}

packages = ["floydd"] + [f"floydd.{p}" for p in find_packages("floydd")]
for name, folder in MAPPED.items():
    packages += [name] + [f"{name}.{p}" for p in find_packages(folder)]

setup(packages=packages, package_dir={"floydd": "floydd", **MAPPED})
