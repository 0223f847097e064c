"""The TUI depends on the core only through the client (and the job model, whose states it
shows: plain values, no I/O); the core never loads Textual."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {"floydd.client", "floydd.errors", "floydd.config", "floydd.reach", "floydd.present", "floydd.model",
           "floydd.answers"}


@pytest.mark.parametrize("module", ["floydd.client", "floydd.cli.floyd", "floydd.cli.common"])
def test_core_import_does_not_load_textual(module: str) -> None:
    code = (f"import sys, json, {module}\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'textual_serve') "
            "or m.startswith('floydd.tui'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_tui_import_does_load_textual() -> None:
    """The probe above would see Textual if it were loaded (it is, by the TUI itself)."""
    code = "import sys, floydd.tui.app; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def _floydd_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name == "floydd" or name.startswith("floydd.")]


def test_tui_reaches_floydd_only_through_the_client() -> None:
    files = sorted((ROOT / "tui").rglob("*.py"))
    assert len(files) > 5
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in files for line, name in _floydd_imports(path)
           if not (name in ALLOWED or name == "floydd.tui" or name.startswith("floydd.tui."))]
    assert bad == []


def test_the_scan_catches_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import floydd.records\nfrom floydd.client import Client\nfrom floydd import scheduler\n")
    assert [name for _, name in _floydd_imports(sample)] == ["floydd.records", "floydd.client", "floydd"]


def test_core_never_imports_the_tui() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "floydd").rglob("*.py"))
           for line, name in _floydd_imports(path) if name.startswith("floydd.tui")]
    assert bad == []
