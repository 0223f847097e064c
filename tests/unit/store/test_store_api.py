"""The public surface of floydd.store is small and pinned (STYLE 6)."""

from __future__ import annotations

import subprocess
import sys

import floydd.store as store_pkg


def test_public_names_are_pinned():
    assert sorted(store_pkg.__all__) == sorted([
        "Store", "ObjectId", "Tree", "Entry", "Kind", "Catalog", "DatasetVersion", "check_name",
        "GcReport", "VerifyReport", "Damage", "SnapshotResult", "IgnoreRules", "IGNORE_FILE",
        "Backend", "Batch", "LocalBackend", "MemoryBackend",
    ])
    for name in store_pkg.__all__:
        assert getattr(store_pkg, name) is not None


def test_store_api_shape():
    s = store_pkg.Store
    for method in ("open", "snapshot", "snapshot_report", "upload", "restore", "read_tree", "tree_stats",
                   "gc", "verify", "close"):
        assert callable(getattr(s, method)), method
    for method in ("add_version", "resolve", "list", "delete", "check_name", "pin", "unpin", "remap_trees",
                   "key_fingerprint"):
        assert callable(getattr(store_pkg.Catalog, method)), method


def test_store_imports_no_daemon_code():
    code = ("import sys, floydd.store; bad = [m for m in sys.modules if m.startswith(('aiohttp', 'textual', "
            "'floydd.api', 'floydd.cluster', 'floydd.tui', 'floydd.cli'))]; print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_memory_backend_store_round_trip(tmp_path):
    s = store_pkg.Store.open(tmp_path / "s", backend=store_pkg.MemoryBackend())
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_bytes(b"hello")
    v = s.upload(tmp_path / "src", "mem")
    s.restore(v.tree, tmp_path / "out")
    assert (tmp_path / "out" / "f").read_bytes() == b"hello"
    assert not (tmp_path / "s" / "objects").exists()
    s.backend.corrupt(v.tree)
    s._trees.clear()
    assert [d.versions for d in s.verify().damaged] == [("mem:1",)]


def test_rekey_surface_is_pinned():
    from floydd.store.keys import rekey
    assert sorted(rekey.__all__) == sorted(["RekeyProgress", "begin_rekey", "rekey", "finish_rekey", "cancel_rekey",
                                            "rekey_pending", "refuse_if_pending", "NEXT_KEY", "JOURNAL",
                                            "plan_rekey", "cluster_secret", "Stopped"])   # issue 21: online
