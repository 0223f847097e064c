"""The simulator in CI: the fixed seed set must pass; failures print their replay line."""

from __future__ import annotations

import pytest

from .run import CI_SEEDS, main, run_many
from .world import SimConfig, Simulation, run_seed


def _report(failures) -> str:
    return "\n".join(f"{r.error.strip().splitlines()[-1][:300]}\n  replay: "
                     f"{r.config.replay_command()}" for r in failures)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ci_seed_set() -> None:
    """1,000 seeds x 2,000 steps, 5 nodes: no safety, liveness or linearizability failure."""
    failures, runs, secs, _ = run_many(CI_SEEDS)
    assert runs == len(CI_SEEDS)
    assert not failures, _report(failures)


def test_first_seeds() -> None:
    """The start of the CI set, for a quick local run."""
    failures, _, _, _ = run_many(range(25))
    assert not failures, _report(failures)


@pytest.mark.parametrize("nodes", [1, 3, 7])
def test_other_cluster_sizes(nodes) -> None:
    failures, _, _, _ = run_many(range(10), nodes=nodes)
    assert not failures, _report(failures)


def test_a_run_is_a_function_of_its_seed() -> None:
    a, b = run_seed(11), run_seed(11)
    assert (a.ok, a.steps, a.sim_ms, a.commits, a.acked_writes, a.ops, a.stats) == \
        (b.ok, b.steps, b.sim_ms, b.commits, b.acked_writes, b.ops, b.stats)
    c = run_seed(12)
    assert (a.sim_ms, a.stats) != (c.sim_ms, c.stats)


def test_runs_do_real_work() -> None:
    """Guard against a simulator that passes because nothing happens."""
    results = [run_seed(s) for s in range(10)]
    assert all(r.ok for r in results)
    assert sum(r.acked_writes for r in results) > 100
    assert sum(r.commits for r in results) > 200
    assert all(r.steps >= 2000 for r in results)


def test_a_failing_seed_prints_the_command_that_replays_it(capsys) -> None:
    code = main(["--seeds", "3", "--mutation", "append_without_match"])
    out = capsys.readouterr().out
    assert code == 1
    assert "replay: python -m tests.sim.run --seed 0 --steps 2000 --nodes 5 " \
           "--mutation append_without_match" in out
    assert main(["--seed", "0", "--mutation", "append_without_match"]) == 1


def test_replay_reproduces_the_failure() -> None:
    cfg = SimConfig(seed=2, mutations=frozenset({"stale_votes"}))
    first, again = Simulation(cfg).run(), Simulation(cfg).run()
    assert not first.ok and first.error == again.error and first.steps == again.steps
