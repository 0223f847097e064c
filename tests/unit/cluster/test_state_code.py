"""The code table of the replicated state (issue 21, level 3): which boxes hold each job's code
tree, which jobs use it, and what each level accepts (pure: no loop, no disk); and what a
submit says of its code's copies (CodeCopies over a fake cluster)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from floydd.cluster.state import versions
from floydd.cluster.replication.codecopies import CodeCopies
from floydd.cluster.replication.replicas import Liveness, choose_replicas
from floydd.cluster.state.machine import ClusterState
from floydd.cluster.replication.storecare import named_trees
from floydd.errors import Conflict, Forbidden, NotFound
from floydd.model import Job
from floydd.store.ids import ObjectId
from tests.unit.cluster.test_state import Log, node, place, submit, update
from tests.unit.cluster.test_state_imports import KEY, allocate, imported

TREE, OTHER = "ab" * 32, "cd" * 32


def _submit(key: str, tree: str = TREE, origin: str = "n1", **kw) -> dict:
    cmd = submit(key, origin=origin, proposer=origin, **kw)
    cmd["spec"] = {**cmd["spec"], "code_tree": tree}
    return cmd


def _job(state: str, node: str, tree: str) -> Job:
    return Job.from_dict({"id": "mnist/1", "project": "mnist", "number": 1, "state": state, "node": node,
                          "created": 1.0, "updated": 1.0, "spec": {"code_tree": tree}})


def _holders(nid: str, holds: bool = True, tree: str = TREE, proposer: str | None = None) -> dict:
    return {"op": "code.holders", "tree": tree, "node": nid, "holds": holds, "ts": 5.0, "proposer": proposer or nid}


@pytest.fixture
def log():
    log = Log(ClusterState(protocol=3))
    for nid in ("n1", "n2", "n3"):
        log({**node(nid), "proposer": nid})
    return log


def test_a_submit_lists_its_code_with_its_origin_as_holder_when_it_says_it_holds_it(log):
    log(_submit("a", code_held=True))
    log(_submit("b", origin="n2"))                      # a restart through a box without the code
    assert log.state.code == {TREE: {"tree": TREE, "holders": ["n1"], "jobs": ["mnist/1", "mnist/2"]}}
    log(_submit("a", code_held=True))                   # a retry: the same job, nothing added
    assert log.state.code[TREE]["jobs"] == ["mnist/1", "mnist/2"]


def test_holders_are_a_set_each_box_speaks_for_itself_and_the_leader_for_any(log):
    log(_submit("a", code_held=True))
    assert log(_holders("n2"))["holders"] == ["n1", "n2"]
    assert log(_holders("n2"))["holders"] == ["n1", "n2"]
    with pytest.raises(Forbidden, match="may not say what box-n1 holds"):
        log(_holders("n1", holds=False, proposer="n2"))
    assert log(_holders("n1", holds=False, proposer="n2") | {"term": 3}, term=3)["holders"] == ["n2"]   # the leader
    with pytest.raises(NotFound, match="no job uses code tree"):
        log(_holders("n3", tree=OTHER))


def test_the_entry_goes_with_its_last_job_hot_or_archived_and_gc_keeps_it_until_then(log):
    log(_submit("a", code_held=True))
    log(_submit("b"))
    log(_holders("n2"))
    log(place("mnist/1", "n1"))
    log(update("mnist/1", state="running", node="n1", attempt=1, proposer="n1"))
    log(update("mnist/1", state="success", exit_code=0, node="n1", attempt=1, proposer="n1"))
    log({"op": "job.archive", "jobs": ["mnist/1"], "ts": 6.0, "proposer": "n1", "term": 3})
    assert "mnist/1" not in log.state.jobs and log.state.code[TREE]["jobs"] == ["mnist/1", "mnist/2"]
    assert ObjectId.from_hex(TREE) in named_trees(log.state, "n2", [])   # a holder keeps it for the archived job
    log({"op": "job.delete", "job": "mnist/2", "ts": 7.0, "proposer": "n1"})
    assert log.state.code[TREE]["jobs"] == ["mnist/1"]
    log({"op": "job.delete", "job": "mnist/1", "ts": 8.0, "proposer": "n1"})          # the archived one
    assert log.state.code == {}
    assert ObjectId.from_hex(TREE) not in named_trees(log.state, "n2", [])
    assert ObjectId.from_hex(TREE) not in named_trees(log.state, "n3", [])
    with pytest.raises(NotFound):
        log(_holders("n3"))


def test_the_table_is_in_the_snapshot(log):
    log(_submit("a", code_held=True))
    copy = ClusterState()
    copy.restore(log.state.snapshot())
    assert copy.code == log.state.code


def test_below_level_3_there_is_no_table_and_its_op_and_field_are_refused():
    log = Log(ClusterState(protocol=2))
    log({**node("n1"), "proposer": "n1"})
    log(_submit("a"))
    assert log.state.code == {}
    for cmd in (_holders("n1"), _submit("b", code_held=True)):
        assert versions.needs(cmd) == 3
        with pytest.raises(Conflict, match="0.3"):
            log(cmd)


def test_the_copies_are_chosen_as_a_dataset_versions_are(log):
    log(_submit("a", code_held=True))
    for nid in ("n1", "n2", "n3"):
        log.state.nodes[nid].update(status="up", last_heartbeat=100.0)
    live = Liveness(now=101.0, grace=30.0, fresh=5.0)
    takers = choose_replicas(log.state.nodes, log.state.code[TREE], 2, live)
    assert len(takers) == 1 and takers[0] in ("n2", "n3")
    log.state.nodes["n1"]["last_heartbeat"] = 50.0          # the origin silent past the grace: two more
    assert sorted(choose_replicas(log.state.nodes, log.state.code[TREE], 2, live)) == ["n2", "n3"]


def test_an_imported_job_lists_its_code_held_by_the_box_that_imported_it(log):
    number = log(allocate([KEY]))[KEY]
    log(imported(number, user="", node_id="n2", proposer="n2"))
    assert log.state.code == {TREE: {"tree": TREE, "holders": ["n2"], "jobs": [f"mnist/{number}"]}}


class _Cluster:
    """What :class:`CodeCopies` reads of the cluster service, for its answers to a submit."""

    def __init__(self, nodes: dict, code: dict) -> None:
        self.node_id = "n1"
        self.state = _State(nodes=nodes, code=code, jobs={})
        self.config = SimpleNamespace(stale_after=5.0)

    async def read_index(self, *, timeout: float | None = None) -> int:
        return 1

    def heard_ages(self) -> dict[str, float]:
        return {}           # heard from no box yet: their heartbeats' ts decide


class _State(SimpleNamespace):
    """The replicated state's code table, nodes and jobs."""

    def list_jobs(self, project: str | None = None, states=None) -> list[Job]:
        return [job for job in self.jobs.values() if not states or job.state in states]


