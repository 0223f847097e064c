"""Every road to an object asks the same question (floydd.cluster.state.access), against a real box:
a cluster of one (``floydd init``, then :func:`floydd.daemon.main.serve` in a thread, on
127.0.0.1 only) whose TLS API the test's people use with their personal tokens, as laptops do.

alice (a user) has a private dataset ``faces``, a lab dataset ``mnist`` and an ended job
``ap/1`` (its code, its output ``ap/1/output``, its logs and metrics); the box's
``job_logs`` is ``owner`` so that logs and metrics are private too. bob (a user) then takes
every route of ``/v1/openapi.json`` as the box serves it: each route is classified here as
reaching one of those objects, as lab-wide (every job is everyone's to see), or as reaching
none of them (people, tokens, the cluster: their own rules); an unclassified route fails the
test, so a new route cannot slip past. Every object route refuses bob with 403 and one line
naming whose the object is; the admin gets through. The ``floyd`` and ``floydd`` verbs are
enumerated the same way: each one that reaches an object is run as bob, through the real
client, and refused in one ``error:`` line.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import pwd
import re
import ssl
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import click
import pytest
from click.testing import CliRunner

from floydd.cli.floyd import cli as floyd_cli
from floydd.cli.floydd import cli as floydd_cli
from floydd.client import Client
from floydd.security.identity import NodeIdentity
from tests.conftest import wait_until
from tests.harness.inprocess import tls_box

ME = pwd.getpwuid(os.getuid()).pw_name
JOB = "/v1/jobs/{project}/{number}"
KEY = "ab" * 32
TRAIN = ("import json, os\n"
         "print(json.dumps({'metric': 'loss', 'value': 0.25, 'step': 1}))\n"
         "open(os.path.join(os.environ.get('FLOYD_OUTPUT', '/output'), 'model.txt'), 'w').write('alice weights')\n")


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


@dataclass
class Person:
    """Someone on the box's TLS API with their personal token."""

    name: str
    address: str
    ca_pem: bytes
    token: str

    def call(self, method: str, path: str, *, query: dict | None = None, body: Any = None, raw: bytes | None = None,
             headers: dict | None = None) -> tuple[int, Any, bytes]:
        host, _, port = self.address.rpartition(":")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.load_verify_locations(cadata=self.ca_pem.decode())
        conn = http.client.HTTPSConnection(host, int(port), timeout=60, context=ctx)
        sent = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        if body is not None:
            raw = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        elif raw is not None:
            sent.setdefault("Content-Type", "application/x-tar")
        target = path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        try:
            conn.request(method.upper(), target, body=raw, headers=sent)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        kind = resp.getheader("Content-Type") or ""
        if "x-ndjson" in kind:
            decoded: Any = [json.loads(line) for line in data.splitlines() if line.strip()]
        elif "json" in kind:
            decoded = json.loads(data)
        else:
            decoded = None
        return resp.status, decoded, data

    def client(self) -> Client:
        return Client(address=self.address, token=self.token, ca_pem=self.ca_pem, timeout=60)


