"""Dependency direction (STYLE 4): checked, not hoped for.

The import rules are import-linter contracts (``[tool.importlinter]`` in pyproject.toml):
layers, the CLI and the TUI import no daemon-side module, the TUI not the CLI, no package
cycles. Here they run on a tree laid out as floydd installs (``tui/``, ``agent/`` and
``plugins/`` inside ``floydd/``, setup.py), and this module adds what import-linter cannot
see: what the CLI actually loads, and the purity of the decisions."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"tui": "tui", "agent": "agent", "plugins": "plugins"}
"""floydd.X <- the repo's folder (setup.py's package_dir)."""


def _installed_tree(where: Path) -> Path:
    """``where/floydd``: links to floydd/'s entries and to the mapped folders, as installed."""
    package = where / "floydd"
    package.mkdir()
    for entry in (ROOT / "floydd").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in MAPPED.items():
        (package / name).symlink_to(ROOT / folder)
    return where


def test_the_import_contracts_hold(tmp_path):
    tree = _installed_tree(tmp_path)
    lint = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    out = subprocess.run([sys.executable, "-c", lint, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                         cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
                         timeout=240)
    assert "Contracts: " in out.stdout, out.stdout + out.stderr     # it ran them, rather than failing to start
    assert out.returncode == 0, out.stdout[out.stdout.find("Broken contracts"):] + out.stderr


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(json.loads(out.stdout))


def test_the_cli_loads_neither_textual_nor_aiohttp_nor_the_daemon():
    loaded = _loaded_after("import floydd.cli.floyd")
    for heavy in ("textual", "aiohttp", "floydd.tui", "floydd.api", "floydd.store", "floydd.records", "sqlite3"):
        assert heavy not in loaded, f"floyd's CLI imports {heavy}"


START_PATH = ("import floydd.cli.floydd, floydd.daemon.main, floydd.daemon.app, floydd.daemon.control, floydd.records, "
              "floydd.api; floydd.api.routes()")
"""What ``floydd start`` loads before it serves (the CLI, the app, the control plane, the records)."""


def test_the_daemon_start_loads_none_of_what_it_no_longer_needs():
    """Issue 23 (an idle box ≤ 60 MiB): sqlite-utils (and the dateutil and pluggy modules it
    brought, ~1.3 MiB) left the start path, and the OpenAPI spec (~1 MiB) loads when first asked;
    pynvml (~1.7 MiB) once NVIDIA's library is found (:mod:`floydd.node._nvml`); the other
    verbs of ``floydd`` (init, join, audit, user, ...) when named; numpy and pandas never
    enter it. Nor does ``cryptography`` (~8 MiB, its Rust module most of it): the store's
    AES-GCM, the node key, certificates and token signatures load it when first used, the
    export routes (:mod:`floydd.bundle`) on the first export or import, and what only a member
    runs (joins, renewals, the mTLS app) when the box is one."""
    loaded = _loaded_after(START_PATH)
    assert {"floydd.records._schema", "floydd.api.jobs", "floydd.node._nvml", "floydd.store.keys.crypto",
            "floydd.security.identity", "floydd.security.tls"} <= loaded  # it did load the start path
    for heavy in ("sqlite_utils", "dateutil", "pluggy", "numpy", "pandas", "textual", "floydd.api.openapi", "pynvml",
                  "floydd.cli.cluster", "floydd.cli.audit", "floydd.cli.people", "floydd.cli.tokens", "floydd.present",
                  "cryptography", "floydd.bundle", "floydd.api.exchange", "floydd.daemon.joining",
                  "floydd.daemon.renewal", "floydd.daemon.peers"):
        assert heavy not in loaded, f"floydd start imports {heavy}"


def test_the_export_routes_served_before_their_module_loads_are_its_own():
    """``floydd.api`` serves ``/v1/export`` and ``/v1/import`` with handlers that load
    :mod:`floydd.api.exchange` on their first call: the routes it names are the module's."""
    from floydd.api import EXCHANGE_ROUTES, exchange, routes
    assert {(r.method, r.path, r.handler.__name__) for r in exchange.routes} == set(EXCHANGE_ROUTES)
    served = {(r.method, r.path): r.handler for r in routes()}
    for method, path, name in EXCHANGE_ROUTES:
        assert served[method, path].__name__ == name and served[method, path] is not getattr(exchange, name)


def _imports(folder: Path) -> list[tuple[str, str]]:
    """(file, imported module) for every import under ``folder``."""
    found = []
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [(str(path.relative_to(ROOT)), n) for n in names]
    return found


PLACER = "scheduler/placer.py"
"""The leader's asyncio loop around the pure placement (as the raft driver is around raft's core)."""


def test_routes_never_import_the_composition_root_and_decisions_stay_pure():
    """``api/`` holds routes and middleware: the daemon builds the app and imports them, not
    the other way round. ``decide`` and the scheduler import no I/O."""
    assert [f"{p}: {n}" for p, n in _imports(ROOT / "floydd" / "api") if n.startswith("floydd.daemon")] == []
    pure = [(p, n) for p, n in _imports(ROOT / "floydd" / "scheduler") + _imports(ROOT / "floydd" / "jobs")
            if p.endswith(("decide.py",)) or "/scheduler/" in p and not p.endswith(PLACER)]
    allowed = ("__future__", "dataclasses", "typing", "heapq", "collections", "floydd.model", "floydd.scheduler",
               "floydd.errors")
    assert any(p.endswith("outages.py") for p, _n in pure)
    assert [f"{p}: {n}" for p, n in pure if not n.startswith(allowed)] == []


def test_the_daemon_app_factory_does_not_load_textual():
    assert "textual" not in _loaded_after("import floydd.daemon.app")
