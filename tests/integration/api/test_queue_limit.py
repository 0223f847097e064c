"""A person may have at most ``max_queued_per_person`` jobs queued (issue 20, "Limits": 200
submits in 4.3 s were all taken): past it a submit is a 429 that says what to do, also when
many arrive at once; a retried submit of a job already taken is never refused."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import pytest
import requests

from floydd.api import keys
from floydd.config import preset_for_tests
from floydd.daemon.app import create_app
from tests.conftest import wait_until
from tests.harness.inprocess import serve
from tests.integration.api._daemon import Api

LIMIT = 3


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("queue")
    config = preset_for_tests(root / "state", dev_fake_gpus="1", sandbox="none", max_queued_per_person=LIMIT)
    app = create_app(config)
    app[keys.TCP_TOKEN] = token = secrets.token_hex(16)
    (root / "code").mkdir()
    with serve(app) as url, requests.Session() as session:
        api = Api(url=url, token=token, root=root, session=session)
        yield api
        for job in api.call("GET", "/v1/jobs")[1]:
            api.call("POST", f"/v1/jobs/{job['id']}/stop")


def _job(api: Api, key: str = "") -> dict:
    return {"project": "q", "command": "sleep 60", "gpus": 1, "code_path": str(api.root / "code"),
            **({"idem_key": key} if key else {})}


def _queued(api: Api) -> list[str]:
    return [j["id"] for j in api.call("GET", "/v1/jobs", params={"state": "queued"})[1]]


def test_a_submit_past_the_limit_is_a_429_saying_what_to_do_and_a_retry_is_not(api: Api) -> None:
    status, first, text = api.call("POST", "/v1/jobs", json=_job(api))
    assert status == 201, text
    wait_until(lambda: api.call("GET", f"/v1/jobs/{first['id']}")[1]["state"] in ("starting", "running"), 30,
               what="the first job to hold the GPU")
    taken = [api.call("POST", "/v1/jobs", json=_job(api, f"queue-limit-{i}")) for i in range(LIMIT)]
    assert [status for status, _, _ in taken] == [201] * LIMIT and len(_queued(api)) == LIMIT
    status, answer, _ = api.call("POST", "/v1/jobs", json=_job(api))
    assert status == 429, answer
    error = answer["error"]
    assert error["code"] == "too_many_queued" and error["kind"] == "TooMany"
    assert f"has {LIMIT} jobs queued, the lab's limit for one person (max_queued_per_person = {LIMIT})" in \
        error["message"] and "floyd stop" in error["hint"]
    status, answer, _ = api.call("POST", "/v1/jobs/check", json=_job(api))       # asked before an upload
    assert status == 429 and answer["error"]["code"] == "too_many_queued"
    status, again, _ = api.call("POST", "/v1/jobs", json=_job(api, "queue-limit-0"))       # a retry: the same job
    assert status == 201 and again["id"] == taken[0][1]["id"]
    assert len(_queued(api)) == LIMIT
    api.call("POST", f"/v1/jobs/{taken[0][1]['id']}/stop")                      # one less queued: room for one
    wait_until(lambda: len(_queued(api)) == LIMIT - 1, 30, what="the stopped job to leave the queue")
    assert api.call("POST", "/v1/jobs", json=_job(api))[0] == 201
    assert api.call("POST", "/v1/jobs", json=_job(api))[0] == 429


def test_many_submits_at_once_cannot_pass_the_same_count(api: Api) -> None:
    for key in _queued(api):
        api.call("POST", f"/v1/jobs/{key}/stop")
    wait_until(lambda: not _queued(api), 30, what="the queue to empty")

    def submit(i: int) -> int:
        with requests.Session() as session:
            resp = session.post(api.url + "/v1/jobs", json=_job(api), headers=api.headers, timeout=60)
            return resp.status_code
    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(submit, range(24)))
    assert sorted(answers) == [201] * LIMIT + [429] * (24 - LIMIT), answers
    assert len(_queued(api)) == LIMIT