@dataclass
class Box:
    local: Client
    address: str
    state: Path
    alice: Person
    bob: Person
    admin: Person
    seen: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def box(tmp_path_factory) -> Iterator[Box]:
    """The box, its people, and alice's things (module docstring)."""
    tmp = tmp_path_factory.mktemp("access")
    with tls_box(tmp, job_logs="owner") as (local, address, state):
        ca = (state / "tls" / NodeIdentity.CA_FILE).read_bytes()
        local.add_person("alice")
        local.add_person("bob")
        people = {name: Person(name, address, ca, local.create_api_token(person=name)["token"])
                  for name in ("alice", "bob")}
        admin = Person(ME, address, ca, local.create_api_token()["token"])
        b = Box(local=local, address=address, state=state, admin=admin, **people)
        alice = b.alice
        status, events, raw = alice.call("POST", "/v1/datasets/tar", query={"name": "faces", "visibility": "private"},
                                         raw=_tar({"faces.txt": "alice's faces\n"}))
        assert status == 200 and "result" in events[-1], raw[-500:]
        b.seen["faces_tree"] = events[-1]["result"]["tree"]
        status, events, raw = alice.call("POST", "/v1/datasets/tar", query={"name": "mnist"},
                                         raw=_tar({"digits.csv": "1,2\n"}))
        assert status == 200 and "result" in events[-1], raw[-500:]
        status, sent, raw = alice.call("POST", "/v1/code", raw=_tar({"train.py": TRAIN}))
        assert status == 201 and re.fullmatch(r"cu-[0-9a-f]{32}", sent["code_upload"]), raw[-500:]
        assert "code_tree" not in sent
        b.seen["alice_upload"] = sent["code_upload"]
        status, job, raw = alice.call("POST", "/v1/jobs", body={"project": "ap", "command": "python train.py",
                                                                "code_upload": sent["code_upload"]})
        assert status == 201 and job["id"] == "ap/1" and job["user"] == "alice", raw[-500:]
        b.seen["code_tree"] = job["code_tree"]

        def ended() -> bool:
            return alice.call("GET", "/v1/jobs/ap/1/wait", query={"timeout": "5"})[1]["state"] in ("success", "failed")
        wait_until(ended, 90, what="alice's job to end")
        done = alice.call("GET", "/v1/jobs/ap/1")[1]
        assert (done["state"], done["output_version"]) == ("success", "ap/1/output:1"), done
        status, sent, _ = b.bob.call("POST", "/v1/code", raw=_tar({"run.sh": "cat /input/*\n"}))
        assert status == 201
        b.seen["bob_upload"] = sent["code_upload"]
        status, exported, raw = b.admin.call("POST", "/v1/export", body={"datasets": ["faces"], "key": KEY,
                                                                          "kdf": {"kind": "random"}})
        assert status == 200, raw[-500:]
        b.seen["faces_export"] = raw
        yield b


# -- the routes ---------------------------------------------------------------------------------

NOT_AN_OBJECT = {
    ("get", "/v1/info"): "this daemon", ("get", "/v1/nodes"): "boxes and their GPUs",
    ("post", "/v1/code"): "the caller's own folder, answered with a handle only they may submit",
    ("get", "/v1/cluster"): "membership", ("post", "/v1/cluster/tokens"): "join tokens (admins: authz)",
    ("get", "/v1/cluster/tokens"): "join tokens", ("delete", "/v1/cluster/tokens/{token_id}"): "join tokens",
    ("post", "/v1/cluster/leave"): "membership (admins)", ("post", "/v1/cluster/drain"): "this box (admins)",
    ("post", "/v1/cluster/remove"): "membership (admins)",
    ("post", "/v1/cluster/store-key"): "store key epochs, never a secret (admins: authz)",
    ("get", "/v1/cluster/store-key"): "store key epochs and this box's re-seal counts",
    ("post", "/v1/tokens"): "personal tokens (authz)", ("get", "/v1/tokens"): "personal tokens",
    ("delete", "/v1/tokens/{token_id}"): "personal tokens", ("get", "/v1/whoami"): "the caller",
    ("get", "/v1/ca"): "the CA certificate", ("get", "/v1/audit"): "the audit chain",
    ("get", "/v1/audit/verify"): "the audit chain", ("get", "/v1/audit/head"): "the audit chain",
    ("get", "/v1/people"): "people", ("post", "/v1/people/{name}/boxes"): "people (admins)",
    ("post", "/v1/people"): "people (admins)", ("delete", "/v1/people/{name}"): "people (admins)",
    ("post", "/v1/people/{name}/role"): "people (admins)", ("post", "/v1/people/{name}/uids"): "people (admins)",
    ("get", "/v1/openapi.json"): "this document",
}
"""Routes that reach none of the objects of the access table (their own rules are elsewhere)."""

LAB_WIDE = {("get", "/v1/jobs"), ("get", JOB), ("get", JOB + "/wait")}
"""Everyone sees the lab's jobs (their metric summaries only where the metrics rule allows)."""


