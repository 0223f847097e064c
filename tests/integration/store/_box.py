"""A state folder with something in it to damage, for the in-process daemon
(:func:`tests.harness.inprocess.running`). :func:`make_state` fills a state
folder the way a user would (two versions of a dataset, a job whose ``/output`` is saved) and
also keeps a *crash image* of it: the database files copied while the daemon runs (WAL index
first, then the WAL, then the file), which is what a ``kill -9`` leaves.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from floydd.config import Config, preset_for_tests
from floydd.errors import from_payload
from tests.harness.inprocess import running

DATABASES = ("records.db", "store/catalog.db", "cluster/raft.db")


def config_for(state: Path) -> Config:
    return preset_for_tests(state, sandbox="none", dev_fake_gpus="1", cluster_heartbeat=0.2)


def result(events) -> dict:
    """The result of a streamed answer (its end record), raising its error."""
    last = list(events)[-1]
    if "error" in last:
        raise from_payload(last)
    return last["result"]


@dataclass(frozen=True)
class Made:
    clean: Path             # a state folder after a clean stop
    crashed: Path           # the same state as a kill -9 leaves it (databases with their WAL)
    data: Path              # the folder uploaded as digits:1 (digits:2 adds a file)
    more: Path              # the folder of digits:2
    versions: dict          # ref -> tree
    job: str                # the job that ran
    chunk: str              # an object digits:1 and :2 share (not a tree)
    tree: str               # the tree of digits:1


def make_state(root: Path) -> Made:
    data, more, code = root / "digits", root / "digits-more", root / "code"
    data.mkdir(parents=True)
    (data / "weights.bin").write_bytes(os.urandom(3 << 20))
    (data / "labels.csv").write_text("1,2,3\n" * 100)
    shutil.copytree(data, more)
    (more / "extra.txt").write_text("more")
    code.mkdir()
    (code / "train.py").write_text("import os\nopen(os.path.join(os.environ['FLOYD_OUTPUT'], 'out.txt'), 'w')"
                                   ".write('done')\n")
    config = config_for(root / "state")
    with running(config) as client:
        result(client.upload(data, "digits"))
        result(client.upload(more, "digits"))
        job = client.submit({"project": "mnist", "command": "python train.py", "code_path": str(code)})
        done = client.wait(job["id"], 120)
        assert done["state"] == "success", done
        versions = {v["ref"]: v["tree"] for v in client.datasets()}
        assert f"mnist/{job['number']}/output:1" in versions, versions
        crashed = root / "crashed"
        shutil.copytree(config.state_dir, crashed, symlinks=True, ignore=_databases)
        for db in DATABASES:
            _copy_live(config.state_dir / db, crashed / db)
    from floydd.store import Store
    with Store.open(config.store_dir) as store:
        one, two = (store.read_tree(store.catalog.resolve(f"digits:{n}").tree) for n in (1, 2))
        chunk = sorted(one.chunk_ids() & two.chunk_ids())[0]
    return Made(clean=config.state_dir, crashed=crashed, data=data, more=more, versions=versions,
                job=job["id"], chunk=str(chunk), tree=versions["digits:1"])


def copy_state(made: Path, dest: Path) -> Config:
    shutil.copytree(made, dest, symlinks=True)
    return config_for(dest)


def object_path(config: Config, oid: str) -> Path:
    return config.store_dir / "objects" / oid[:2] / oid


def _databases(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.endswith((".db", ".db-wal", ".db-shm", ".sock"))]


def _copy_live(src: Path, dest: Path) -> None:
    """Copy a database in use as a crash would leave it: its WAL index, then its WAL, then the
    file (nothing is checkpointed in these small files, so the three agree)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("-shm", "-wal", ""):
        if Path(f"{src}{ext}").exists():
            shutil.copyfile(f"{src}{ext}", f"{dest}{ext}")
