"""The poller: fetches only what the view needs, keeps history and log offsets, never raises."""

from __future__ import annotations

from floydd.errors import Forbidden, Unavailable
from floydd.model import OPEN_STATES
from floydd.tui.poll import View, Want
from floydd.tui.poller import Poller, Restart, Stop
from tests.tui.fake_cluster import NOW, FakeClient


def poller(client: FakeClient, **kw) -> Poller:
    return Poller(client, clock=lambda: NOW, **kw)


def test_each_view_fetches_only_what_it_shows(client: FakeClient) -> None:
    p = poller(client)
    expected = {
        Want(view=View.CLUSTER): ["info", "nodes", "jobs"],
        Want(view=View.JOBS): ["info", "jobs"],
        Want(view=View.DETAIL, job="mnist/5"): ["info", "job", "metrics", "logs"],
        Want(view=View.EXPERIMENTS, compare=("mnist/1", "mnist/2")): ["info", "jobs", "compare", "metrics", "metrics"],
        Want(view=View.EXPERIMENTS): ["info", "jobs"],
    }
    for want, calls in expected.items():
        client.calls.clear()
        snap = p.poll(want)
        assert snap.reachable and snap.error is None
        assert client.calls == calls, want


def test_cluster_view_asks_only_for_running_jobs(client: FakeClient) -> None:
    snap = poller(client).poll(Want())
    assert snap.jobs and {j.state for j in snap.jobs} == {"running"}
    assert not snap.all_jobs
    jobs = poller(client).poll(Want(view=View.JOBS))
    assert jobs.all_jobs and len(jobs.jobs) == 14


def test_gpu_history_grows_to_its_length_and_forgets_gone_nodes(client: FakeClient) -> None:
    p = poller(client, history=5)
    for _ in range(7):
        snap = p.poll(Want())
        client.cluster.tick()
    gpu = snap.history[("atlas", 0)]
    assert len(gpu) == 5 and all(40 <= v <= 100 for v in gpu)  # atlas GPU 0 runs a job
    assert len(snap.history[("atlas", -1)]) == 5  # the node's CPU
    client.cluster.nodes.pop()  # cyrene leaves
    snap = p.poll(Want())
    assert not [k for k in snap.history if k[0] == "cyrene"]
    assert ("boreas", 1) in snap.history


def test_log_is_read_once_from_the_last_offset(client: FakeClient) -> None:
    seen = []
    real = client.cluster.logs

    def logs(key: str, offset: int = 0) -> list[bytes]:
        seen.append(offset)
        return real(key, offset)

    client.cluster.logs = logs  # type: ignore[method-assign]
    p = poller(client)
    first = p.poll(Want(view=View.DETAIL, job="mnist/5")).detail
    total = len(client.cluster._log_bytes(client.cluster.get("mnist/5")))
    assert first.log_total == len(first.log) > 3 and first.log[0].text.startswith("loading data")
    assert first.log[1].stream == "e"
    client.cluster.now += 120  # two more epochs
    second = p.poll(Want(view=View.DETAIL, job="mnist/5")).detail
    assert seen == [0, total]
    assert second.log_total == first.log_total + 2
    assert second.log[-1].text.startswith(f"epoch {second.log_total - 2}")


def test_a_partial_log_line_waits_for_its_end() -> None:
    class Client(FakeClient):
        chunks = [b"1.0 o one\n", b"2.0 o tw"]

        def logs(self, key: str, *, follow: bool = False, offset: int = 0):
            self.offsets.append(offset)
            return iter(self.chunks)

    client = Client()
    client.offsets = []
    p = poller(client)
    d = p.poll(Want(view=View.DETAIL, job="mnist/5")).detail
    assert [line.text for line in d.log] == ["one"]
    client.chunks = [b"2.0 o two\n", b"3.0 e thr"]
    d = p.poll(Want(view=View.DETAIL, job="mnist/5")).detail
    assert [line.text for line in d.log] == ["one", "two"]
    assert client.offsets == [0, len(b"1.0 o one\n")]
    client.cluster.stop("mnist/5")  # once a job has ended its last line is whole, newline or not
    client.chunks = [b"3.0 e three"]
    d = p.poll(Want(view=View.DETAIL, job="mnist/5")).detail
    assert [line.text for line in d.log] == ["one", "two", "three"] and d.log[-1].stream == "e"


