"""A real job on a system-mode box (root daemon, job user, bubblewrap) swaps folders of its
/output for links into the daemon's state folder (``renameat2(RENAME_EXCHANGE)``, as fast as
it can) while the daemon takes checkpoints of it every half second, and leaves it that way
for the final output save. Neither a checkpoint nor the final output may hold the store key,
a root-only file planted in the state folder, or anything else from outside /output.

Every object the store holds is decrypted and searched after the run, so a checkpoint that
was superseded (and its version deleted) is searched too. The final save itself cannot be
raced by the job here: the agent kills every process of the job before it reports the end
(what a stray process could do then is raced in tests/integration/security).

Root only (useradd, chown, bwrap as root), as CI runs.
"""

from __future__ import annotations

import os
import pwd
import re
import signal
from pathlib import Path

import pytest

from floydd.agent.sandbox import probe_bwrap
from floydd.store import Store
from tests.system.system_lab import lab  # noqa: F401  (the fixture: accounts, a root, the daemon)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="system mode tests need root (useradd, chown)"),
              pytest.mark.skipif(probe_bwrap()[0] is None and not os.environ.get("CI"),
                                 reason="bubblewrap is not installed (CI installs it)")]

SWAP_SECONDS = 8


def _python_for_others() -> str | None:
    """A Python the job user can run in the sandbox (the tests' own may live under /root)."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        real = Path(os.path.realpath(path))
        if real.exists() and all(os.stat(p).st_mode & 0o001 for p in (real, *real.parents)):
            return path
    return None

HOSTILE_JOB = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
state, seconds = sys.argv[1], float(sys.argv[2])
out = "/output"
# a/ holds "key" (a/ <-> b -> STATE/store), a2/ holds "planted" (a2/ <-> b2 -> STATE),
# c (a file) <-> d -> STATE/store/key: a daemon walking paths reads STATE/store/key as a/key
pairs = [("a", "b", state + "/store", "key"), ("a2", "b2", state, "planted"), ("c", "d", state + "/store/key", None)]
for x, y, target, inner in pairs:
    if inner:
        os.mkdir(f"{out}/{x}")
        open(f"{out}/{x}/{inner}", "w").write(f"innocent {x}/{inner}\n")
    else:
        open(f"{out}/{x}", "w").write(f"innocent {x}\n")
    os.symlink(target, f"{out}/{y}")
open(f"{out}/model.bin", "w").write("innocent weights\n")
swaps, end = 0, time.time() + seconds
while time.time() < end:
    for x, y, _, _ in pairs:
        if libc.renameat2(-100, f"{out}/{x}".encode(), -100, f"{out}/{y}".encode(), 2) == 0:
            swaps += 1
print("swaps", swaps, flush=True)
'''


def test_a_job_swapping_its_output_for_links_never_gets_the_store_key_in_its_output(lab):
    python = _python_for_others()
    if python is None:
        pytest.skip("no Python here that the job user may run (/usr/bin/python3)")
    lab.env["FLOYDD_CHECKPOINT_INTERVAL"] = "0.5"
    lab.start()
    planted = lab.state / "planted"
    planted.write_bytes(b"PLANTED-ROOT-ONLY-" + os.urandom(16).hex().encode() + b"\n")
    os.chmod(planted, 0o600)
    key = (lab.state / "store" / "key").read_bytes()
    assert len(key) >= 16

    owner = pwd.getpwnam(lab.member)
    project = lab.homes[lab.member] / "proj"
    project.mkdir()
    (project / "hostile.py").write_text(HOSTILE_JOB)
    for path in (project, project / "hostile.py"):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    assert lab.floyd_as(lab.member, "init", "swaps", cwd=project).returncode == 0
    run = lab.floyd_as(lab.member, "run", "-f", f"{python} hostile.py {lab.state} {SWAP_SECONDS}", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    swaps = int(re.search(r"swaps (\d+)", run.stdout).group(1))
    assert swaps > 1000, run.stdout                                     # it did race

    # the final output, fetched by its owner: only what the job wrote, never a byte from outside
    dest = lab.homes[lab.member] / "got"
    got = lab.floyd_as(lab.member, "output", "swaps/1", str(dest))
    assert got.returncode == 0, got.stderr
    files = {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink()}
    assert "model.bin" in files, files
    for name, data in files.items():
        assert data.startswith(b"innocent"), (name, data[:80])
    links = [os.readlink(p) for p in dest.rglob("*") if p.is_symlink()]
    assert links == [], links                                            # every link left /output: skipped

    # every checkpoint the daemon took (superseded or not) is still in the store: none holds a secret
    lab.proc.send_signal(signal.SIGTERM)
    lab.proc.wait(timeout=60)
    with Store.open(lab.state / "store") as store:
        objects = [store.read_object(oid) for oid in list(store.backend.list())]
    assert objects
    for data in objects:
        assert key not in data and planted.read_bytes() not in data
    # checkpoints were tried all along; most are refused (a folder swapped for a link under the
    # snapshot), said in one line each, and nothing crashed
    log = (lab.root / "daemon.log").read_text()
    tries = re.findall(r"swaps/1: (checkpoint swaps/1/output:\d+|saving a checkpoint: .*trying again later)", log)
    assert len(tries) >= 3, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