def _attacks(b: Box) -> dict[tuple[str, str], list[tuple[str, str, dict, str]]]:
    """(method, route) -> what bob tries there: (method, path, request, words of the refusal)."""
    dest = {"dest": str(b.state.parent / "bob-copy")}
    private, output = "alice's private dataset", "the output of alice's job ap/1"
    return {
        ("get", "/v1/datasets/info"): [("GET", "/v1/datasets/info", {"query": {"ref": "faces"}}, private),
                                       ("GET", "/v1/datasets/info", {"query": {"ref": "ap/1/output"}}, output)],
        ("get", "/v1/datasets/tar"): [("GET", "/v1/datasets/tar", {"query": {"ref": "faces:1"}}, private),
                                      ("GET", "/v1/datasets/tar", {"query": {"ref": "ap/1/output:1"}}, output)],
        ("post", "/v1/datasets/clone"): [("POST", "/v1/datasets/clone", {"body": {"ref": "faces", **dest}}, private),
                                         ("POST", "/v1/datasets/clone", {"body": {"ref": "ap/1/output", **dest}},
                                          output)],
        ("post", "/v1/datasets"): [("POST", "/v1/datasets", {"body": {"name": "mnist", "path": "/tmp"}},
                                    "may not add a version to mnist: it is alice's dataset"),
                                   ("POST", "/v1/datasets", {"body": {"name": "faces", "path": "/tmp"}}, private)],
        ("post", "/v1/datasets/tar"): [("POST", "/v1/datasets/tar", {"query": {"name": "mnist"},
                                                                     "raw": _tar({"poison.csv": "9,9\n"})},
                                        "may not add a version to mnist: it is alice's dataset")],
        ("post", "/v1/datasets/delete"): [("POST", "/v1/datasets/delete", {"body": {"ref": "mnist"}},
                                           "may not delete mnist: it is alice's dataset"),
                                          ("POST", "/v1/datasets/delete", {"body": {"ref": "ap/1/output"}}, output)],
        ("get", "/v1/datasets"): [],      # a listing: what bob may read only (checked on its own below)
        ("post", "/v1/jobs"): [
            ("POST", "/v1/jobs", {"body": {"project": "bp", "command": "cat *", "code_upload": b.seen["alice_upload"]}},
             f"may not submit code upload {b.seen['alice_upload']}: alice sent it"),
            ("POST", "/v1/jobs", {"body": {"project": "bp", "command": "cat /in/*", "code_upload": b.seen["bob_upload"],
                                           "data": ["faces:/in"]}}, "may not mount faces:1: it is " + private),
            ("POST", "/v1/jobs", {"body": {"project": "bp", "command": "cat /in/*", "code_upload": b.seen["bob_upload"],
                                           "data": ["ap/1/output:/in"]}}, "may not mount ap/1/output:1: it is " + output)],
        ("post", "/v1/jobs/check"): [
            ("POST", "/v1/jobs/check", {"body": {"project": "bp", "command": "x", "data": ["faces:/in"]}}, private),
            ("POST", "/v1/jobs/check", {"body": {"project": "bp", "command": "x", "data": ["ap/1/output:/in"]}},
             output)],
        ("post", JOB + "/code"): [("POST", "/v1/jobs/ap/1/code", {"body": dest},
                                   "may not clone the code of ap/1, which is alice's")],
        ("get", JOB + "/code.tar"): [("GET", "/v1/jobs/ap/1/code.tar", {}, "may not clone the code of ap/1")],
        ("post", JOB + "/output"): [("POST", "/v1/jobs/ap/1/output", {"body": dest},
                                     "may not clone ap/1/output:1: it is " + output)],
        ("get", JOB + "/output.tar"): [("GET", "/v1/jobs/ap/1/output.tar", {}, "may not clone ap/1/output:1")],
        ("get", JOB + "/logs"): [("GET", "/v1/jobs/ap/1/logs", {}, "may not read the logs of ap/1, which is alice's")],
        ("get", JOB + "/metrics"): [("GET", "/v1/jobs/ap/1/metrics", {}, "may not read the metrics of ap/1")],
        ("get", "/v1/compare"): [("GET", "/v1/compare", {"query": {"jobs": "ap/1"}},
                                  "may not compare the metrics of ap/1, which is alice's")],
        ("post", "/v1/export"): [
            ("POST", "/v1/export", {"body": {"jobs": ["ap/1"], "key": KEY}}, "may not export the code of ap/1"),
            ("POST", "/v1/export", {"body": {"datasets": ["faces"], "key": KEY}}, "may not export faces:1: it is " + private),
            ("POST", "/v1/export", {"body": {"datasets": ["ap/1/output:1"], "key": KEY}},
             "may not export ap/1/output:1: it is " + output)],
        ("post", "/v1/import"): [("POST", "/v1/import", {"raw": b.seen["faces_export"], "headers": {
            "Content-Type": "application/octet-stream", "Floydd-Export-Key": KEY}},
            "may not import a version of faces: it is alice's private dataset; nothing was imported")],
        ("post", "/v1/store/gc"): [("POST", "/v1/store/gc", {"body": {}}, "may not collect this box's store's garbage")],
        ("post", "/v1/store/verify"): [("POST", "/v1/store/verify", {"body": {"repair": True}},
                                        "may not verify or repair this box's store")],
        ("post", JOB + "/stop"): [("POST", "/v1/jobs/ap/1/stop", {"body": {}}, "may not stop ap/1, which is alice's")],
        ("post", JOB + "/restart"): [("POST", "/v1/jobs/ap/1/restart", {"body": {}},
                                      "may not restart ap/1, which is alice's")],
        ("delete", JOB): [("DELETE", "/v1/jobs/ap/1", {}, "may not delete ap/1, which is alice's")],
    }