def test_log_tail_is_bounded_and_reset_for_another_job(client: FakeClient) -> None:
    p = poller(client, log_tail=10)
    d = p.poll(Want(view=View.DETAIL, job="mnist/5")).detail
    assert len(d.log) == 10 and d.log_total > 10
    other = p.poll(Want(view=View.DETAIL, job="bert/1")).detail
    lines = client.cluster.logs("bert/1")
    assert other.key == "bert/1" and other.log_total == len(lines)
    assert other.log[-1].text == lines[-1].decode().split(" ", 2)[2].rstrip("\n")


def test_finished_jobs_metrics_are_fetched_once(client: FakeClient) -> None:
    p = poller(client)
    for _ in range(3):
        d = p.poll(Want(view=View.DETAIL, job="bert/1")).detail
    assert client.calls.count("metrics") == 1
    assert len(d.metrics["loss"]) == d.job.metrics["loss"].count
    for _ in range(2):
        p.poll(Want(view=View.DETAIL, job="mnist/5"))  # running: every time
    assert client.calls.count("metrics") == 3


def test_unknown_job_is_a_detail_error_not_a_dead_daemon(client: FakeClient) -> None:
    snap = poller(client).poll(Want(view=View.DETAIL, job="mnist/99"))
    assert snap.reachable and snap.detail.job is None and "no job mnist/99" in snap.detail.error


def test_a_job_whose_logs_and_metrics_are_not_the_callers_is_shown_without_them(client: FakeClient,
                                                                                 monkeypatch) -> None:
    def refused(key: str, *args, **kw):
        raise Forbidden(f"user bob may not read the metrics of {key}, which is alice's")

    def refused_log(key: str, *args, **kw):
        raise Forbidden(f"user bob may not read the logs of {key}, which is alice's")
        yield b""                                   # a generator, as Client.logs is
    monkeypatch.setattr(client, "metrics", refused)
    monkeypatch.setattr(client, "logs", refused_log)
    snap = poller(client).poll(Want(view=View.DETAIL, job="mnist/5"))
    assert snap.reachable and snap.error is None and snap.detail.job.id == "mnist/5"
    assert snap.detail.metrics == {} and "may not read the logs of mnist/5" in snap.detail.log[-1].text


def test_unreachable_keeps_the_last_data_and_says_since_when(client: FakeClient) -> None:
    now = [NOW]
    p = Poller(client, clock=lambda: now[0])
    good = p.poll(Want(view=View.JOBS))
    client.down = True
    now[0] += 42
    bad = p.poll(Want(view=View.JOBS))
    assert not bad.reachable and "no floydd daemon answers" in bad.error and bad.hint
    assert bad.jobs == good.jobs and bad.last_ok == NOW and bad.now == NOW + 42
    client.down = False
    back = p.poll(Want(view=View.JOBS))
    assert back.reachable and back.error is None and back.last_ok == NOW + 42


def test_unexpected_errors_become_the_banner(client: FakeClient) -> None:
    def broken() -> list:
        raise KeyError("gpus")

    client.nodes = broken  # type: ignore[method-assign]
    snap = poller(client).poll(Want())
    assert not snap.reachable and snap.error == "poller error: KeyError: 'gpus'"


