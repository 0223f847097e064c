"""Leader crashes and partitions: no acknowledged job lost or doubled, one leader per term,
an isolated leader commits nothing, one history after healing."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest

from floydd.errors import FloyddError, Unavailable

SPEC = {"project": "load", "command": "python train.py"}


def one_leader_per_term(cluster) -> None:
    both = {term: ids for term, ids in cluster.leaders_by_term().items() if len(ids) > 1}
    assert not both, f"two leaders acted in one term: {both}"


async def converge(cluster, nodes) -> bytes:
    """Wait until ``nodes`` applied the same index; their states must then be byte-identical."""
    await cluster.wait_for(lambda: len({n.driver.status().applied for n in nodes}) == 1
                           and nodes[0].driver.status().applied == nodes[0].driver.status().commit,
                           what="the same applied index everywhere")
    states = {n.name: n.service.state.snapshot() for n in nodes}
    assert len(set(states.values())) == 1, "two histories"
    return next(iter(states.values()))


async def test_a_new_leader_takes_over_quickly_when_the_leader_is_killed(cluster):
    nodes = await cluster.start(3)
    old = await cluster.wait_leader()
    old_term = old.driver.status().term
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    await cluster.kill(old)
    survivors = [n for n in nodes if n is not old]
    new = await cluster.wait_leader(among=survivors, timeout=5)
    job = await survivors[0].service.submit_job(SPEC, "after")
    took = loop.time() - killed_at
    assert new.driver.status().term > old_term
    assert job["id"] == "load/1"
    # election timeout 0.2-0.4 s here; 2 s is the figure's bound for the 0.5-1 s default
    assert took < 2.0, f"failover took {took:.2f}s"
    one_leader_per_term(cluster)


async def test_kill_the_leader_while_a_client_submits_200_jobs_through_various_nodes(cluster):
    await cluster.start(3)
    acked: dict[str, str] = {}
    rotation = itertools.count()

    async def client(keys):
        for key in keys:
            while True:
                live = cluster.live()
                node = live[next(rotation) % len(live)]
                try:
                    job = await node.service.submit_job(SPEC, key, timeout=3.0)
                except FloyddError:
                    continue            # timed out or the node died: retry, same key, another node
                acked[key] = job["id"]
                break

    keys = [f"sub-{i:03d}" for i in range(200)]
    clients = [asyncio.create_task(client(keys[i::4])) for i in range(4)]
    await cluster.wait_for(lambda: len(acked) >= 60, timeout=30, what="60 acknowledged submissions")
    victim = cluster.leader()
    await cluster.kill(victim)
    acked_at_kill = len(acked)
    await asyncio.wait_for(asyncio.gather(*clients), 60)
    assert len(acked) == 200 and acked_at_kill < 200, "the kill came after the last submission"

    survivors = cluster.live()
    await converge(cluster, survivors)
    jobs = survivors[0].service.state.list_jobs()
    by_key = Counter(j.idem_key for j in jobs)
    assert all(by_key[k] == 1 for k in keys), f"not exactly once: {[k for k in keys if by_key[k] != 1]}"
    assert len(jobs) == 200 and sorted(j.number for j in jobs) == list(range(1, 201))
    assert {j.idem_key: j.id for j in jobs} == acked
    one_leader_per_term(cluster)

    await cluster.restart(victim)                   # the killed node catches up to the same history
    await converge(cluster, cluster.live())
    one_leader_per_term(cluster)


async def test_an_isolated_leader_steps_down_commits_nothing_and_rejoins_one_history(cluster):
    nodes = await cluster.start(3)
    old = await cluster.wait_leader()
    majority = [n for n in nodes if n is not old]
    await old.service.submit_job(SPEC, "before")
    loop = asyncio.get_running_loop()

    cut_at = loop.time()
    cluster.isolate(old)
    lost = asyncio.create_task(old.service.submit_job(SPEC, "to-the-old-leader", timeout=1.5))
    new = await cluster.wait_leader(among=majority, timeout=5)
    commit_when_replaced = old.driver.status().commit
    await cluster.wait_for(lambda: not old.service.is_leader, timeout=2.0, what="the old leader to step down")
    stepped_down = loop.time() - cut_at
    for i in range(5):
        await majority[i % 2].service.submit_job(SPEC, f"majority-{i}")
    with pytest.raises(Unavailable):
        await lost
    assert old.driver.status().commit == commit_when_replaced, "the isolated leader committed"
    assert [j.idem_key for j in old.service.state.list_jobs()] == ["before"]
    assert new.driver.status().term > max(t for t, ids in cluster.leaders_by_term().items() if old.id in ids)
    assert stepped_down < 2.0

    cluster.heal()
    await converge(cluster, nodes)
    keys = [j.idem_key for j in old.service.state.list_jobs()]
    assert keys == ["before"] + [f"majority-{i}" for i in range(5)]      # its unacknowledged entry is gone
    one_leader_per_term(cluster)
