"""Export from one two-box cluster, import into another with another secret and another CA
(floydd.exchange), in one event loop: the imported runs compare equal, outputs and mounted
data come back byte-identical, a re-import adds nothing, and a damaged file adds nothing."""

from __future__ import annotations

import asyncio
import filecmp
import os
import time
from pathlib import Path

import pytest

from floydd.errors import IntegrityError
from floydd.bundle import ExportKey, WrongKey
from floydd.bundle.container import Truncated
from floydd.bundle.reader import Reader
from floydd.exchange import export_to, import_from
from floydd.store import ObjectId
from tests.harness.pipeline import Boxes, answered

KEY = ExportKey.new()


@pytest.fixture
async def sites(tmp_path):
    a, b = Boxes(tmp_path / "site-a"), Boxes(tmp_path / "site-b")
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def _ran(boxes, key: str):
    """The box running ``key``, once it runs."""
    project, number = key.split("/")
    held = (project, int(number))
    return await boxes.wait_for(lambda: next((x for x in boxes.boxes if held in x.runtime.held), None),
                                what=f"{key} to run")


async def _train(boxes, box, key: str, loss: list[float], tmp: Path) -> None:
    """``key`` runs on ``box``: it prints, logs metrics, writes /output, and succeeds."""
    project, number = key.split("/")
    number = int(number)
    now = time.time()
    points = [("loss", v, i, now + i) for i, v in enumerate(loss)] + [("acc", 1 - loss[-1], len(loss), now + 9)]
    await asyncio.to_thread(box.records.add_metrics, project, number, points)
    ws = box.runtime.jobs_dir / project / str(number)
    with open(ws / "job.log", "a") as log:
        log.write("".join(f"{now:.3f} o step {i} loss {v}\n" for i, v in enumerate(loss)))
    (ws / "output").mkdir()
    (ws / "output" / "model.bin").write_bytes(os.urandom(200_000) + key.encode())
    (ws / "output" / "notes.txt").write_text(f"model of {key}\n")
    version = await asyncio.to_thread(box.store.upload, ws / "output", f"{project}/{number}/output")
    await asyncio.to_thread(box.records.update_job, project, number, output_version=version.ref)
    box.runtime.finish((project, number), "success")
    await boxes.ended(box, key)


async def _site_a(a, tmp_path: Path):
    a1, a2 = await a.start(2)
    data = tmp_path / "mnist"
    (data / "train").mkdir(parents=True)
    (data / "train" / "images.bin").write_bytes(os.urandom(600_000))
    for i in range(30):
        (data / "train" / f"label-{i}.txt").write_text(f"{i}\n")
    version = await asyncio.to_thread(a1.store.upload, data, "mnist")
    await a1.datasets.register("mnist", str(version.tree), size=version.size, files=version.files, user="alice")
    for n, lr in ((1, "0.1"), (2, "0.01")):
        await a1.run("python train.py", data=("mnist:/input",), params={"lr": lr})
        box = await _ran(a, f"mnist/{n}")
        await _train(a, box, f"mnist/{n}", [1.0, 0.5, 0.25 * n], tmp_path)
    return a1, a2, data