def _served(b: Box) -> set[tuple[str, str]]:
    status, doc, _ = b.bob.call("GET", "/v1/openapi.json")
    assert status == 200
    return {(method, path) for path, ops in doc["paths"].items() for method in ops}


def test_every_route_is_classified_and_every_object_route_has_its_attack(box: Box) -> None:
    attacks = _attacks(box)
    served = _served(box)
    classified = set(attacks) | set(NOT_AN_OBJECT) | LAB_WIDE
    assert served - classified == set(), "classify each new route: does it reach a dataset, a job's code, " \
                                         "output, logs or metrics? (and add what bob tries there)"
    assert classified - served == set(), "a classified route the box no longer serves"
    assert not set(attacks) & set(NOT_AN_OBJECT) and not set(attacks) & LAB_WIDE
    for route, tried in attacks.items():
        pattern = "^" + re.sub(r"\{[a-z_]+\}", "[^/]+", route[1]) + "$"
        assert route == ("get", "/v1/datasets") or tried, f"{route}: nothing is tried there"
        assert all(m.lower() == route[0] and re.match(pattern, p) for m, p, _, _ in tried), route


def test_bob_is_refused_on_every_road_to_alices_objects_in_one_line(box: Box) -> None:
    for route, tried in _attacks(box).items():
        for method, path, request, words in tried:
            status, answer, raw = box.bob.call(method, path, **request)
            assert status == 403, (route, path, request.get("query") or request.get("body"), raw[-300:])
            error = answer["error"]
            assert "user bob may not " in error["message"] and words in error["message"], (route, error)
            assert "\n" not in error["message"] and error["hint"], error
    assert not (box.state.parent / "bob-copy").exists()            # nothing was restored anywhere
    status, jobs, _ = box.bob.call("GET", "/v1/jobs")
    assert [j["id"] for j in jobs] == ["ap/1"]                     # bob's refused submits made no job
    status, versions, _ = box.admin.call("GET", "/v1/datasets", query={"name": "mnist"})
    assert [v["ref"] for v in versions] == ["mnist:1"]             # no poisoned mnist:2


def test_a_tree_id_is_never_taken_from_a_person(box: Box) -> None:
    for tree in (box.seen["faces_tree"], box.seen["code_tree"]):
        status, answer, _ = box.bob.call("POST", "/v1/jobs", body={"project": "bp", "command": "cat *",
                                                                   "code_tree": tree})
        assert (status, answer["error"]["code"]) == (400, "code_tree_refused"), answer
        assert "POST /v1/code" in answer["error"]["hint"]
    status, answer, _ = box.bob.call("POST", "/v1/jobs", body={"project": "bp", "command": "cat *",
                                                               "code_upload": "cu-" + "0" * 32})
    assert (status, answer["error"]["code"]) == (404, "code_upload_unknown")
    status, answer, _ = box.bob.call("POST", "/v1/jobs", body={"project": "bp", "command": "cat *",
                                                               "code_upload": box.seen["faces_tree"]})
    assert status == 400 and "not a code upload handle" in answer["error"]["message"]


