"""The code-shape figures issue 22 tracks, for a checkout: ``python tools/code_figures.py [ROOT]``.

- reads of job dicts (``job["key"]`` / ``job.get("key")``, by AST) in floydd/, tui/, agent/;
- the largest flat folders (modules besides ``__init__.py``);
- modules over 400 lines;
- classes built from more than one base of ours (mixins), and classes named ``*Mixin``.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

LIMIT = 400


def _job_read(node: ast.AST) -> str | None:
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "job" \
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "job" and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def main(root: Path) -> None:
    folders: dict[Path, int] = Counter()
    over, classes, ours = [], [], set()
    keys: Counter = Counter()
    files: set[str] = set()
    for base in (root / "floydd", root / "tui", root / "agent"):
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = str(path.relative_to(root))
            if path.name != "__init__.py":
                folders[path.parent.relative_to(root)] += 1
            if (lines := len(path.read_text().splitlines())) > LIMIT:
                over.append((lines, rel))
            for node in ast.walk(ast.parse(path.read_text())):
                if (key := _job_read(node)) is not None:
                    keys[key] += 1
                    files.add(rel)
                if isinstance(node, ast.ClassDef):
                    ours.add(node.name)
                    classes.append((rel, node.name, [ast.unparse(b).split(".")[-1] for b in node.bases]))
    mixed = [(f, c, [b for b in bases if b in ours]) for f, c, bases in classes]
    mixed = [(f, c, bases) for f, c, bases in mixed if len(bases) > 1]
    print(f"job dict reads: {sum(keys.values())} over {len(keys)} keys in {len(files)} files")
    print("largest flat folders:", ", ".join(f"{p} {n}" for p, n in folders.most_common(5)))
    print(f"modules over {LIMIT} lines: {len(over)}")
    for lines, rel in sorted(over, reverse=True):
        print(f"  {lines:5d} {rel}")
    print(f"classes with more than one base of ours: {len(mixed)} ({sum(len(b) for *_, b in mixed)} bases)")
    for rel, name, bases in mixed:
        print(f"  {rel}: {name}({', '.join(bases)})")
    print("classes named *Mixin:", sum(c.endswith("Mixin") for _, c, _ in classes))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
