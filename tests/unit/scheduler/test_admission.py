"""Cores and memory: a node admits jobs while it has them; the rest wait, with a short reason;
among nodes that fit equally, the one holding a job's data wins."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from floydd.scheduler import NodeSnapshot, PendingJob, place, unplaceable
from floydd.scheduler.reasons import REASON_MAX

G = 1 << 30


def cpu_job(key: str, cores: float = 1, memory: int = 0, **kw) -> PendingJob:
    return PendingJob(key=key, cpu_milli=round(cores * 1000), memory=memory, **kw)


def test_a_two_core_box_runs_two_one_core_jobs_and_the_rest_wait_behind_the_first_that_waits():
    box = NodeSnapshot(name="box", cpu_milli=2000, memory=8 * G)
    plan = place([box], [cpu_job(f"p/{i}") for i in range(1, 6)])
    assert [p.key for p in plan.placements] == ["p/1", "p/2"]
    assert plan.waiting == {"p/3": "waiting for 1 CPU: box has 0 CPUs free",
                            "p/4": "queued behind p/3, which waits for CPUs or memory",
                            "p/5": "queued behind p/3, which waits for CPUs or memory"}


def test_cores_already_set_aside_count_and_a_node_without_known_cores_is_never_short():
    nodes = [NodeSnapshot(name="a", cpu_milli=4000, cpu_held=3500), NodeSnapshot(name="b", load=5)]
    plan = place(nodes, [cpu_job("p/1", 0.5), cpu_job("p/2", 0.5), cpu_job("p/3", 64)])
    assert [(p.key, p.node) for p in plan.placements] == [("p/1", "a"), ("p/2", "b"), ("p/3", "b")]


def test_memory_is_admitted_like_cores():
    nodes = [NodeSnapshot(name="a", memory=16 * G, memory_held=10 * G), NodeSnapshot(name="b", memory=8 * G)]
    plan = place(nodes, [cpu_job("p/1", 0, 6 * G), cpu_job("p/2", 0, 6 * G), cpu_job("p/3", 0, 6 * G)])
    assert {p.key: p.node for p in plan.placements} == {"p/1": "a", "p/2": "b"}
    assert plan.waiting["p/3"] == "waiting for 6 GiB: a has 0 B free; b has 2 GiB free"


def test_a_gpu_job_needs_its_cores_too_and_a_cpu_job_waiting_blocks_no_gpu_job():
    nodes = [NodeSnapshot(name="gpu", gpu_ids=(0, 1), cpu_milli=2000), NodeSnapshot(name="cpu", cpu_milli=2000)]
    pending = [cpu_job("p/1", 4), PendingJob(key="p/2", gpu_count=1, cpu_milli=2000), PendingJob(key="p/3", gpu_count=1,
                                                                                         cpu_milli=1000)]
    plan = place(nodes, pending)
    assert [(p.key, p.node, p.gpu_ids) for p in plan.placements] == [("p/2", "gpu", (0,))]
    assert plan.waiting["p/1"] == "waiting for 4 CPUs: cpu has 2 CPUs in all; gpu has 2 CPUs in all"
    assert plan.waiting["p/3"] == ("waiting for 1 GPU and 1 CPU: cpu has 0 GPUs and 2 CPUs in all; "
                                   "gpu has 1 GPU and 0 CPUs free (held by p/2)")


def test_best_fit_passes_over_a_node_without_the_cores():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0,), cpu_milli=1000, cpu_held=1000), NodeSnapshot(name="b", gpu_ids=(0, 1))]
    plan = place(nodes, [PendingJob(key="p/1", gpu_count=1, cpu_milli=500), PendingJob(key="p/2", gpu_count=1)])
    assert [(p.key, p.node) for p in plan.placements] == [("p/1", "b"), ("p/2", "a")]


def test_a_big_clusters_reason_counts_nodes_and_stays_short():
    nodes = [NodeSnapshot(name=f"box-with-a-long-name-{i:04d}", gpu_ids=tuple(range(8)),
                          held={g: f"project-{i}/{g}" for g in range(8)}, cpu_milli=32000, memory=64 * G)
             for i in range(1000)]
    nodes[0] = NodeSnapshot(name="roomy", gpu_ids=tuple(range(8)), cpu_milli=32000, cpu_held=31000)
    nodes.append(NodeSnapshot(name="off", gpu_ids=(0,), healthy=False))
    nodes.append(NodeSnapshot(name="tiny", gpu_ids=(0,)))
    plan = place(nodes, [PendingJob(key="p/1", gpu_count=2, cpu_milli=4000), PendingJob(key="p/2", gpu_count=1)])
    assert plan.waiting == {
        "p/1": "waiting for 2 GPUs and 4 CPUs: no node has room (999 short of GPUs, 1 of CPUs, 1 too small, "
               "1 unhealthy)",
        "p/2": "queued behind p/1, which waits for GPUs"}
    gang = place(nodes[:5], [PendingJob(key="p/3", gpu_count=1, nodes=2)])
    assert gang.waiting["p/3"] == "waiting for 2 nodes with 1 GPU free each: only 1 has room (4 short of GPUs)"


def test_a_reason_is_cut_however_long_the_names():
    nodes = [NodeSnapshot(name="n" * 300 + str(i), gpu_ids=(0,), held={0: "p/0"}) for i in range(3)]
    why = place(nodes, [PendingJob(key="p/1", gpu_count=1)]).waiting["p/1"]
    assert len(why) == REASON_MAX and why.endswith("…")


def test_the_node_holding_the_data_wins_among_equal_fits_but_not_over_a_better_fit():
    nodes = [NodeSnapshot(name=n, gpu_ids=(0, 1)) for n in "abc"] + [NodeSnapshot(name="d", gpu_ids=(0,))]
    plan = place(nodes, [PendingJob(key="p/1", gpu_count=2, near=("c", "b")),   # b and c fit equally: c first
                         PendingJob(key="p/2", gpu_count=1, near=("b",)),        # d is the better fit
                         PendingJob(key="p/3", gpu_count=1, near=("gone", "b"))])
    assert [(p.key, p.node) for p in plan.placements] == [("p/1", "c"), ("p/2", "d"), ("p/3", "b")]


def test_a_cpu_job_goes_to_an_as_little_loaded_holder_and_a_gang_takes_holders_first():
    nodes = [NodeSnapshot(name=n, load=1 if n == "a" else 0) for n in "abcd"]
    plan = place(nodes, [PendingJob(key="p/1", near=("a", "c")), PendingJob(key="p/2", nodes=2, near=("d",))])
    assert [(p.key, p.node, p.rank) for p in plan.placements] == [("p/1", "c", 0), ("p/2", "d", 0),
                                                                  ("p/2", "b", 1)]


def test_unplaceable_counts_cores_and_memory():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0,), cpu_milli=8000, memory=32 * G), NodeSnapshot(name="b", cpu_milli=2000)]
    assert unplaceable(nodes, 1, 1, 8000, 32 * G) is None
    assert unplaceable(nodes, 0, 1, 64000) == "no node has 64 CPUs (a has 8 CPUs, b has 2 CPUs)"
    assert unplaceable(nodes, 1, 1, 1000, 64 * G) == "no node has 1 GPU and 64 GiB (a has 1 GPU and 32 GiB, " \
                                                    "b has 0 GPUs)"          # the 1 CPU every node has: unsaid
    assert unplaceable(nodes + [NodeSnapshot(name="c")], 0, 1, 64000) is None     # c's cores are not known
    many = [NodeSnapshot(name=f"n{i}", cpu_milli=2000) for i in range(10)]
    assert unplaceable(many, 0, 1, 4000) == "no node has 4 CPUs (the biggest, n0, has 2 CPUs)"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 8), st.booleans()), min_size=1,
                max_size=5),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3000), st.integers(0, 4), st.sampled_from((1, 1, 2))),
                max_size=20))
def test_never_over_commits_cores_or_memory_and_a_head_waits_only_without_room(boxes, wants):
    nodes = [NodeSnapshot(name=f"n{i}", gpu_ids=tuple(range(g)), cpu_milli=c * 1000, memory=m * G, healthy=up)
             for i, (g, c, m, up) in enumerate(boxes)]
    pending = [PendingJob(key=f"p/{i}", gpu_count=g, cpu_milli=c, memory=m * G, nodes=n)
               for i, (g, c, m, n) in enumerate(wants)]
    plan = place(nodes, pending)
    by_name = {n.name: n for n in nodes}
    cpu = {n.name: 0 for n in nodes}
    memory = dict(cpu)
    for p in plan.placements:
        job = pending[int(p.key.split("/")[1])]
        assert by_name[p.node].healthy
        cpu[p.node] += job.cpu_milli
        memory[p.node] += job.memory
    for n in nodes:
        assert cpu[n.name] <= n.cpu_milli and memory[n.name] <= n.memory
    assert len({p.key for p in plan.placements}) + len(plan.waiting) == len(pending)
    for key, why in plan.waiting.items():
        assert len(why) <= REASON_MAX
        job = pending[int(key.split("/")[1])]
        if why.startswith("waiting for") and job.nodes == 1:    # nothing placed after it could have taken it
            placed_before = [p for p in plan.placements if int(p.key.split("/")[1]) < int(key.split("/")[1])]
            for n in nodes:
                used = [p for p in placed_before if p.node == n.name]
                free_gpus = len(n.gpu_ids) - sum(pending[int(p.key.split("/")[1])].gpu_count for p in used)
                fits = n.healthy and free_gpus >= job.gpu_count and \
                    n.cpu_milli - sum(pending[int(p.key.split("/")[1])].cpu_milli for p in used) >= job.cpu_milli and \
                    n.memory - sum(pending[int(p.key.split("/")[1])].memory for p in used) >= job.memory
                assert not fits, (key, n.name)


def slow_place(nodes: list[NodeSnapshot], pending: list[PendingJob]) -> list[tuple]:
    """The policy spelled out, sorting every node for every job: (key, node, GPUs, rank)."""
    healthy = {n.name: n for n in nodes if n.healthy}
    free = {name: [g for g in n.gpu_ids if g not in n.held] for name, n in healthy.items()}
    cpu = {name: None if n.cpu_milli is None else n.cpu_milli - n.cpu_held for name, n in healthy.items()}
    memory = {name: None if n.memory is None else n.memory - n.memory_held for name, n in healthy.items()}
    load = {name: n.load for name, n in healthy.items()}
    out, blocked = [], set()
    for job in pending:
        lane, count = job.gpu_count > 0, max(1, job.nodes)
        if lane in blocked:
            continue
        if not lane and len(healthy) < count:
            continue
        rank = {name: i for i, name in enumerate(job.near)}
        fit = [name for name in healthy if len(free[name]) >= job.gpu_count
               and (cpu[name] is None or cpu[name] >= job.cpu_milli)
               and (memory[name] is None or memory[name] >= job.memory)]
        score = (lambda name: len(free[name]) - job.gpu_count) if lane else (lambda name: load[name])
        fit.sort(key=lambda name: (score(name), rank.get(name, len(rank)), name))
        if len(fit) < count:
            blocked.add(lane)
            continue
        for r, name in enumerate(fit[:count]):
            take, free[name] = free[name][:job.gpu_count], free[name][job.gpu_count:]
            load[name] += 1
            cpu[name] = None if cpu[name] is None else cpu[name] - job.cpu_milli
            memory[name] = None if memory[name] is None else memory[name] - job.memory
            out.append((job.key, name, tuple(take), r))
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from((None, 2, 4, 8)), st.sampled_from((None, 4, 16)),
                          st.integers(0, 2), st.booleans()), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 3), st.sampled_from((0, 0, 500, 1000, 2000, 3000)),
                          st.sampled_from((0, 0, 1, 2, 6)), st.sampled_from((1, 1, 1, 2)),
                          st.lists(st.integers(0, 9), max_size=3, unique=True)), max_size=30))
def test_the_heaps_decide_as_the_policy_spelled_out(boxes, wants):
    """Lanes per shape of ask, nodes dropped from them, the shared heaps past MAX_LANES shapes,
    the near nodes first among equals: the same plan as sorting every node for every job."""
    nodes = [NodeSnapshot(name=f"n{i}", gpu_ids=tuple(range(g)), cpu_milli=None if c is None else c * 1000,
                          memory=None if m is None else m * G, load=load, healthy=up)
             for i, (g, c, m, load, up) in enumerate(boxes)]
    pending = [PendingJob(key=f"p/{i}", gpu_count=g, cpu_milli=c, memory=m * G, nodes=n,
                          near=tuple(f"n{k}" for k in near))
               for i, (g, c, m, n, near) in enumerate(wants)]
    plan = place(nodes, pending)
    assert [(p.key, p.node, p.gpu_ids, p.rank) for p in plan.placements] == slow_place(nodes, pending)


def test_a_reason_names_only_what_some_node_lacks():
    nodes = [NodeSnapshot(name="a", gpu_ids=(0,), held={0: "p/0"}, cpu_milli=8000)]
    why = place(nodes, [PendingJob(key="p/1", gpu_count=1, cpu_milli=1000)]).waiting["p/1"]
    assert why == "waiting for 1 GPU: a has 0 GPUs free (held by p/0)"        # its one core is there
