"""Static seed addresses: the forms people type, and the mistakes they make."""

from __future__ import annotations

import pytest

from floydd.cluster.net.seeds import DEFAULT_PORT, parse_seed, parse_seeds
from floydd.errors import InvalidSpec


@pytest.mark.parametrize("text, expected", [
    ("10.0.0.5:7654", ("10.0.0.5", 7654)),
    ("10.0.0.5", ("10.0.0.5", DEFAULT_PORT)),
    (" gpu-box-3:9000 ", ("gpu-box-3", 9000)),
    ("[fe80::1]:7000", ("fe80::1", 7000)),
    ("[::1]", ("::1", DEFAULT_PORT)),
])
def test_seed_forms(text, expected):
    assert parse_seed(text) == expected


@pytest.mark.parametrize("text", ["", ":7654", "10.0.0.5:", "10.0.0.5:0", "10.0.0.5:65536", "host:http",
                                  "fe80::1", "[fe80::1", "[::1]7654", "a b:1", "user@host:22"])
def test_bad_seeds_say_how_to_write_one(text):
    with pytest.raises(InvalidSpec) as err:
        parse_seed(text)
    assert err.value.hint


def test_duplicates_are_dropped_in_order():
    assert parse_seeds(["b:1", "a:2", "b:1", "a"], default_port=2) == (("b", 1), ("a", 2))
