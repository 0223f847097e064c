"""Dependency direction (STYLE 4): checked, not hoped for."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(json.loads(out.stdout))


def test_the_cli_loads_neither_textual_nor_aiohttp_nor_the_daemon():
    loaded = _loaded_after("import floydd.cli.floyd")
    for heavy in ("textual", "aiohttp", "floydd.tui", "floydd.api", "floydd.store", "floydd.records", "sqlite3"):
        assert heavy not in loaded, f"floyd's CLI imports {heavy}"


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


def test_the_core_never_imports_the_tui():
    offenders = [f"{path}: {n}" for path, n in _imports(ROOT / "floydd")
                 if n.split(".")[0] == "textual" or n.startswith("floydd.tui")]
    assert offenders == []


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