def _copies(cluster: _Cluster) -> CodeCopies:
    return CodeCopies(cluster, store=None, state=cluster.state, replicas=2, grace=30.0, clock=lambda: 101.0)


def _up(*ids: str) -> dict:
    return {nid: {"name": f"box-{nid}", "status": "up", "last_heartbeat": 100.0} for nid in ids}


async def test_a_submit_says_how_many_copies_its_code_has_when_the_second_did_not_come_in_time():
    entry = {TREE: {"tree": TREE, "holders": ["n1"], "jobs": ["mnist/1"]}}
    copies = _copies(_Cluster(_up("n1", "n2"), entry))
    said = await copies.wait_for_copies(TREE, timeout=0.05)
    assert said == "the job's code is stored on 1 of 2 boxes; the second copy follows"
    entry[TREE]["holders"].append("n2")
    assert await copies.wait_for_copies(TREE, timeout=5.0) == ""           # two copies: said nothing
    alone = _copies(_Cluster(_up("n1"), {TREE: {"tree": TREE, "holders": ["n1"], "jobs": []}}))
    assert await alone.wait_for_copies(TREE, timeout=5.0) == ""            # a box alone keeps one copy
    stale = _up("n1", "n2")
    stale["n2"]["last_heartbeat"] = 0.0                                        # nobody to take a copy: at once
    lonely = _copies(_Cluster(stale, {TREE: {"tree": TREE, "holders": ["n1"], "jobs": []}}))
    said = await asyncio.wait_for(lonely.wait_for_copies(TREE, timeout=30.0), 5.0)
    assert said.startswith("the job's code is stored on 1 of 2 boxes; no other box is up"), said


def test_copies_beyond_r_are_trimmed_but_never_from_a_box_running_that_code():
    entry = {TREE: {"tree": TREE, "holders": ["n1", "n2", "n3"], "jobs": ["mnist/1"]}}
    cluster = _Cluster(_up("n1", "n2", "n3"), entry)
    copies = _copies(cluster)
    extra = copies.extra(TREE)
    assert len(extra) == 1 and extra[0] in ("n1", "n2", "n3")        # three copies, R = 2: one goes
    for runner in ("n1", "n2", "n3"):                                 # a running job's box keeps its copy
        cluster.state.jobs = {"mnist/1": _job("running", runner, TREE)}
        assert copies.extra(TREE) and runner not in copies.extra(TREE)
    cluster.state.jobs["mnist/1"] = _job("starting", "n1", TREE)       # fetching it somewhere: nothing goes
    assert copies.extra(TREE) == []
    cluster.state.jobs = {"mnist/1": _job("running", "n1", OTHER)}
    assert len(copies.extra(TREE)) == 1                                # another tree's job protects nothing
    cluster.state.nodes["n3"]["last_heartbeat"] = 0.0                  # a holder silent past its grace
    assert copies.extra(TREE) == []                                    # never trim while one may be gone
    entry[TREE]["holders"] = ["n1", "n2"]
    cluster.state.nodes["n3"]["last_heartbeat"] = 100.0
    assert copies.extra(TREE) == []                                    # R copies: none to spare
