"""packaging/add-wheels: the lab's wheels join a bundle (a folder or a .tar) with their own
lock; the install's lock is never touched and its packages never shadowed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LOCK = "# the install\nclick==8.1.0 --hash=sha256:" + "0" * 64 + "\n"


def _add(bundle: Path, *wheels: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "packaging" / "add-wheels"), str(bundle), *map(str, wheels)],
                          capture_output=True, text=True, timeout=60)


def _bundle(root: Path) -> Path:
    (root / "wheels").mkdir(parents=True)
    (root / "requirements.lock").write_text(LOCK)
    (root / "wheels" / "click-8.1.0-py3-none-any.whl").write_bytes(b"click")
    (root / "install.sh").write_text("#!/bin/sh\n")
    (root / "install.sh").chmod(0o755)
    return root


def _wheel(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder / name


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_wheels_join_an_unpacked_bundle_with_their_own_lock(tmp_path):
    bundle = _bundle(tmp_path / "b")
    mine = _wheel(tmp_path / "lab", "My_Lib-1.2-py3-none-any.whl", b"mylib")
    other = _wheel(tmp_path / "lab", "tool-0.1-cp311-cp311-manylinux_2_17_x86_64.whl", b"tool")
    res = _add(bundle, mine, other)
    assert res.returncode == 0, res.stderr
    assert (bundle / "wheels" / mine.name).read_bytes() == b"mylib"
    assert (bundle / "requirements.lock").read_text() == LOCK
    lines = [l for l in (bundle / "wheelhouse.lock").read_text().splitlines() if not l.startswith("#")]
    assert lines == [f"my-lib==1.2 --hash=sha256:{_sha(b'mylib')}", f"tool==0.1 --hash=sha256:{_sha(b'tool')}"]

    again = _add(bundle, mine)  # the same bytes again: nothing to do
    assert again.returncode == 0 and "0 wheel(s) added" in again.stdout
    assert [l for l in (bundle / "wheelhouse.lock").read_text().splitlines() if not l.startswith("#")] == lines


def test_a_clash_is_refused_and_changes_nothing(tmp_path):
    bundle = _bundle(tmp_path / "b")
    first = _wheel(tmp_path / "v1", "mylib-1.0-py3-none-any.whl", b"one")
    assert _add(bundle, first).returncode == 0
    before = sorted(p.name for p in (bundle / "wheels").iterdir()), (bundle / "wheelhouse.lock").read_text()

    rebuilt = _wheel(tmp_path / "v2", "mylib-1.0-py3-none-any.whl", b"two")
    fresh = _wheel(tmp_path / "v2", "fresh-1.0-py3-none-any.whl", b"fresh")
    res = _add(bundle, fresh, rebuilt)
    assert res.returncode == 2 and "other bytes" in res.stderr and "new version" in res.stderr

    shadow = _wheel(tmp_path / "v2", "Click-9.0-py3-none-any.whl", b"evil click")
    res = _add(bundle, shadow)
    assert res.returncode == 2 and "click is pinned by the bundle's requirements.lock" in res.stderr
    assert (sorted(p.name for p in (bundle / "wheels").iterdir()), (bundle / "wheelhouse.lock").read_text()) == before

    res = _add(bundle, tmp_path / "v2" / "README.txt")
    assert res.returncode == 2 and "not a wheel" in res.stderr and "Traceback" not in res.stderr


def test_wheels_join_a_bundle_tar_which_keeps_one_top_folder(tmp_path):
    _bundle(tmp_path / "floydd-0.1.0-x")
    tar_path = tmp_path / "floydd-0.1.0-x.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(tmp_path / "floydd-0.1.0-x", arcname="floydd-0.1.0-x")
    mine = _wheel(tmp_path / "lab", "mylib-1.0-py3-none-any.whl", b"mylib")
    res = _add(tar_path, mine)
    assert res.returncode == 0, res.stderr
    with tarfile.open(tar_path) as tar:
        names = {m.name: m for m in tar.getmembers()}
        assert {n.split("/")[0] for n in names} == {"floydd-0.1.0-x"}
        assert tar.extractfile("floydd-0.1.0-x/wheels/mylib-1.0-py3-none-any.whl").read() == b"mylib"
        assert _sha(b"mylib") in tar.extractfile("floydd-0.1.0-x/wheelhouse.lock").read().decode()
        assert tar.extractfile("floydd-0.1.0-x/requirements.lock").read().decode() == LOCK
        assert names["floydd-0.1.0-x/install.sh"].mode & 0o111  # still executable
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("add-wheels-") or p.suffix == ".part"]
