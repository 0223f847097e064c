"""The JSON of every job answer stays what it was when the daemon built it from dicts (issue 22):
a real daemon answers for jobs of each kind (queued, running, ended, archived, imported, this
box's history) and each answer is compared with the one kept in ``job_answers.json``, key
order, nulls and missing keys included. Values that differ from run to run (times, trees,
node ids, pids, event texts) are compared by their type only.

``FLOYDD_JOB_ANSWERS=write`` writes the file again (only for a change of the API meant as such).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any

import pytest

from floydd.api import keys
from floydd.bundle import ExportKey
from floydd.client import Client
from floydd.cluster.archiver import Archiver
from floydd.config import preset_for_tests
from floydd.daemon.app import create_app
from tests.conftest import wait_until
from tests.harness.inprocess import _answers, add_old_run, serve_on

pytestmark = pytest.mark.timeout(240)

GOLDEN = Path(__file__).with_name("job_answers.json")
VOLATILE = {"created", "started", "ended", "ts", "last_ts", "node_id", "code_tree", "tree", "workspace",
            "agent_pid", "unknown_since", "waiting_for", "latest", "imported", "node", "origin"}
"""Keys whose values change from run to run: compared by type (and, for objects, by keys)."""

TRAIN = """\
import json
for step in range(3):
    print(json.dumps({"metric": "loss", "value": 1.0 / (step + 1), "step": step}), flush=True)
    print(json.dumps({"metric": "accuracy", "value": step / 4, "step": step}), flush=True)
"""
RUN = ("python -c \"import json, time; print(json.dumps({'metric': 'loss', 'value': 0.5, 'step': 0}), flush=True); "
       "time.sleep(60)\"")


def shape(value: Any, key: str = "", volatile: bool = False) -> Any:
    """``value`` as compared: objects as lists of ``[key, value]`` (their order counts), volatile
    values as their type's name; a job's events as the distinct shapes of its events."""
    volatile = volatile or key in VOLATILE
    if isinstance(value, dict):
        return [[k, shape(v, k, volatile)] for k, v in value.items()]
    if isinstance(value, list):
        items = [shape(v, key, volatile) for v in value]
        if key == "events":                 # how many, and in which order, varies
            return sorted({json.dumps(item): item for item in items}.values(), key=json.dumps)
        return items
    if volatile and value is not None:
        return f"<{type(value).__name__}>"
    return value


def _event_shapes(answer: Any) -> Any:
    """Event messages and times vary: an event is compared by its keys and its values' types."""
    if isinstance(answer, dict) and isinstance(answer.get("events"), list):
        answer = {**answer, "events": [{k: (v if k in ("kind", "seq") and v is None else
                                            (None if v is None else f"<{type(v).__name__}>"))
                                        for k, v in e.items()} for e in answer["events"]]}
    return answer


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("answers")
    config = preset_for_tests(root / "state", dev_fake_gpus="2", sandbox="none", sample_interval=0.2)
    add_old_run(config.records_path)
    app = create_app(config)
    app[keys.TCP_TOKEN] = token = secrets.token_hex(16)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]
    with serve_on(app, sock, lambda: _answers(url)) as loop:
        return _ask(Client(address=url.removeprefix("http://"), token=token, timeout=60), app, loop, root)


def _ask(client: Client, app, loop: asyncio.AbstractEventLoop, root: Path) -> dict[str, Any]:
    got: dict[str, Any] = {}
    project, data = root / "proj", root / "data"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    data.mkdir()
    (data / "digits.csv").write_text("1,2,3\n")
    list(client.upload(data, "digits", "first"))

    def job(**fields) -> dict:
        return {"project": "mnist", "code_path": str(project), **fields}

    got["submit ended"] = client.submit(job(command="python train.py", gpus=1, data=["digits:/input"],
                                            params={"lr": "0.1", "batch": "64"}, message="a sweep point",
                                            restart="on-failure", max_attempts=2))
    got["wait ended"] = client.wait("mnist/1", 60)
    got["submit cpu"] = client.submit(job(command="python -c pass", cpus=2, memory="1G", max_runtime=600))
    client.wait("mnist/2", 60)
    cluster = app[keys.CLUSTER]
    archiver = Archiver(node_id=cluster.node_id, config=dataclasses.replace(cluster.config, archive_keep=1,
                                                                             archive_after=1e9),
                        state=cluster.state, driver=cluster.driver)
    assert asyncio.run_coroutine_threadsafe(archiver.archive_once(), loop).result(30) == 1   # mnist/1

    key = ExportKey.new()
    with client.export(key_hex=key.hex, jobs=["mnist/2"]) as (stream, _):
        exported = bytearray()
        while block := stream.read(1 << 20):
            exported += block
    (root / "x.floydx").write_bytes(exported)
    with open(root / "x.floydx", "rb") as f:
        result = client.import_file(f, key_hex=key.hex, name="x.floydx")
    assert [j["job"] for j in result["jobs"]] == ["mnist/3"]

    got["submit running"] = client.submit(job(command=RUN, gpus=2))
    wait_until(lambda: client.job("mnist/4")["metrics"], 60, what="mnist/4 running with a metric")
    got["submit queued"] = client.submit(job(command="python -c pass", gpus=1))
    got["wait running"] = client.wait("mnist/4", 0)

    got["list"] = client.jobs()
    got["list page"] = client.jobs(limit=3, offset=1)
    got["list queued"] = client.jobs(state="queued")
    for name in ("mnist/1", "mnist/2", "mnist/3", "mnist/4", "mnist/5", "old/3"):
        got[f"get {name}"] = _event_shapes(client.job(name))
    got["compare"] = client.compare(["mnist/1", "mnist/2", "old/3"])
    got["stop queued"] = client.stop("mnist/5")
    got["stop running"] = client.stop("mnist/4")
    got["restart"] = client.restart("mnist/2", {"message": "again"})
    client.wait("mnist/6", 60)
    got["delete"] = client.delete("mnist/5")
    got["delete history"] = client.delete("old/3")
    got["list end"] = client.jobs()
    return got


def test_every_job_answer_is_as_it_was(answers) -> None:
    shaped = {name: shape(answer) for name, answer in answers.items()}
    if os.environ.get("FLOYDD_JOB_ANSWERS") == "write":
        GOLDEN.write_text(json.dumps(shaped, indent=1) + "\n")
    kept = json.loads(GOLDEN.read_text())
    assert sorted(shaped) == sorted(kept)
    for name in kept:
        assert shaped[name] == kept[name], name


def test_the_comparison_sees_a_key_moved_or_missing(answers) -> None:
    kept = json.loads(GOLDEN.read_text())
    answer = answers["get mnist/4"]
    moved = {"state": answer["state"], **{k: v for k, v in answer.items() if k != "state"}}
    assert shape(moved) != kept["get mnist/4"]
    assert shape({k: v for k, v in answer.items() if k != "reruns"}) != kept["get mnist/4"]
    history = answers["get old/3"]
    assert "node_id" not in history
    assert shape({**history, "node_id": None}) != kept["get old/3"]       # null is not missing
