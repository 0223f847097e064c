"""Store key epochs across real boxes (issue 21): three daemons in network namespace hosts.

``floydd remove`` of box3 starts a new store key epoch by itself. Data uploaded afterwards
does not open with the removed box's keys (its key file and key folder, taken as they are),
nor does the data uploaded before once the members re-sealed it, which they do in the
background within the bound ``bench/store_reseal.py`` measures (bytes / ``store_reseal_rate``,
plus the lap that confirms nothing is left).
"""

from __future__ import annotations

import json
import os

import pytest

from floydd.errors import IntegrityError
from floydd.store.keys.crypto import Keys, read_secret
from floydd.store.keys.epochs import load_epochs
from floydd.store.ids import ObjectId
from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)
from tests.harness.netns import attempt, form

pytestmark = pytest.mark.slow

RATE_MB = 50.0
ENV = {"FLOYDD_CLUSTER_HEARTBEAT": "0.5", "FLOYDD_STORE_SCRUB_RATE": "0", "FLOYDD_STORE_RESEAL_RATE": str(RATE_MB),
       "FLOYDD_STORE_EPOCH_CHECK": "0.5", "PYTHONUNBUFFERED": "1"}
MB = 8


def _upload(daemon, tmp_path, name: str) -> str:
    src = tmp_path / name
    src.mkdir()
    (src / "weights.bin").write_bytes(os.urandom(MB << 20))
    out = daemon.floyd("data", "upload", str(src), "--name", name)
    assert "stored on 2 of 2 boxes" in out.stdout, out.stdout + out.stderr
    return json.loads(daemon.floyd("data", "info", name, "--json").stdout)["tree"]


def _objects(state) -> list:
    return [p for p in (state / "store" / "objects").rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_after_a_removal_new_data_and_resealed_old_data_do_not_open_with_the_removed_boxs_keys(netns, tmp_path):
    net = netns(3)
    (h1, s1, box1, c1), (_, s2, _box2, c2), (_, s3, _box3, c3) = form(net, tmp_path, ["0", "0", "0"], ENV)
    _upload(box1, tmp_path, "before")

    removed = h1.floydd(s1, "remove", c3.cluster()["node_id"], "--yes")
    assert "store key rotated: epoch 1" in removed.stdout, removed.stdout + removed.stderr
    # what the removed box holds, taken as it is: its store secret and whatever epochs it had
    stolen = Keys(read_secret(s3 / "store" / "key"), load_epochs(s3 / "store"))
    assert stolen.seal_epoch == 0

    tree = _upload(box1, tmp_path, "after")
    sealed = (s1 / "store" / "objects" / tree[:2] / tree).read_bytes()
    with pytest.raises(IntegrityError, match="key epoch 1"):
        stolen.open(ObjectId.from_hex(tree), sealed)

    bound = 2 * MB / RATE_MB + 10.0         # the old and new data at the rate, plus a lap to confirm
    for client in (c1, c2):
        wait_until(lambda: (attempt(client.store_key) or {}).get("resealed") and client.store_key()["seal_epoch"] == 1,
                   timeout=bound + 20, what="every object re-sealed under epoch 1")
        report = client.store_key()
        assert report["reseal_seconds"] <= bound, report
    for state in (s1, s2):
        for path in _objects(state):            # every object on the members, the old ones too
            with pytest.raises(IntegrityError):
                stolen.open(ObjectId.from_hex(path.name), path.read_bytes())
    info = box1.floyd("data", "info", "before").stdout
    assert "under key epoch 1, the cluster's newest" in info, info
    shown = h1.floydd(s1, "rotate-store-key", "--show").stdout
    assert "this box seals under epoch 1" in shown and "every object here is under epoch 1" in shown, shown
