from hypothesis import given, strategies as st

from floydd.scheduler import NodeSnapshot, PendingJob, place, unplaceable


def test_gpu_job_takes_lowest_free_indices():
    plan = place([NodeSnapshot(name="a", gpu_ids=(0, 1, 2), held={0: "p/1"})], [PendingJob(key="p/2", gpu_count=2)])
    assert [(p.key, p.node, p.gpu_ids) for p in plan.placements] == [("p/2", "a", (1, 2))]
    assert plan.waiting == {}


def test_waiting_job_says_why_and_blocks_later_gpu_jobs_but_not_cpu_jobs():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0, 1), held={0: "p/1"})]
    plan = place(nodes, [PendingJob(key="p/2", gpu_count=2), PendingJob(key="p/3", gpu_count=1),
                         PendingJob(key="p/4", gpu_count=0)])
    assert [p.key for p in plan.placements] == ["p/4"]
    assert plan.waiting["p/2"] == "waiting for 2 GPUs: a has 1 GPU free (held by p/1)"
    assert "queued behind p/2" in plan.waiting["p/3"]


def test_best_fit_prefers_the_node_left_with_fewest_free():
    nodes = [NodeSnapshot(name="big", gpu_ids=(0, 1, 2, 3)), NodeSnapshot(name="small", gpu_ids=(0,))]
    plan = place(nodes, [PendingJob(key="p/1", gpu_count=1), PendingJob(key="p/2", gpu_count=4)])
    assert {p.key: p.node for p in plan.placements} == {"p/1": "small", "p/2": "big"}


def test_unhealthy_nodes_get_nothing():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0,), healthy=False)]
    plan = place(nodes, [PendingJob(key="p/1", gpu_count=1), PendingJob(key="p/2", gpu_count=0)])
    assert plan.placements == ()
    assert "a is unhealthy" in plan.waiting["p/1"]
    assert plan.waiting["p/2"] == "waiting for a healthy node"


def test_unplaceable_explains_the_largest_node():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0,))]
    assert unplaceable(nodes, 1) is None
    assert unplaceable(nodes, 0) is None
    assert unplaceable(nodes, 2) == "no node has 2 GPUs (a has 1 GPU)"
    assert unplaceable([NodeSnapshot(name="cpu-box")], 1) == "no node has 1 GPU (cpu-box has 0 GPUs)"


@given(st.lists(st.integers(0, 4), max_size=12), st.integers(1, 8), st.sets(st.integers(0, 7)))
def test_never_double_books_a_gpu(wants, ngpus, held):
    held = {g: "old/1" for g in held if g < ngpus}
    node = NodeSnapshot(name="a", gpu_ids=tuple(range(ngpus)), held=held)
    plan = place([node], [PendingJob(key=f"p/{i}", gpu_count=w) for i, w in enumerate(wants)])
    taken = [g for p in plan.placements for g in p.gpu_ids]
    assert len(taken) == len(set(taken))
    assert not set(taken) & set(held)
    for p in plan.placements:
        assert len(p.gpu_ids) == wants[int(p.key.split("/")[1])]
    assert len(plan.placements) + len(plan.waiting) == len(wants)


def test_cpu_jobs_spread_over_the_least_loaded_nodes():
    nodes = [NodeSnapshot(name="a", load=2), NodeSnapshot(name="b", load=0), NodeSnapshot(name="c", load=1),
             NodeSnapshot(name="d", load=0, healthy=False)]
    plan = place(nodes, [PendingJob(key=f"p/{i}") for i in range(1, 5)])
    assert [p.node for p in plan.placements] == ["b", "b", "c", "a"]


def test_a_gang_takes_distinct_nodes_rank_0_on_the_best_fit():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0, 1, 2, 3)), NodeSnapshot(name="b", gpu_ids=(0, 1), held={0: "p/1"}),
             NodeSnapshot(name="c", gpu_ids=(0, 1))]
    plan = place(nodes, [PendingJob(key="p/2", gpu_count=1, nodes=3)])
    assert [(p.rank, p.node, p.gpu_ids) for p in plan.placements] == [(0, "b", (1,)), (1, "c", (0,)), (2, "a", (0,))]


def test_a_gang_is_placed_whole_or_waits_and_blocks_later_gpu_jobs():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0, 1)), NodeSnapshot(name="b", gpu_ids=(0, 1), held={0: "p/1", 1: "p/1"})]
    plan = place(nodes, [PendingJob(key="p/2", gpu_count=1, nodes=2), PendingJob(key="p/3", gpu_count=1),
                         PendingJob(key="p/4", gpu_count=0, nodes=2)])
    assert [(p.key, p.node, p.rank) for p in plan.placements] == [("p/4", "a", 0), ("p/4", "b", 1)]
    assert plan.waiting["p/2"] == "waiting for 2 nodes with 1 GPU free each: a has room; b has 0 GPUs free (held by p/1)"
    assert "queued behind p/2" in plan.waiting["p/3"]


