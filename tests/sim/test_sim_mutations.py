"""Each deliberately broken rule is caught by the simulator within the CI seed set.

Mutations (RaftNode's ``mutations``, and the driver's ``send_before_persist``):

* stale_votes             a candidate's tally keeps votes from earlier rounds (an older
                          term, or the pre-vote) -> two leaders in one term
* commit_previous_term    a leader commits an older term's entry by counting replicas
                          (Raft figure 8) -> a committed entry is overwritten
* vote_without_log_check  votes go to candidates whose log is behind -> a leader lacks
                          committed entries
* append_without_match    followers accept AppendEntries without checking (index, term)
                          -> logs diverge / invariant errors
* read_without_quorum     ReadIndex answered without confirming leadership -> stale
                          reads, a non-linearizable history
* count_self_unsynced     a leader counts its own entries toward the quorum before its
                          fsync; it sends them early (``send_early``) and crashes before
                          the fsync -> an entry committed on a minority is overwritten
* send_before_persist     the driver sends a ready's messages before its fsync -> a crash
                          loses acknowledged state
"""

from __future__ import annotations

import pytest

from floydd.cluster.raft.core import MUTATIONS

from .run import CI_SEEDS, run_many
from .world import SIM_MUTATIONS


@pytest.mark.parametrize("mutation", sorted(MUTATIONS | SIM_MUTATIONS))
def test_mutation_is_caught_within_the_ci_seed_set(mutation) -> None:
    failures, runs, _, _ = run_many(CI_SEEDS, mutations=frozenset({mutation}), stop_at_first=True)
    assert failures, f"{mutation} survived all {runs} CI seeds"
    # Broken by the mutation, not by something else: the same seed passes without it.
    seed = failures[0].config.seed
    clean, _, _, _ = run_many([seed])
    assert not clean, f"seed {seed} fails even without {mutation}"