def test_the_listings_show_bob_only_what_he_may_read(box: Box) -> None:
    status, versions, raw = box.bob.call("GET", "/v1/datasets")
    assert status == 200 and [v["ref"] for v in versions] == ["mnist:1"]
    assert box.seen["faces_tree"].encode() not in raw and b"faces" not in raw and b"ap/1/output" not in raw
    status, versions, _ = box.alice.call("GET", "/v1/datasets")
    assert [(v["ref"], v["visibility"]) for v in versions] == [("ap/1/output:1", "private"), ("faces:1", "private"),
                                                                ("mnist:1", "lab")]
    status, job, _ = box.bob.call("GET", "/v1/jobs/ap/1")
    assert status == 200 and job["user"] == "alice" and job["metrics"] == {}     # the job, not its numbers
    assert box.bob.call("GET", "/v1/jobs")[1][0]["metrics"] == {}
    assert box.bob.call("GET", "/v1/jobs/ap/1/wait", query={"timeout": "1"})[1]["metrics"] == {}
    assert box.admin.call("GET", "/v1/jobs/ap/1")[1]["metrics"]["loss"]["last"] == 0.25


def test_the_owner_and_the_admin_get_through(box: Box) -> None:
    for who in (box.alice, box.admin):
        status, info, _ = who.call("GET", "/v1/datasets/info", query={"ref": "faces"})
        assert status == 200 and [e["path"] for e in info["entries"]] == ["faces.txt"]
        for path, member in (("/v1/jobs/ap/1/code.tar", "train.py"), ("/v1/jobs/ap/1/output.tar", "model.txt")):
            status, _, raw = who.call("GET", path)
            assert status == 200 and member in tarfile.open(fileobj=io.BytesIO(raw)).getnames(), path
        status, _, raw = who.call("GET", "/v1/datasets/tar", query={"ref": "faces"})
        assert status == 200 and tarfile.open(fileobj=io.BytesIO(raw)).extractfile("faces.txt").read() == \
            b"alice's faces\n"
        status, _, raw = who.call("GET", "/v1/jobs/ap/1/logs")
        assert status == 200 and b'"metric": "loss"' in raw
        assert who.call("GET", "/v1/jobs/ap/1/metrics")[0] == 200
        assert who.call("GET", "/v1/compare", query={"jobs": "ap/1"})[1]["jobs"][0]["id"] == "ap/1"
    for route in (("POST", "/v1/store/gc", {"body": {}}), ("POST", "/v1/store/verify", {"body": {}})):
        status, answer, raw = box.admin.call(route[0], route[1], **route[2])
        assert status == 200, raw[-300:]
    assert box.alice.call("POST", "/v1/store/gc", body={})[0] == 403           # an admin's, not an owner's


# -- the CLI verbs --------------------------------------------------------------------------------

CLI_OTHER = {
    "floyd init": "writes the project marker", "floyd status": "jobs (lab-wide)", "floyd info": "a job (lab-wide)",
    "floyd nodes": "boxes", "floyd top": "the TUI: GET /v1/jobs, logs and metrics (their routes are checked)",
    "floyd login": "a box to talk to", "floyd logout": "a box to talk to", "floyd whoami": "the caller",
    "floyd token": "personal tokens", "floyd token create": "personal tokens", "floyd token list": "personal tokens",
    "floyd token revoke": "personal tokens", "floyd data": "the group", "floyd data ls": "what the caller may read",
    "floydd start": "the daemon", "floydd status": "the daemon", "floydd stop": "the daemon",
    "floydd repair": "the state files (root, daemon stopped)", "floydd audit": "the audit chain",
    "floydd audit verify": "the audit chain", "floydd audit export": "the audit chain",
    "floydd audit head": "the audit chain", "floydd user unmap": "people", "floydd user": "people", "floydd user add": "people",
    "floydd user list": "people", "floydd user role": "people", "floydd user map": "people",
    "floydd user remove": "people", "floydd init": "a cluster", "floydd token": "join tokens",
    "floydd token create": "join tokens", "floydd token list": "join tokens", "floydd token revoke": "join tokens",
    "floydd join": "a cluster", "floydd members": "membership", "floydd drain": "this box", "floydd leave": "membership",
    "floydd remove": "membership", "floydd recover": "a cluster",
    "floydd rotate-store-key": "store key epochs",
}
"""Verbs that reach none of the access table's objects."""


