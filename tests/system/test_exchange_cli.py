"""Export from one real two-box cluster, import into another (its own CA and store secret), with the
real CLI: ``floyd compare`` shows the imported runs with identical params and metrics, outputs
come back byte-identical, a re-import adds nothing, a flipped byte is refused naming the part."""

from __future__ import annotations

import json
import os

import pytest

from tests.harness.processes import box, final, form, kill_agents, stop

TRAIN = """\
import json, os, sys
lr = float(sys.argv[1])
for step in range(5):
    print(json.dumps({"metric": "loss", "value": lr / (step + 1), "step": step}), flush=True)
print(json.dumps({"metric": "accuracy", "value": 0.9, "step": 5}), flush=True)
data = open(os.path.join(os.environ.get("FLOYD_INPUT", "/input"), "weights.bin"), "rb").read()
with open(os.path.join(os.environ["FLOYD_OUTPUT"], "model.bin"), "wb") as f:
    f.write(data[::-1] + str(lr).encode())
print("done", len(data), flush=True)
"""


@pytest.fixture
def two_sites(tmp_path):
    a1, a2 = box(tmp_path / "site-a", "a-one"), box(tmp_path / "site-a", "a-two")
    b1, b2 = box(tmp_path / "site-b", "b-one"), box(tmp_path / "site-b", "b-two")
    try:
        form(a1, a2)
        form(b1, b2)
        yield a1, a2, b1, b2
    finally:
        stop(a1, a2, b1, b2)
        for one in (a1, a2, b1, b2):
            kill_agents(one.state)


@pytest.mark.slow
def test_a_project_moves_between_two_clusters_with_the_cli(two_sites, tmp_path):
    a1, a2, b1, b2 = two_sites
    data = tmp_path / "mnist"
    data.mkdir()
    (data / "weights.bin").write_bytes(os.urandom(3 << 20))
    a1.floyd("data", "upload", str(data), "--name", "mnist")
    a1.floyd("init", "proj")
    (a1.project / "train.py").write_text(TRAIN)
    ran = []
    for lr in ("0.1", "0.05"):
        job = json.loads(a1.floyd("run", "--json", "--data", "mnist:/input", "--param", f"lr={lr}",
                                  f"python train.py {lr}").stdout)
        assert final(a1, job["id"])["state"] == "success"
        ran.append(job["id"])
    b1.floyd("init", "proj")
    (b1.project / "train.py").write_text("print('site b')\n")
    own = json.loads(b1.floyd("run", "--json", "python train.py").stdout)["id"]   # B's own proj/1
    final(b1, own)

    export, key = tmp_path / "proj.floydx", tmp_path / "proj.key"
    out = a2.floyd("export", "proj", "--to", str(export), "--key-file", str(key))   # from the other box of A
    assert "signed by cluster lab" in out.stdout and os.stat(key).st_mode & 0o777 == 0o600

    result = json.loads(b2.floyd("import", str(export), "--key-file", str(key), "--json").stdout)
    mapping = {j["origin_job"]: j["job"] for j in result["jobs"]}
    assert sorted(mapping) == sorted(ran) and own not in mapping.values()
    theirs = a2.floyd_json("compare", *ran)
    ours = b1.floyd_json("compare", *(mapping[k] for k in ran))
    assert ours["params"] == theirs["params"] and ours["metrics"] == theirs["metrics"]
    for mine, other in zip(ours["jobs"], theirs["jobs"]):
        assert (mine["params"], mine["metrics"], mine["state"], mine["command"]) == \
            (other["params"], other["metrics"], other["state"], other["command"])
    for old in ran:
        a_out, b_out = tmp_path / f"a-{old.replace('/', '-')}", tmp_path / f"b-{old.replace('/', '-')}"
        a2.floyd("output", old, str(a_out))
        b1.floyd("output", mapping[old], str(b_out))
        assert (a_out / "model.bin").read_bytes() == (b_out / "model.bin").read_bytes()
        assert "done 3145728" in b1.floyd("logs", mapping[old]).stdout
        assert f"where it was {old}" in b1.floyd("info", mapping[old]).stdout

    again = b1.floyd("import", str(export), "--key-file", str(key)).stdout
    assert again.count("(imported before)") == 2

    damaged = bytearray(export.read_bytes())
    damaged[len(damaged) // 2] ^= 0x10
    bad = tmp_path / "bad.floydx"
    bad.write_bytes(bytes(damaged))
    before = {j["id"] for j in b1.floyd_json("status")}
    res = b1.floyd("import", str(bad), "--key-file", str(key), check=False)
    assert res.returncode == 1 and "bad.floydx is damaged" in res.stderr and "part " in res.stderr, res.stderr
    res = b1.floyd("import", str(bad), "--key-file", str(key), "--check", check=False)
    assert res.returncode == 1 and "part " in res.stderr
    assert {j["id"] for j in b1.floyd_json("status")} == before
