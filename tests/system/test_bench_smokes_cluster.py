"""The smoke runs of the benches of several boxes (see test_bench_smokes.py, which holds the
patterns: this file only lets CI run them on its other worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.system.test_bench_smokes import CLUSTER, run_smoke


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CLUSTER))
def test_cluster_bench_smoke(name: str, tmp_path: Path):
    run_smoke(name, tmp_path)