def _cli_attacks(tmp: Path) -> dict[str, list[tuple[list[str], str]]]:
    """verb -> (its arguments as bob runs it, words of the refusal)."""
    return {
        "floyd run": [(["run", "--data", "faces:/in", "cat /in/*"], "may not mount faces:1"),
                      (["run", "--data", "ap/1/output:/in", "cat /in/*"], "may not mount ap/1/output:1")],
        "floyd restart": [(["restart", "ap/1"], "may not restart ap/1")],
        "floyd logs": [(["logs", "ap/1"], "may not read the logs of ap/1")],
        "floyd stop": [(["stop", "ap/1"], "may not stop ap/1")],
        "floyd output": [(["output", "ap/1", str(tmp / "out")], "may not clone ap/1/output:1")],
        "floyd clone": [(["clone", "ap/1", str(tmp / "code")], "may not clone the code of ap/1")],
        "floyd delete": [(["delete", "-y", "ap/1"], "may not delete ap/1")],
        "floyd compare": [(["compare", "ap/1", "ap/1"], "may not compare the metrics of ap/1")],
        "floyd export": [(["export", "ap/1", "--to", str(tmp / "ap.fx"), "--key-file", str(tmp / "k")],
                          "may not export the code of ap/1")],
        "floyd import": [(["import", str(tmp / "faces.fx"), "--key", KEY], "may not import a version of faces")],
        "floyd data upload": [(["data", "upload", str(tmp / "poison"), "--name", "mnist"],
                               "may not add a version to mnist")],
        "floyd data info": [(["data", "info", "faces"], "may not list the files of faces:1"),
                            (["data", "info", "ap/1/output"], "the output of alice's job ap/1")],
        "floyd data clone": [(["data", "clone", "faces", str(tmp / "faces")], "may not clone faces:1"),
                             (["data", "clone", "ap/1/output", str(tmp / "o")], "may not clone ap/1/output:1")],
        "floyd data delete": [(["data", "delete", "-y", "mnist"], "may not delete mnist")],
        "floyd data verify": [(["data", "verify", "--repair"], "may not verify or repair")],
        "floyd data gc": [(["data", "gc"], "may not collect")],
        "floyd data export": [(["data", "export", "faces", "--to", str(tmp / "f.fx"), "--key-file", str(tmp / "k2")],
                               "may not export faces:1")],
    }


def _verbs(group: click.Group, prefix: str) -> list[str]:
    found, ctx = [], click.Context(group)
    for name in group.list_commands(ctx):     # floydd's verbs of other modules load when named
        command, path = group.get_command(ctx, name), f"{prefix} {name}"
        found.append(path)
        if isinstance(command, click.Group):
            found += _verbs(command, path)
    return found


def test_every_cli_verb_is_classified_and_each_that_reaches_an_object_refuses_bob(box, tmp_path, monkeypatch):
    verbs = set(_verbs(floyd_cli, "floyd")) | set(_verbs(floydd_cli, "floydd"))
    attacks = _cli_attacks(tmp_path)
    assert verbs - set(attacks) - set(CLI_OTHER) == set(), "classify each new verb (and run it as bob below)"
    assert set(attacks) - verbs == set() and set(CLI_OTHER) - verbs == set()
    (tmp_path / "poison").mkdir()
    (tmp_path / "poison" / "labels.csv").write_text("9\n")
    (tmp_path / "faces.fx").write_bytes(box.seen["faces_export"])
    project = tmp_path / "bp"
    project.mkdir()
    (project / ".floyd").write_text(json.dumps({"project": "bp"}))
    monkeypatch.chdir(project)
    bob = box.bob.client()
    for name, module in list(sys.modules.items()):     # every verb talks to the box as bob, through TLS
        if name.startswith("floydd.cli.") and hasattr(module, "connect"):
            monkeypatch.setattr(module, "connect", lambda **_: bob)
    runner = CliRunner()
    for verb, runs in attacks.items():
        for args, words in runs:
            res = runner.invoke(floyd_cli, args, catch_exceptions=False)
            lines = res.stderr.strip().splitlines()
            errors = [line for line in lines if line.startswith("error: ")]
            assert res.exit_code != 0 and len(errors) == 1, (verb, args, res.output)
            assert "user bob may not " in errors[0], (verb, errors)
            assert words in errors[0] and "Traceback" not in res.output, (verb, errors)
    assert not (tmp_path / "out").exists() and not (tmp_path / "code").exists() and not (tmp_path / "faces").exists()
    assert not (tmp_path / "ap.fx").exists() and not (tmp_path / "f.fx").exists()
