"""A proposal the log cannot hold fails alone: the raft loop, and every later proposal, go on."""

from __future__ import annotations

import pytest

from floydd.cluster.state import commands
from floydd.errors import InvalidSpec

SPEC = {"command": "python train.py", "resources": {"gpus": 0}}


@pytest.mark.parametrize("bad", [{"command": "\ud800"}, {"command": "ok", "params": {"x": "\udfff"}},
                                 {"command": "ok", "n": 2**70}])
async def test_an_unencodable_command_is_refused_and_the_cluster_goes_on(cluster, bad):
    (node,) = await cluster.start(1)
    with pytest.raises(InvalidSpec):
        await node.service.submit_job({**SPEC, **bad}, "bad-key-1", project="mnist")
    with pytest.raises(InvalidSpec):                 # even past the checks, straight into the log
        await node.driver.propose({"op": "project.reserve", "project": "p", "number": 2**70, "ts": 1.0})
    assert node.driver.running
    job = await node.service.submit_job({**SPEC}, "good-key-2", project="mnist")
    assert job["id"] == "mnist/1"


def test_check_refuses_lone_surrogates_anywhere():
    with pytest.raises(InvalidSpec, match="UTF-8"):
        commands.check({"op": "job.submit", "ts": 1.0, "idem_key": "k" * 8, "project": "p",
                        "spec": {"deep": [{"x": "a\ud800"}]}})
