"""What ``floyd login`` keeps and how ``floyd`` finds it (floydd.cli.login, cli.common.connect)."""

from __future__ import annotations

import pytest

from floydd.cli import common
from floydd.cli.login import Login, _save, _split, login_path, saved_login
from floydd.errors import UserError


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOYD_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.delenv("FLOYD_HOST", raising=False)
    monkeypatch.delenv("FLOYDD_STATE_DIR", raising=False)
    return tmp_path / "cfg"


def _login() -> Login:
    return Login(address="10.0.0.5:7655", ca_pem="-----BEGIN CERTIFICATE-----\n", fingerprint="ab" * 32,
                 token="FLP1." + "1" * 16 + "." + "2" * 32, person="alice")


@pytest.mark.parametrize("text,expected", [("gpu1.lab", ("gpu1.lab", 7655)), ("10.0.0.5:9000", ("10.0.0.5", 9000)),
                                           ("[fd00::5]:9000", ("fd00::5", 9000)), ("fd00::5", ("fd00::5", 7655))])
def test_addresses_take_a_default_port(text, expected):
    assert _split(text) == expected


@pytest.mark.parametrize("text", ["", ":7655", "host:0", "host:70000"])
def test_bad_addresses_are_refused(text):
    with pytest.raises(UserError):
        _split(text)


def test_a_login_is_kept_owner_only_and_read_back(config_dir):
    assert saved_login() is None
    path = _save(_login())
    assert path == login_path() and (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert saved_login() == _login()


def test_a_damaged_login_file_is_said_not_ignored(config_dir):
    config_dir.mkdir()
    (config_dir / "login.json").write_text("{not json")
    with pytest.raises(UserError, match="damaged") as refused:
        saved_login()
    assert "floyd logout" in refused.value.hint


def test_floyd_talks_to_the_login_unless_a_local_daemon_is_named(config_dir, monkeypatch, tmp_path):
    _save(_login())
    client = common.connect(autostart=False)
    assert client.address == "10.0.0.5:7655" and client.ca_pem and client.token.startswith("FLP1.")
    monkeypatch.setenv("FLOYDD_STATE_DIR", str(tmp_path / "local"))    # an explicit local daemon wins
    with pytest.raises(Exception, match="no floydd daemon answers"):
        common.connect(autostart=False)


def test_a_login_keeps_the_pinned_box_and_an_older_one_reads_without_it(config_dir):
    import json
    pinned = Login(**{**_login().__dict__, "node_id": "3" * 16,
                      "trust": {"digest": "d", "members": {"3" * 16: "box1"}, "revoked": {"ab": "4" * 16}}})
    _save(pinned)
    assert saved_login() == pinned
    pin = saved_login().client().pin
    assert pin.node_id == "3" * 16 and pin.box == "box1" and pin.trust.revoked == {"ab": "4" * 16}
    older = {k: v for k, v in json.loads(login_path().read_text()).items() if k not in ("node_id", "trust")}
    login_path().write_text(json.dumps(older))                  # what floyd 0.2 wrote
    assert saved_login().node_id is None and saved_login().client().pin.node_id is None
    login_path().write_text(json.dumps({**older, "node_id": 5}))
    with pytest.raises(UserError, match="damaged"):
        saved_login()
