"""What the API tests talk to: a real daemon (``create_app`` served in-process by
:func:`tests.harness.inprocess.serve`, fake GPUs, no sandbox) with an API token, as a daemon
listening on TCP is; and what it holds before the requests come (:func:`seed`): a dataset
``mnist`` and an ended job ``seed/1``, so that requests reach past "not found".

Everything the daemon reads or writes lives under the module's temporary folder.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.conftest import wait_until

__all__ = ["Api", "seed", "tar_of"]


@dataclass(frozen=True)
class Api:
    """The daemon under test: ``call()`` answers (status, JSON or the NDJSON events, raw text)."""

    url: str
    token: str
    root: Path
    """The module's temporary folder: the daemon's state, the seeded folders, every dest."""
    session: requests.Session

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def call(self, method: str, path: str, **kw: Any) -> tuple[int, Any, str]:
        headers = {**self.headers, **kw.pop("headers", {})}
        resp = self.session.request(method, self.url + path, headers=headers, timeout=60, **kw)
        return resp.status_code, _decoded(resp), resp.text


def tar_of(members: list[tuple[str, str]]) -> bytes:
    """A tar of ``(name, "file" | "dir")`` members, names as given (a file holds one byte)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()


def _decoded(resp: requests.Response) -> Any:
    kind = resp.headers.get("Content-Type", "")
    if "x-ndjson" in kind:
        return [json.loads(line) for line in resp.text.splitlines() if line.strip()]
    if "json" in kind:
        return resp.json()
    return None


def seed(api: Api) -> None:
    """What the tests aim at: the dataset ``mnist`` and the ended job ``seed/1``."""
    data = api.root / "seed-data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("a\n")
    (data / "sub" / "b.bin").write_bytes(b"\0" * 100)
    status, events, text = api.call("POST", "/v1/datasets", json={"name": "mnist", "path": str(data)})
    assert status == 200 and "result" in events[-1], text
    code = api.root / "seed-code"
    code.mkdir()
    (code / "train.py").write_text("import os\nprint('hello')\n"      # an /output to publish: an empty one is not
                                   "with open(os.path.join(os.environ.get('FLOYD_OUTPUT', '/output'), 'model.txt'), "
                                   "'w') as f:\n    f.write('weights')\n")
    status, job, text = api.call("POST", "/v1/jobs", json={
        "project": "seed", "command": "python train.py", "code_path": str(code), "data": ["mnist:/input"]})
    assert status == 201, text
    assert job["id"] == "seed/1"

    def ended() -> bool:
        return api.call("GET", "/v1/jobs/seed/1/wait", params={"timeout": "5"})[1]["state"] == "success"
    wait_until(ended, 60, what="the seeded job to end")
