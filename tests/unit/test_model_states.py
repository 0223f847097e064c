"""Job states and their sets live in the model alone: the API's literals, the agent's outcomes
and the TUI's filters are the model's, and the sets partition the states as documented."""

from __future__ import annotations

import ast
import pathlib
import typing

import floydd
from floydd.agent import status
from floydd.api.schemas import literals
from floydd.model import (ACTIVE_STATES, FINAL_STATES, OPEN_STATES, RUN_OUTCOMES, STATES, TRANSITIONS,
                          UNSUCCESSFUL_STATES, WAITING_STATES)
from floydd.tui.screens.jobs import STATE_FILTERS


def test_the_api_literals_are_the_model_states() -> None:
    assert typing.get_args(literals.JobState) == STATES


def test_the_sets_partition_the_states() -> None:
    assert set(TRANSITIONS) == set(STATES)
    assert OPEN_STATES | FINAL_STATES == set(STATES) and not OPEN_STATES & FINAL_STATES
    assert ACTIVE_STATES < OPEN_STATES and "unknown" in ACTIVE_STATES and "queued" not in ACTIVE_STATES
    assert WAITING_STATES == {"queued", "starting"} and WAITING_STATES < OPEN_STATES
    assert UNSUCCESSFUL_STATES == FINAL_STATES - {"success"}
    assert set(RUN_OUTCOMES) == FINAL_STATES - {"lost"}


def test_the_agent_and_the_tui_use_the_models_sets() -> None:
    assert status.OUTCOMES is RUN_OUTCOMES
    assert STATE_FILTERS["active"] is OPEN_STATES and STATE_FILTERS["failed"] is UNSUCCESSFUL_STATES
    assert STATE_FILTERS["queued"] is WAITING_STATES
    assert set().union(*(s for s in STATE_FILTERS.values() if s is not None)) == set(STATES)   # unknown too


def _state_sets_defined(path: pathlib.Path) -> list[str]:
    """Names ``path`` binds at module level to a set or tuple of two or more job states written
    by hand (``X = ("queued", "starting")``, ``X = frozenset({...})``)."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        value = node.value
        if isinstance(value, ast.Call) and value.args:           # frozenset({...}), set((...))
            value = value.args[0]
        if isinstance(value, (ast.Set, ast.Tuple, ast.List)) and len(value.elts) >= 2 and all(
                isinstance(e, ast.Constant) and e.value in STATES for e in value.elts):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [ast.unparse(t) for t in targets]
    return names


def test_no_other_module_defines_a_set_of_job_states() -> None:
    root = pathlib.Path(floydd.__file__).parent
    folders = [root, root.parent / "tui", root.parent / "agent"]
    found = {str(path.relative_to(root.parent)): names for folder in folders for path in folder.rglob("*.py")
             if path.parent.name != "model" and (names := _state_sets_defined(path))}
    assert found == {}


def test_the_listing_sort_order_names_every_state() -> None:
    from floydd.model.order import STATE_ORDER      # the daemon's sort=state, and the TUI's
    assert set(STATE_ORDER) == set(STATES)
