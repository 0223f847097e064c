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


def test_the_core_never_imports_the_tui():
    offenders = []
    for path in (ROOT / "floydd").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names
                          if n.split(".")[0] == "textual" or n.startswith("floydd.tui")]
    assert offenders == []


def test_the_daemon_app_factory_does_not_load_textual():
    assert "textual" not in _loaded_after("import floydd.daemon.app")
