"""The core is pure (STYLE 2-3): no asyncio, network, sqlite, clock or global randomness.

Two checks: importing the package in a fresh interpreter loads none of the forbidden
modules; and an AST scan of the core modules finds no import of them (sqlite3 only in
the store module) and no call that reads a clock or the global random generator.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import floydd.cluster.raft as raft

RAFT_DIR = Path(raft.__file__).parent
FORBIDDEN = {"asyncio", "aiohttp", "sqlite3", "zeroconf", "textual", "socket", "time", "random",
             "threading", "datetime", "os", "selectors", "subprocess"}
STORE_MODULE = "sqlite_storage.py"


def test_importing_the_core_loads_no_io_modules() -> None:
    code = ("import sys, floydd.cluster.raft, floydd.cluster.raft.codec, floydd.cluster.raft.core;"
            "bad = sorted({'asyncio', 'aiohttp', 'sqlite3', '_sqlite3', 'zeroconf', 'textual'}"
            " & set(sys.modules)); print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_importing_the_sqlite_store_is_what_loads_sqlite() -> None:
    code = "import sys, floydd.cluster.raft.sqlite_storage; print('sqlite3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def _imports(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_import_nothing_forbidden() -> None:
    modules = sorted(RAFT_DIR.glob("*.py"))
    assert len(modules) >= 10
    for path in modules:
        allowed = {"sqlite3"} if path.name == STORE_MODULE else set()
        bad = (_imports(path) & FORBIDDEN) - allowed
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_only_the_store_module_knows_sqlite() -> None:
    for path in RAFT_DIR.glob("*.py"):
        if path.name != STORE_MODULE:
            assert "sqlite" not in _imports(path), path.name