def test_a_cpu_gang_waits_for_enough_healthy_nodes():
    nodes = [NodeSnapshot(name="a"), NodeSnapshot(name="b", healthy=False)]
    plan = place(nodes, [PendingJob(key="p/1", nodes=2), PendingJob(key="p/2")])
    assert [(p.key, p.node) for p in plan.placements] == [("p/2", "a")]
    assert plan.waiting["p/1"] == "waiting for 2 healthy nodes (1 now)"


def test_unplaceable_gangs_say_how_many_nodes_they_need():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0, 1)), NodeSnapshot(name="b", gpu_ids=(0,))]
    assert unplaceable(nodes, 1, 2) is None
    assert unplaceable(nodes, 2, 2) == "it needs 2 nodes with 2 GPUs each (a has 2 GPUs, b has 1 GPU)"
    assert unplaceable(nodes, 0, 3) == "it needs 3 nodes, the cluster has 2"
    assert unplaceable([nodes[0], NodeSnapshot(name="off", healthy=False)], 0, 2) is None   # it waits


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), max_size=10), st.lists(st.integers(0, 4), min_size=1,
       max_size=4))
def test_gangs_never_share_a_node_nor_double_book(wants, sizes):
    nodes = [NodeSnapshot(name=f"n{i}", gpu_ids=tuple(range(k))) for i, k in enumerate(sizes)]
    plan = place(nodes, [PendingJob(key=f"p/{i}", gpu_count=g, nodes=n) for i, (g, n) in enumerate(wants)])
    taken = [(p.node, g) for p in plan.placements for g in p.gpu_ids]
    assert len(taken) == len(set(taken))
    by_job: dict[str, list] = {}
    for p in plan.placements:
        by_job.setdefault(p.key, []).append(p)
    for key, parts in by_job.items():
        gpus, count = wants[int(key.split("/")[1])]
        assert sorted(p.rank for p in parts) == list(range(count))       # whole gangs only
        assert len({p.node for p in parts}) == count                     # on distinct nodes
        assert all(len(p.gpu_ids) == gpus for p in parts)
    assert len(by_job) + len(plan.waiting) == len(wants)


def test_a_draining_box_takes_no_job_but_one_that_fits_it_waits_saying_so():
    from floydd.scheduler.placement import NodeSnapshot, PendingJob, place, unplaceable
    drained = NodeSnapshot(name="box2", gpu_ids=(0,), healthy=False, draining=True)
    assert unplaceable([drained], gpu_count=0) is None                     # it waits: not "no healthy node"
    assert unplaceable([NodeSnapshot(name="box3", healthy=False)], gpu_count=0) == "no healthy node"
    plan = place([drained], [PendingJob(key="p/1", gpu_count=1)])
    assert plan.placements == () and "box2 is draining" in plan.waiting["p/1"]


def test_a_box_whose_disk_is_full_gets_no_job_and_a_waiting_job_says_why():
    full = NodeSnapshot(name="box2", gpu_ids=(0,), healthy=False, trouble="disk full")
    # the least loaded box would take a CPU job, and the only GPU is there: neither goes to it
    plan = place([full, NodeSnapshot(name="box1", load=3)], [PendingJob(key="p/1", gpu_count=0),
                                                             PendingJob(key="p/2", gpu_count=1)])
    assert [(p.key, p.node) for p in plan.placements] == [("p/1", "box1")]
    assert "box2 takes no new jobs (disk full)" in plan.waiting["p/2"]
    alone = place([full], [PendingJob(key="p/3", gpu_count=0)])
    assert alone.placements == () and alone.waiting["p/3"] == "waiting for a healthy node (box2: disk full)"
    # it waits for the box to recover rather than being refused as hopeless
    assert unplaceable([full], 0) is None and unplaceable([full], 1) is None


def test_boxes_with_store_trouble_are_counted_by_it_on_a_big_cluster():
    nodes = [NodeSnapshot(name=f"n{i}", gpu_ids=(0,), held={0: "p/0"}) for i in range(4)]
    nodes += [NodeSnapshot(name="f1", gpu_ids=(0,), healthy=False, trouble="disk full"),
              NodeSnapshot(name="f2", gpu_ids=(0,), healthy=False, trouble="store failing")]
    plan = place(nodes, [PendingJob(key="p/1", gpu_count=1)])
    assert plan.waiting["p/1"] == "waiting for 1 GPU: no node has room (4 short of GPUs, 1 disk full, 1 store failing)"
