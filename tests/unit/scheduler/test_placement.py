from hypothesis import given, strategies as st

from floydd.scheduler import NodeSnapshot, PendingJob, place, unplaceable


def test_gpu_job_takes_lowest_free_indices():
    plan = place([NodeSnapshot(name="a", gpus=(0, 1, 2), held={0: "p/1"})], [PendingJob(key="p/2", gpus=2)])
    assert [(p.key, p.node, p.gpus) for p in plan.placements] == [("p/2", "a", (1, 2))]
    assert plan.waiting == {}


def test_waiting_job_says_why_and_blocks_later_gpu_jobs_but_not_cpu_jobs():
    nodes = [NodeSnapshot(name="a", gpus=(0, 1), held={0: "p/1"})]
    plan = place(nodes, [PendingJob(key="p/2", gpus=2), PendingJob(key="p/3", gpus=1),
                         PendingJob(key="p/4", gpus=0)])
    assert [p.key for p in plan.placements] == ["p/4"]
    assert plan.waiting["p/2"] == "waiting for 2 GPUs: a has 1 free (held by p/1)"
    assert "queued behind p/2" in plan.waiting["p/3"]


def test_best_fit_prefers_the_node_left_with_fewest_free():
    nodes = [NodeSnapshot(name="big", gpus=(0, 1, 2, 3)), NodeSnapshot(name="small", gpus=(0,))]
    plan = place(nodes, [PendingJob(key="p/1", gpus=1), PendingJob(key="p/2", gpus=4)])
    assert {p.key: p.node for p in plan.placements} == {"p/1": "small", "p/2": "big"}


def test_unhealthy_nodes_get_nothing():
    nodes = [NodeSnapshot(name="a", gpus=(0,), healthy=False)]
    plan = place(nodes, [PendingJob(key="p/1", gpus=1), PendingJob(key="p/2", gpus=0)])
    assert plan.placements == ()
    assert "a is unhealthy" in plan.waiting["p/1"]
    assert plan.waiting["p/2"] == "waiting for a healthy node"


def test_unplaceable_explains_the_largest_node():
    nodes = [NodeSnapshot(name="a", gpus=(0,))]
    assert unplaceable(nodes, 1) is None
    assert unplaceable(nodes, 0) is None
    assert unplaceable(nodes, 2) == "no node has 2 GPUs (a has 1 GPU)"
    assert unplaceable([NodeSnapshot(name="cpu-box")], 1) == "no node has 1 GPU (cpu-box has 0 GPUs)"


@given(st.lists(st.integers(0, 4), max_size=12), st.integers(1, 8), st.sets(st.integers(0, 7)))
def test_never_double_books_a_gpu(wants, ngpus, held):
    held = {g: "old/1" for g in held if g < ngpus}
    node = NodeSnapshot(name="a", gpus=tuple(range(ngpus)), held=held)
    plan = place([node], [PendingJob(key=f"p/{i}", gpus=w) for i, w in enumerate(wants)])
    taken = [g for p in plan.placements for g in p.gpus]
    assert len(taken) == len(set(taken))
    assert not set(taken) & set(held)
    for p in plan.placements:
        assert len(p.gpus) == wants[int(p.key.split("/")[1])]
    assert len(plan.placements) + len(plan.waiting) == len(wants)


def test_cpu_jobs_spread_over_the_least_loaded_nodes():
    nodes = [NodeSnapshot(name="a", load=2), NodeSnapshot(name="b", load=0), NodeSnapshot(name="c", load=1),
             NodeSnapshot(name="d", load=0, healthy=False)]
    plan = place(nodes, [PendingJob(key=f"p/{i}") for i in range(1, 5)])
    assert [p.node for p in plan.placements] == ["b", "b", "c", "a"]
