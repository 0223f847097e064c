"""Every ``/v1`` operation under a property-based fuzzer drawn from ``/v1/openapi.json``.

schemathesis turns the published spec into hypothesis strategies: valid requests (positive)
and requests that break the spec (negative: wrong types, missing fields, values out of
range). Some requests are aimed at what the daemon holds (the job ``seed/1``, the dataset
``mnist``) so they get past "not found". Every answer must be below 500, carry no traceback,
be an ``{"error": {code, message, hint}}`` when it is an error, and a stream must end with a
result or an error that is not an internal one. Afterwards the daemon must still run a job
(a request that killed the control plane would not fail by itself).

Hypothesis raises the interpreter's recursion limit while it runs a test (for the whole
process, the daemon's threads too), so input that overflows the stack (deep JSON, deep tar
paths) is checked by :mod:`.test_odd_requests`, outside hypothesis, not here.

The fuzzer never makes the daemon touch the disk outside the test's folder: absolute paths it
draws for ``path``, ``code_path`` and ``dest`` are mapped into that folder (relative ones
are kept: the daemon refuses them), and a job's command becomes ``echo`` of it.

Deterministic (derandomized hypothesis, no example database): ``FLOYDD_FUZZ_SEED=N`` draws
another fixed sequence. The default run draws ``FLOYDD_FUZZ_EXAMPLES`` requests per operation
(20: about 15 s here); the ``slow`` run (CI, or ``--slow``) draws :data:`LONG_RUN`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shlex

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from floydd.api.openapi import spec
from floydd.store.tarball import MAX_DEPTH
from tests.integration.api._daemon import Api, tar_of

EXAMPLES = int(os.environ.get("FLOYDD_FUZZ_EXAMPLES", "20"))
LONG_RUN = 150
SEED = int(os.environ["FLOYDD_FUZZ_SEED"]) if os.environ.get("FLOYDD_FUZZ_SEED") else None
SIZES = [EXAMPLES, pytest.param(LONG_RUN, marks=pytest.mark.slow, id="long")]
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")   # tar bodies: bytes as drawn
SCHEMA = schemathesis.openapi.from_dict(spec())
_LAST = ("/v1/datasets/delete", "/v1/jobs/{project}/{number}", "/v1/cluster/leave")
"""Operations that may remove what the others aim at: fuzzed last (deleting a job is the only
``delete`` method)."""
OPERATIONS = sorted(((path, method.upper()) for path, ops in spec()["paths"].items() for method in ops),
                    key=lambda op: (op[1] == "DELETE" or op[0] in _LAST, op))
KNOWN_REFS = ["mnist", "mnist:1", "mnist:latest", "seed/1/output", "seed/1/output:1"]
_PATH_FIELDS = ("path", "code_path", "dest")
_COUNTER = itertools.count()
"""Numbers the folders restores write into, so each is fresh."""


def _settings(examples: int):
    fixed = settings(max_examples=examples, derandomize=SEED is None, database=None, deadline=None,
                     phases=[Phase.explicit, Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
    return fixed if SEED is None else lambda test: seed(SEED)(fixed(test))


@pytest.mark.parametrize("examples", SIZES)
@pytest.mark.parametrize("path, method", OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
def test_no_request_gets_a_server_error(api: Api, path: str, method: str, examples: int) -> None:
    operation = SCHEMA[path][method]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))

    @_settings(examples)
    @given(case=cases, data=st.data())
    def check(case, data) -> None:
        _aim(case, data)
        _confine(case, api, next(_COUNTER))
        response = case.call(base_url=api.url, session=api.session, headers=api.headers, timeout=60)
        _check_answer(response.status_code, response.headers.get("Content-Type", ""), response.text,
                      f"{method} {path} {case.path_parameters} {case.query} {_shown(case.body)}")
    check()


@st.composite
def tar_members(draw) -> list[tuple[str, str]]:
    """Tar members as (name, "file" | "dir"): a few plain ones and one odd one, its name made of
    '.', '..', '' and odd characters, or long (names of 200-300 bytes), or a file deep around
    the limit and past what recursion can walk; the plain names may clash with it."""
    kind = st.sampled_from(["file", "dir"])
    plain = st.tuples(st.sampled_from(["a", "b", "a/b", "x"]), kind)
    part = st.one_of(st.sampled_from([".", "..", "", "a", "é", "\udcff"]), st.text(alphabet="ab./", max_size=8),
                     st.integers(200, 300).map(lambda n: "n" * n))
    depth = st.sampled_from([2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 1500, 2000])
    odd = st.one_of(st.tuples(st.lists(part, min_size=1, max_size=5).map("/".join), kind),
                    depth.map(lambda n: ("d/" * n + "f", "file")),
                    st.integers(14, 17).map(lambda n: ("/".join(["x" * 255] * n), "file")))
    return draw(st.permutations(draw(st.lists(plain, max_size=3)) + [draw(odd)]))


@pytest.mark.parametrize("examples", SIZES)
@pytest.mark.parametrize("path", ["/v1/code", "/v1/datasets/tar"])
def test_no_tar_upload_gets_a_server_error(api: Api, path: str, examples: int) -> None:
    """Tar archives with odd member names (the fuzzer above sends only random bytes as a tar)."""
    @_settings(examples)
    @given(members=tar_members())
    def check(members) -> None:
        status, _, text = api.call("POST", path, data=tar_of(members), params={"name": "fuzz"},
                                   headers={"Content-Type": "application/x-tar"})
        _check_answer(status, "", text, f"POST {path} {members!r:.300}")
    check()


def test_after_the_fuzzing_the_daemon_still_runs_a_job(api: Api) -> None:
    status, _, text = api.call("POST", "/v1/cluster/drain", json={"drain": False})   # the fuzzer may have drained
    assert status == 200, text                                                        # the box, as asked: undo it
    code = api.root / "after-code"
    code.mkdir()
    status, job, text = api.call("POST", "/v1/jobs", json={"project": "after", "command": "echo done",
                                                           "code_path": str(code)})
    assert status == 201, text
    status, ended, text = api.call("GET", f"/v1/jobs/{job['id']}/wait", params={"timeout": "60"})
    assert (status, ended["state"]) == (200, "success"), text


# -- helpers --------------------------------------------------------------------------------------

def _check_answer(status: int, content_type: str, text: str, what: str) -> None:
    assert status < 500, f"{what}\n-> {status} {text[:2000]}"
    assert "Traceback (most recent call last)" not in text, f"{what}\n-> {text[:2000]}"
    if status >= 400 and "json" in content_type:
        error = json.loads(text)["error"]
        assert {"code", "message", "hint"} <= set(error) and error["message"], f"{what}\n-> {text[:2000]}"
    if "x-ndjson" in content_type:
        last = json.loads(text.splitlines()[-1])
        assert "result" in last or "error" in last, f"{what}\n-> the stream has no end record: {text[-2000:]}"
        assert last.get("error", {}).get("code") != "internal_error", f"{what}\n-> {text[-2000:]}"


AIMED = {
    "project": st.sampled_from(["seed", "fuzz"]),
    "ref": st.sampled_from(KNOWN_REFS), "name": st.sampled_from([*KNOWN_REFS, "fuzz-data"]),
    "jobs": st.sampled_from(["seed/1", "seed/1,seed/2", "seed/1,fuzz/1"]),
    "state": st.sampled_from(["running", "success,failed", "queued, stopped"]),
    "command": st.just("python train.py"),
}
"""Plausible values for the fields that decide whether a request gets past its first check."""


def _aim(case, data) -> None:
    """Point most requests at what the daemon holds: path parameters at ``seed/1``, names at
    known datasets, paths made absolute (then confined), and so on; each field is left as
    drawn one time in four."""
    aimed = st.integers(0, 3).map(bool)
    params = case.path_parameters
    if params and "project" in params and data.draw(aimed, label="at seed/1"):
        params.update(project="seed", number=1)
    body = case.body
    if case.operation.path == "/v1/jobs" and isinstance(body, dict) and not {"code_path", "code_upload"} & set(body) \
            and data.draw(aimed, label="code_path"):
        body["code_path"] = "/code"
    for fields in (case.query, case.body):
        if not isinstance(fields, dict):
            continue
        for field in list(fields):
            if not isinstance(field, str) or not data.draw(aimed, label=f"aim {field}"):
                continue
            if field in AIMED:
                fields[field] = data.draw(AIMED[field], label=field)
            elif field in _PATH_FIELDS and isinstance(fields[field], str):
                fields[field] = "/" + fields[field]


def _confine(case, api: Api, n: int) -> None:
    """Keep the daemon's disk work inside the test's folder, and a job's command harmless."""
    body = case.body
    if not isinstance(body, dict):
        return
    for field in _PATH_FIELDS:
        value = body.get(field)
        if isinstance(value, str) and value.startswith("/"):
            body[field] = _inside(api, field, value, n)
    if isinstance(body.get("command"), str) and body["command"].strip():
        body["command"] = "echo " + shlex.quote(body["command"])


def _inside(api: Api, field: str, value: str, n: int) -> str:
    """An absolute path drawn by the fuzzer, moved into the test's folder: the seeded folders
    (for reading) or a fresh one (for writing). A path the daemon must refuse (a NUL byte,
    over 4096 bytes) keeps its oddity after that prefix; no other drawn part is kept, so no
    ``..`` leads out."""
    if field == "dest":
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        inside = str(api.root / "dest" / f"{n}-{digest}")
    else:
        inside = str(api.root / ("seed-data" if field == "path" else "seed-code"))
    refused = "\0" in value or len(value.encode("utf-8", "surrogatepass")) > 4096
    return inside + value if refused else inside


def _shown(body) -> str:
    return repr(body)[:500] if isinstance(body, (dict, list, str, bytes, int, float)) else type(body).__name__
