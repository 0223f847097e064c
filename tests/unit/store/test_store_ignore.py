from __future__ import annotations

import pytest

from floydd.store import IgnoreRules

CASES = [
    # patterns, path, is_dir, ignored
    (["*.log"], "a.log", False, True),
    (["*.log"], "deep/er/a.log", False, True),
    (["*.log"], "a.log.txt", False, False),
    (["build/"], "build", True, True),
    (["build/"], "build", False, False),            # a file named build
    (["build/"], "src/build", True, True),
    (["/build"], "src/build", True, False),         # anchored
    (["/build"], "build", True, True),
    (["doc/*.txt"], "doc/a.txt", False, True),
    (["doc/*.txt"], "doc/sub/a.txt", False, False),  # * does not cross /
    (["doc/*.txt"], "x/doc/a.txt", False, False),    # middle slash anchors
    (["**/logs"], "a/b/logs", True, True),
    (["**/logs"], "logs", True, True),
    (["a/**/b"], "a/b", True, True),
    (["a/**/b"], "a/x/y/b", True, True),
    (["a/**"], "a/x/y", False, True),
    (["a/**"], "a", True, False),
    (["*.log", "!keep.log"], "keep.log", False, False),
    (["*.log", "!keep.log", "*.log"], "keep.log", False, True),  # last match wins
    (["file?.py"], "file1.py", False, True),
    (["file?.py"], "file10.py", False, False),
    (["[ab].txt"], "a.txt", False, True),
    (["[!ab].txt"], "a.txt", False, False),
    (["[!ab].txt"], "c.txt", False, True),
    (["# comment", "", "   "], "# comment", False, False),
    (["\\#hash"], "#hash", False, True),
    (["\\!bang"], "!bang", False, True),
    (["trailing\\ "], "trailing ", False, True),
    (["spaces   "], "spaces", False, True),
    ([".venv"], ".venv", True, True),
    (["__pycache__/"], "pkg/__pycache__", True, True),
    (["*.py[co]"], "x.pyc", False, True),
]


@pytest.mark.parametrize("patterns,path,is_dir,ignored", CASES)
def test_gitignore_semantics(patterns, path, is_dir, ignored):
    assert IgnoreRules(patterns)(path, is_dir) is ignored


def test_empty_rules_are_falsy_and_ignore_nothing(tmp_path):
    rules = IgnoreRules.for_folder(tmp_path)
    assert not rules and not rules("anything", False)
    (tmp_path / ".floydignore").write_text("data/\n*.ckpt\n")
    rules = IgnoreRules.for_folder(tmp_path)
    assert rules and rules("data", True) and rules("m.ckpt", False) and not rules("train.py", False)
