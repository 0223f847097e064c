"""Only voters keep the CA key (floydd.daemon.renewal.TrustKeeper, issue 21): a voter demoted to
a learner, or a box that sees itself removed, deletes its copy; a voter keeps it. Fakes for the
cluster service; a real CA on disk."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from floydd.daemon.renewal import TrustKeeper
from floydd.daemon.joining import CAHolder
from floydd.security.ca import ClusterCA

ME = "a" * 16


def _keeper(tmp_path, *, voters=(), learners=(), removed=()):
    ClusterCA.create(tmp_path / "ca", "lab")
    state = SimpleNamespace(removed={n: 1.0 for n in removed}, nodes={}, trust=SimpleNamespace(certs={}))
    status = SimpleNamespace(voters=tuple(voters), learners=tuple(learners), leader="b" * 16)
    service = SimpleNamespace(node_id=ME, state=state, status=lambda: status, leader_id="b" * 16)
    trust = SimpleNamespace(service=service, identity=SimpleNamespace(not_before=0, not_after=1), holder=CAHolder(
        tmp_path / "ca"), legacy_tokens=tmp_path / "ca" / "tokens.db")
    return TrustKeeper(trust), tmp_path / "ca"


@pytest.mark.parametrize("where", [{"learners": (ME,)}, {"removed": (ME,)}])
def test_a_demoted_or_removed_box_deletes_its_ca_key_and_keeps_the_certificate(tmp_path, where):
    keeper, folder = _keeper(tmp_path, **where)
    assert keeper.trust.holder.get() is not None
    asyncio.run(keeper.tick())
    assert not (folder / ClusterCA.KEY_FILE).exists() and (folder / ClusterCA.CERT_FILE).exists()
    assert keeper.trust.holder.get() is None


def test_a_voter_keeps_its_ca_key(tmp_path):
    keeper, folder = _keeper(tmp_path, voters=(ME,))
    asyncio.run(keeper.tick())
    assert (folder / ClusterCA.KEY_FILE).exists()