async def test_a_project_moves_to_another_cluster_and_compares_equal(sites, tmp_path):
    a, b = sites
    a1, a2, data = await _site_a(a, tmp_path)
    b1, b2 = await b.start(2)
    first = await b1.run("true", project="mnist")               # B's own mnist/1: the imports get 2 and 3
    await b.ended(b1, first["id"])

    path = tmp_path / "mnist.floydx"
    with open(path, "wb") as out:
        manifest = await export_to(out, jobs=a2.jobs, selection=["mnist"], person="alice", key=KEY,
                                   kdf={"kind": "random"}, spool=tmp_path / "spool-export")
    assert manifest["contents"]["jobs"] == ["mnist/1", "mnist/2"] and manifest["contents"]["mounted"] == ["mnist:1"]

    with open(path, "rb") as src:
        result = await import_from(src, jobs=b2.jobs, key=KEY, person="bob", spool=tmp_path / "spool-1")
    assert result["origin"]["fingerprint"] == a1.service.identity.cluster_fingerprint
    assert [(j["origin_job"], j["job"], j["new"]) for j in result["jobs"]] == [("mnist/1", "mnist/2", True),
                                                                              ("mnist/2", "mnist/3", True)]
    assert result["datasets"] == [{"origin_ref": "mnist:1", "ref": "mnist:1", "alone": False, "new": True}]

    for old, new in (("mnist/1", "mnist/2"), ("mnist/2", "mnist/3")):
        theirs = answered(await a1.jobs.get(old))
        assert theirs["metrics"]["loss"]["count"] == 3 and theirs["params"]["lr"] in ("0.1", "0.01")
        for box in (b1, b2):                    # b1 reads what b2 holds over mTLS, b2 its own records
            ours = answered(await box.jobs.get(new))
            assert ours["state"] == "success" and ours["params"] == theirs["params"]
            assert ours["metrics"] == theirs["metrics"], box.name
            assert ours["imported"]["job"] == old and ours["imported"]["origin_name"] == "test"
            assert ours["data"][0]["ref"] == "mnist:1" and ours["user"] == "bob"
            assert (await box.jobs.metrics(new))["metrics"] == (await a1.jobs.metrics(old))["metrics"]
            log, final = await box.jobs.read_log(new, 0)
            assert final and b"loss" in log and log == (await a1.jobs.read_log(old, 0))[0]
        messages = {e["message"] for e in await b1.jobs.events(new)}
        assert {e["message"] for e in await a1.jobs.events(old)} <= messages
        assert any(m.startswith(f"imported from test (its {old})") for m in messages)
        assert not any(new == f"{p}/{n}" for x in (b1, b2) for p, n in x.runtime.held)    # never run
        for which, dest in (("output", "out"), ("code", "code")):
            theirs_tree = await a1.jobs.tree_for(old, which)
            ours_tree = await b1.jobs.tree_for(new, which)
            assert theirs_tree != ours_tree                            # another secret: other ids
            await asyncio.to_thread(a1.store.restore, theirs_tree, tmp_path / f"{old}-{dest}-a".replace("/", "-"))
            await asyncio.to_thread(b1.store.restore, ours_tree, tmp_path / f"{old}-{dest}-b".replace("/", "-"))
            _same_tree(tmp_path / f"{old}-{dest}-a".replace("/", "-"), tmp_path / f"{old}-{dest}-b".replace("/", "-"))
    mounted = next(v for v in await b1.datasets.list() if v["ref"] == "mnist:1")
    await b1.datasets.ensure_local(mounted["tree"], mounted["holders"])
    await asyncio.to_thread(b1.store.restore, ObjectId.from_hex(mounted["tree"]), tmp_path / "mnist-b")
    _same_tree(data, tmp_path / "mnist-b")

    jobs_before = sorted(j["id"] for j in answered(await b1.jobs.list()))
    sets_before = sorted(v["ref"] for v in await b1.datasets.list())
    with open(path, "rb") as src:                                  # a re-import adds nothing
        again = await import_from(src, jobs=b1.jobs, key=KEY, person="bob", spool=tmp_path / "spool-2")
    assert [(j["job"], j["new"]) for j in again["jobs"]] == [("mnist/2", False), ("mnist/3", False)]
    assert sorted(j["id"] for j in answered(await b1.jobs.list())) == jobs_before
    assert sorted(v["ref"] for v in await b1.datasets.list()) == sets_before

    raw = path.read_bytes()
    bounds = _bounds(raw)
    start, end = bounds["data of output of mnist/2"]
    damaged = bytearray(raw)
    damaged[(start + end) // 2] ^= 0x01
    for bad, kind, words in ((bytes(damaged), IntegrityError, "data of output of mnist/2"),
                             (raw[:len(raw) // 2], Truncated, "truncated")):
        bad_path = tmp_path / "bad.floydx"
        bad_path.write_bytes(bad)
        with open(bad_path, "rb") as src, pytest.raises(kind, match=words):
            await import_from(src, jobs=b2.jobs, key=KEY, person="bob", spool=tmp_path / f"spool-{kind.__name__}")
    with open(path, "rb") as src, pytest.raises(WrongKey):
        await import_from(src, jobs=b2.jobs, key=ExportKey.new(), person="bob", spool=tmp_path / "spool-key")
    assert sorted(j["id"] for j in answered(await b1.jobs.list())) == jobs_before
    assert sorted(v["ref"] for v in await b1.datasets.list()) == sets_before
    assert not any(h.startswith("upload:import-") for h in _pins(b2)), "a refused import left its leases"


def _same_tree(left: Path, right: Path) -> None:
    cmp = filecmp.dircmp(left, right)
    assert not cmp.left_only and not cmp.right_only and not cmp.diff_files, (cmp.left_only, cmp.right_only,
                                                                              cmp.diff_files)
    for sub in cmp.common_dirs:
        _same_tree(left / sub, right / sub)
    for name in cmp.common_files:
        assert (left / name).read_bytes() == (right / name).read_bytes(), name


def _bounds(raw: bytes) -> dict[str, tuple[int, int]]:
    import io
    r = Reader(io.BytesIO(raw), KEY)
    out = {}
    for part in r.parts():
        start = r.position
        list(part.records())
        out[part.name] = (start, r.position)
    return out


def _pins(box) -> list[str]:
    """The holders of the pins in ``box``'s local catalog."""
    return [holder for trees in box.store.catalog.roots().values() for holder in trees if ":" not in holder
            or holder.startswith("upload:")]


async def test_datasets_alone_take_the_next_number_and_come_home_as_the_version_they_were(sites, tmp_path):
    a, b = sites
    a1, a2, data = await _site_a(a, tmp_path)
    (b1,) = await b.start(1)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "other.txt").write_text("site b's own mnist\n")
    own = await asyncio.to_thread(b1.store.upload, theirs, "mnist")
    await b1.datasets.register("mnist", str(own.tree), size=own.size, files=own.files, user="bob")

    there = tmp_path / "data.floydx"
    with open(there, "wb") as out:
        manifest = await export_to(out, jobs=a1.jobs, refs=["mnist"], person="alice", key=KEY, kdf={"kind": "random"},
                                   spool=tmp_path / "spool-a")
    assert manifest["contents"]["datasets"] == ["mnist:1"] and manifest["contents"]["jobs"] == []
    with open(there, "rb") as src:
        got = await import_from(src, jobs=b1.jobs, key=KEY, person="bob", spool=tmp_path / "spool-b")
    assert got["datasets"] == [{"origin_ref": "mnist:1", "ref": "mnist:2", "alone": True, "new": True}]
    assert got["origin"]["kind"] == "cluster"

    back = tmp_path / "back.floydx"
    with open(back, "wb") as out:
        await export_to(out, jobs=b1.jobs, refs=["mnist:2"], person="bob", key=KEY, kdf={"kind": "random"},
                        spool=tmp_path / "spool-c")
    with open(back, "rb") as src:
        home = await import_from(src, jobs=a2.jobs, key=KEY, person="alice", spool=tmp_path / "spool-d")
    assert home["datasets"] == [{"origin_ref": "mnist:2", "ref": "mnist:1", "alone": True, "new": False}]
    assert [v["ref"] for v in await a1.datasets.list("mnist")] == ["mnist:1"]


async def test_a_job_that_mounted_another_jobs_output_keeps_it_without_taking_this_sites_names(sites, tmp_path):
    a, b = sites
    (a1,) = await a.start(1)
    (b1,) = await b.start(1)
    first = await a1.run("save")                                   # writes /output/model.txt, ends
    await a.ended(a1, first["id"])
    await a1.run("python eval.py", data=(f"{first['id']}/output:/model",))
    await _ran(a, "mnist/2")
    a1.runtime.finish(("mnist", 2), "success")
    await a.ended(a1, "mnist/2")
    await b.ended(b1, (await b1.run("true"))["id"])                # B's own mnist/1 and its output name

    alone, both = tmp_path / "alone.floydx", tmp_path / "both.floydx"
    for path, selection in ((alone, ["mnist/2"]), (both, ["mnist"])):
        with open(path, "wb") as out:
            await export_to(out, jobs=a1.jobs, selection=selection, person="alice", key=KEY, kdf={"kind": "random"},
                            spool=tmp_path / f"spool-{path.stem}")
    with open(alone, "rb") as src:
        got = await import_from(src, jobs=b1.jobs, key=KEY, person="bob", spool=tmp_path / "spool-i1")
    [job] = got["jobs"]
    assert answered(await b1.jobs.get(job["job"]))["data"][0]["ref"] == "mnist-1-output:1"   # not B's mnist/1/output
    assert not (b1.service.state.datasets.get("mnist/1/output") or {}).get("versions")    # B's mnist/1 saved none
    with open(both, "rb") as src:
        got = await import_from(src, jobs=b1.jobs, key=KEY, person="bob", spool=tmp_path / "spool-i2")
    made = {j["origin_job"]: j for j in got["jobs"]}
    assert not made["mnist/2"]["new"] and made["mnist/1"]["new"]
    producer = made["mnist/1"]["job"]
    tree = await b1.jobs.tree_for(producer, "output")
    await asyncio.to_thread(b1.store.restore, tree, tmp_path / "model")
    assert (tmp_path / "model" / "model.txt").read_text() == "trained mnist/1\n"
