"""Datasets across two real daemons on loopback: upload on one box, list, info and clone on the other."""

from __future__ import annotations

import filecmp
import os
import signal
import subprocess

from tests.conftest import free_ports, wait_until
from tests.harness.processes import floydd
from tests.system.test_cluster_cli import _start


def _events(stream) -> dict:
    result: dict = {}
    for event in stream:
        assert "error" not in event, event
        result = event.get("result", result)
    return result


def test_a_dataset_uploaded_on_one_box_is_kept_on_both_and_cloned_on_the_other(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    pa, pb, api_a, api_b = free_ports(4)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "weights.bin").write_bytes(os.urandom(3 << 20))
    (src / "sub" / "labels.txt").write_text("0 1 2\n")
    procs: list[subprocess.Popen] = []
    try:
        floydd("init", "--state-dir", a, "--name", "lab", "--listen", f"127.0.0.1:{pa}",
                "--advertise", f"127.0.0.1:{pa}", "--api-listen", f"127.0.0.1:{api_a}")
        ca = _start(a, "box-a", procs)
        token = floydd("token", "create", "--state-dir", a, "--ttl", "10m").stdout.strip()
        floydd("join", "--state-dir", b, token, "--listen", f"127.0.0.1:{pb}", "--advertise", f"127.0.0.1:{pb}",
                "--api-listen", f"127.0.0.1:{api_b}")
        cb = _start(b, "box-b", procs)
        wait_until(lambda: len(cb.nodes()) == 2, timeout=30, what="box-b to see both nodes")

        version = _events(ca.upload(src, "mnist", "first"))
        assert (version["ref"], version["files"], version["message"]) == ("mnist:1", 2, "first")
        both = wait_until(lambda: len((v := cb.datasets())[0]["holders"]) == 2 and v if cb.datasets() else None,
                          timeout=30, what="box-b listing the version with two holders")
        assert [(v["ref"], v["tree"]) for v in both] == [("mnist:1", version["tree"])]
        assert sorted(both[0]["held_by"]) == ["box-a", "box-b"]           # names, for `floyd data ls`
        info = cb.dataset("mnist:latest")
        assert {e["path"] for e in info["entries"]} == {"weights.bin", "sub", "sub/labels.txt"}

        out = tmp_path / "out"
        cloned = _events(cb.clone("mnist", out))
        assert cloned["dest"] == str(out)
        cmp = filecmp.dircmp(src, out)
        assert not cmp.diff_files and not cmp.left_only and not cmp.right_only
        assert filecmp.cmp(src / "sub" / "labels.txt", out / "sub" / "labels.txt", shallow=False)

        assert cb.delete_dataset("mnist:1") == {"deleted": "mnist:1"}
        wait_until(lambda: ca.datasets() == [], timeout=30, what="box-a to see the delete")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
