"""Uploads have a size limit counted on what unpacking would write (issue 20, "Limits"): a 10 KB
tar with a 3 GiB sparse member is a 413 naming the limit and its setting, on both tar routes,
and leaves nothing behind."""

from __future__ import annotations

import secrets
from typing import Iterator

import pytest
import requests

from floydd.api import keys
from floydd.config import preset_for_tests
from floydd.daemon.app import create_app
from tests.floods import sparse_tar, zeros_tar_gz
from tests.harness.inprocess import serve
from tests.integration.api._daemon import Api

TAR = {"Content-Type": "application/x-tar"}
ROUTES = {"/v1/datasets/tar": ("max_upload_gb", "upload_too_large"), "/v1/code": ("max_code_mb", "code_too_large")}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("limits")
    config = preset_for_tests(root / "state", dev_fake_gpus="0", sandbox="none",
                              max_upload_gb=2 / 1024, max_code_mb=1.0)       # 2 MiB, 1 MiB
    app = create_app(config)
    app[keys.TCP_TOKEN] = token = secrets.token_hex(16)
    with serve(app) as url, requests.Session() as session:
        yield Api(url=url, token=token, root=root, session=session)


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_small_tar_with_a_huge_sparse_member_is_a_413_and_nothing_stays(api: Api, path: str) -> None:
    setting, code = ROUTES[path]
    status, answer, text = api.call("POST", path, params={"name": "sparse"}, data=sparse_tar(3 << 30), headers=TAR)
    assert status == 413, text[:500]
    assert answer["error"]["code"] == code and setting in answer["error"]["message"], answer
    assert "3 GiB" in answer["error"]["message"] and "TooLarge" == answer["error"]["kind"]
    assert list((api.root / "state" / "uploads").iterdir()) == []      # the scratch folder is gone
    assert api.call("GET", "/v1/datasets", params={"name": "sparse"})[1] == []


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_body_far_past_the_limit_is_refused_by_its_length(api: Api, path: str) -> None:
    setting, _ = ROUTES[path]
    status, answer, text = api.call("POST", path, params={"name": "long"}, data=b"\0" * (24 << 20), headers=TAR)
    assert status == 413 and setting in answer["error"]["message"] and "bytes of tar" in answer["error"]["message"]


def test_a_dataset_within_the_limit_is_taken_and_a_compressed_one_past_it_is_not(api: Api) -> None:
    status, events, text = api.call("POST", "/v1/datasets/tar", params={"name": "small"},
                                    data=sparse_tar(1 << 20), headers=TAR)
    assert status == 200 and events[-1]["result"]["ref"] == "small:1", text[:500]
    status, answer, _ = api.call("POST", "/v1/datasets/tar", params={"name": "gz"},
                                 data=zeros_tar_gz(20 << 20), headers=TAR)
    assert status == 413 and "20 MiB" in answer["error"]["message"]
