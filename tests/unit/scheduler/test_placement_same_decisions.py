"""The fast ``place`` decides exactly as the old one did (tests/unit/scheduler/_reference.py)
for jobs that ask for no cores or memory and hold no data: same placements (node, GPUs,
rank, order), the same jobs waiting, each behind the same job, and the same ``unplaceable``
answers. What changed on purpose (issue 12): the head of the queue's reason no longer names
every node (it counts them past three, :mod:`floydd.scheduler.reasons`), and says "N GPUs
free" where it said "N free"; so reasons are compared as decisions here (who waits, behind
whom), and ``unplaceable``'s words only on clusters of up to three nodes."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.scheduler import NodeSnapshot, PendingJob, place, unplaceable
from floydd.scheduler.heaps import BestFit
from floydd.scheduler.reasons import LISTED
from tests.unit.scheduler import _reference as reference


@st.composite
def a_node(draw, name: str) -> NodeSnapshot:
    gpus = draw(st.permutations(range(draw(st.integers(0, 6)))))
    gpus = tuple(gpus if draw(st.booleans()) else sorted(gpus))         # the state's are sorted, mostly
    held_gpus = draw(st.sets(st.integers(0, 7)))        # indices beyond gpus: a box back with fewer
    held = {g: f"old/{draw(st.integers(1, 4))}" for g in sorted(held_gpus)}
    return NodeSnapshot(name=name, gpu_ids=gpus, held=held, healthy=draw(st.booleans() | st.just(True)),
                        load=draw(st.integers(0, 3)))


@st.composite
def cluster(draw) -> list[NodeSnapshot]:
    names = draw(st.lists(st.sampled_from("abcdefghijklmnop"), unique=True, max_size=12))
    return [draw(a_node(name)) for name in names]


jobs = st.lists(st.tuples(st.integers(0, 5), st.sampled_from((1, 1, 1, 2, 3))), max_size=40).map(
    lambda wants: [PendingJob(key=f"p/{i}", gpu_count=g, nodes=n) for i, (g, n) in enumerate(wants)])


def decision(reason: str) -> str:
    """What a reason decides: the job waits behind another (which), or at the head."""
    return reason if reason.startswith("queued behind") else "head" if reason.startswith("waiting for") else reason


def assert_same(nodes: list[NodeSnapshot], pending: list[PendingJob]) -> None:
    plan, old = place(nodes, pending), reference.place(nodes, pending)
    assert plan.placements == old.placements
    assert [(k, decision(r)) for k, r in plan.waiting.items()] == [(k, decision(r)) for k, r in old.waiting.items()]


@settings(max_examples=600, deadline=None)
@given(cluster(), jobs)
def test_place_decides_as_before(nodes, pending):
    assert_same(nodes, pending)


@settings(max_examples=300, deadline=None)
@given(cluster(), st.integers(-1, 7), st.integers(1, 4))
def test_unplaceable_says_what_it_said(nodes, gpus, count):
    said, old = unplaceable(nodes, gpus, count), reference.unplaceable(nodes, gpus, count)
    assert (said is None) == (old is None)
    if len(nodes) <= LISTED:
        assert said == old


def test_place_decides_as_before_on_a_big_busy_cluster():
    """Hundreds of nodes and thousands of jobs, where stale heap entries pile up."""
    for seed in range(3):
        rng = random.Random(seed)
        nodes = []
        for i in range(300):
            gpus = tuple(range(rng.choice((0, 1, 2, 4, 8, 8))))
            held = {g: f"old/{rng.randrange(50)}" for g in gpus if rng.random() < 0.3}
            nodes.append(NodeSnapshot(name=f"n{rng.randrange(10**6):06d}-{i}", gpu_ids=gpus, held=held,
                                      healthy=rng.random() > 0.05, load=rng.randrange(4)))
        pending = [PendingJob(key=f"p/{i}", gpu_count=rng.choice((0, 1, 1, 1, 2, 4, 8)),
                              nodes=rng.choice((1,) * 12 + (2, 3))) for i in range(3000)]
        assert_same(nodes, pending)
        assert_same(nodes, [j for j in pending if j.gpu_count <= 1 and j.nodes == 1])   # single GPU or CPU only


def test_a_gang_that_does_not_fit_takes_no_node_out_of_the_best_fit():
    fit, job = BestFit({"a": [0], "b": [0, 1], "c": []}), PendingJob(key="p/1", gpu_count=1)
    assert fit.take(1, 3, job, None) is None
    assert fit.take(1, 2, job, None) == ["a", "b"]