def test_commands_run_in_order_and_report(client: FakeClient) -> None:
    p = poller(client)
    p.submit(Stop("mnist/5"))
    p.submit(Stop("mnist/5"))
    p.submit(Restart("mnist/5", {"params": {"lr": "0.5"}}))
    ok, again, restarted = p.run_commands()
    assert ok.ok and ok.message == "stopping mnist/5"
    assert not again.ok and "not running" in again.message and again.hint
    assert restarted.ok and restarted.message == "restarted mnist/5 as mnist/6"
    assert client.cluster.jobs["mnist/6"]["params"]["lr"] == "0.5"
    assert p.run_commands() == []


def test_commands_while_down_fail_politely(client: FakeClient) -> None:
    client.down = True
    p = poller(client)
    p.submit(Stop("mnist/5"))
    [outcome] = p.run_commands()
    assert not outcome.ok and "no floydd daemon" in outcome.message


def test_comparison_has_table_and_curves_for_each_run(client: FakeClient) -> None:
    snap = poller(client).poll(Want(view=View.EXPERIMENTS, compare=("bert/1", "bert/3")))
    comp = snap.comparison
    assert comp.keys == ("bert/1", "bert/3") and comp.error is None
    assert [j["id"] for j in comp.table["jobs"]] == ["bert/1", "bert/3"]
    assert set(comp.curves) == {"bert/1", "bert/3"} and comp.curves["bert/3"]["loss"][0][0] == 0.0
    bad = poller(client).poll(Want(view=View.EXPERIMENTS, compare=("bert/1", "nope/1"))).comparison
    assert bad.table is None and "no job nope/1" in bad.error


def test_unavailable_midway_is_unreachable(client: FakeClient) -> None:
    def dies(*args, **kwargs) -> list:
        raise Unavailable("connection reset")

    client.jobs = dies  # type: ignore[method-assign]
    snap = poller(client).poll(Want(view=View.JOBS))
    assert not snap.reachable and snap.error == "connection reset"


def test_the_jobs_view_polls_a_page_and_then_counts_the_open_jobs_apart(client: FakeClient) -> None:
    p = poller(client)
    every = p.poll(Want(view=View.JOBS))
    page = p.poll(Want(view=View.JOBS, limit=5))
    assert [j.id for j in page.jobs] == [j.id for j in every.jobs][:5]       # the newest five
    assert page.more_jobs and not every.more_jobs and every.open_jobs is None
    assert sorted(j.id for j in page.open_jobs) == sorted(j.id for j in every.jobs if j.state in OPEN_STATES)
    whole = p.poll(Want(view=View.JOBS, limit=100))
    assert not whole.more_jobs and len(whole.jobs) == len(every.jobs) and whole.open_jobs is None
    bert = p.poll(Want(view=View.JOBS, limit=100, text="bert"))          # a text filter: counted over all
    assert bert.jobs and all(j.id.startswith("bert/") for j in bert.jobs) and not bert.more_jobs
    assert sorted(j.id for j in bert.open_jobs) == sorted(j.id for j in every.jobs if j.state in OPEN_STATES)
    queued = p.poll(Want(view=View.JOBS, limit=100, state="queued"))
    assert queued.jobs and {j.state for j in queued.jobs} == {"queued"}   # the daemon filters
    cluster = p.poll(Want())
    assert not cluster.more_jobs and cluster.open_jobs is None            # nothing carried into another view


def test_the_experiments_view_polls_the_newest_jobs_and_the_projects_newest(client: FakeClient) -> None:
    p = poller(client)
    every = p.poll(Want(view=View.JOBS)).jobs
    some = p.poll(Want(view=View.EXPERIMENTS, limit=3))
    assert [j.id for j in some.jobs] == [j.id for j in every[:3]]
    oldest_project = every[-1].project
    theirs = p.poll(Want(view=View.EXPERIMENTS, limit=3, project=oldest_project))
    runs = [j.id for j in every if j.project == oldest_project][:3]
    assert [j.id for j in theirs.jobs][:len(runs)] == runs                      # the project's newest first
    assert {j.id for j in theirs.jobs} == set(runs) | {j.id for j in every[:3]}  # then the newest of all
