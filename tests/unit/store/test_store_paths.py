from __future__ import annotations

from pathlib import Path

import pytest

from floydd.errors import UnsafePath
from floydd.store.paths import check_link, check_tree_path, is_within

BAD_PATHS = [b"", b"/etc/passwd", b"..", b"../x", b"a/../../x", b"a/..", b"./a", b"a/./b", b"a//b", b"a/",
             b"a\\..\\b", b"..\\x", b"a\x00b", b"x" * 256, b"/".join([b"d"] * 2100)]
GOOD_PATHS = [b"a", b"a/b/c.txt", b".hidden", b"...", b"a..b", b"with space", "ünï".encode(), b"\xff\xfe"]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_unsafe_tree_paths_refused(path):
    with pytest.raises(UnsafePath):
        check_tree_path(path)


@pytest.mark.parametrize("path", GOOD_PATHS)
def test_safe_tree_paths_accepted(path):
    check_tree_path(path)


@pytest.mark.parametrize("link,target,links", [
    (b"l", b"/etc/passwd", {}),
    (b"l", b"..", {}),
    (b"a/l", b"../../x", {}),
    (b"l", b"../data-secret/x", {}),              # sibling-prefix escape
    (b"l", b"s/../etc", {b"s": b"."}),              # normalises inside, resolves outside
    (b"a/l", b"s/../../x", {b"a/s": b"."}),          # a/s is a itself: lexically x, really ../x
    (b"l", b"m/x", {b"m": b"/etc"}),                # through a link that leaves
    (b"l", b"m", {b"m": b"l"}),                      # loop
    (b"l", b"", {}),
    (b"l", b"a\\b", {}),
])
def test_links_leaving_the_tree_refused(link, target, links):
    with pytest.raises(UnsafePath) as e:
        check_link(link, target, {**links, link: target})
    assert "symlink" in e.value.message


@pytest.mark.parametrize("link,target,links", [
    (b"l", b"a/file", {}),
    (b"a/b/l", b"../../top", {}),
    (b"l", b".", {}),
    (b"a/l", b"s/x", {b"a/s": b"../b"}),
    (b"l", b"dangling-but-inside", {}),
])
def test_links_inside_accepted(link, target, links):
    check_link(link, target, {**links, link: target})


def test_is_within_compares_components():
    assert is_within(Path("/data"), Path("/data/x"))
    assert is_within(Path("/data"), Path("/data"))
    assert not is_within(Path("/data"), Path("/data-secret"))
    assert not is_within(Path("/data"), Path("/data-secret/x"))
