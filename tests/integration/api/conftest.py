"""The API tests' daemon: one per module (see :mod:`._daemon`)."""

from __future__ import annotations

import secrets
from typing import Iterator

import pytest
import requests

from floydd.api import keys
from floydd.config import preset_for_tests
from floydd.daemon.app import create_app
from tests.harness.inprocess import serve
from tests.integration.api._daemon import Api, seed


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("api")
    config = preset_for_tests(root / "state", dev_fake_gpus="2", sandbox="none", sample_interval=0.2)
    app = create_app(config)
    app[keys.TCP_TOKEN] = token = secrets.token_hex(16)
    with serve(app) as url, requests.Session() as session:
        api = Api(url=url, token=token, root=root, session=session)
        seed(api)
        yield api


