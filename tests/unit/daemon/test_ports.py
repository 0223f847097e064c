"""Where the remote API binds by default, and the words for a port that cannot be had."""

from __future__ import annotations

import errno

import pytest

from floydd.daemon.cluster_files import ClusterSettings, api_address
from floydd.daemon.ports import bind_refusal


@pytest.mark.parametrize("listen", ["0.0.0.0:7654", "10.0.0.5:7654", "10.0.0.5:7000", "10.0.0.5:7656"])
def test_the_api_binds_port_7655_on_the_listen_host_whatever_the_listen_port(listen):
    # a second box given the first's --listen port + 1 must not collide with the first's API
    assert api_address(ClusterSettings(name="lab", listen=listen)) == (listen.rpartition(":")[0], 7655)


def test_api_listen_is_used_as_given_and_off_is_nowhere():
    assert api_address(ClusterSettings(name="lab", listen="10.0.0.5:9000", api_listen="127.0.0.1:9100")) == \
        ("127.0.0.1", 9100)
    assert api_address(ClusterSettings(name="lab", listen="10.0.0.5:9000", api_listen="10.0.0.6")) == \
        ("10.0.0.6", 7655)
    assert api_address(ClusterSettings(name="lab", api_listen="off")) is None


@pytest.mark.parametrize("code,words,hint", [
    (errno.EADDRINUSE, "is already in use", "stop what holds it"),
    (errno.EACCES, "needs privileges this user lacks", "use a port above 1023"),
    (errno.EADDRNOTAVAIL, "has an address that is not on this box", "use an address of this box"),
    (errno.ENOBUFS, "cannot be bound (why)", "use an address of this box")])
def test_a_port_refusal_names_the_port_the_setting_and_where_it_is_changed(code, words, hint):
    refusal = bind_refusal(OSError(code, "why"), setting="api_listen", host="fd00::5", port=7655,
                           set_in="/var/lib/floydd/cluster.json")
    assert refusal.message == f"port 7655 (api_listen [fd00::5]:7655) {words}"
    assert refusal.code == "port_unavailable"
    assert hint in refusal.hint and "set api_listen to another HOST:PORT (/var/lib/floydd/cluster.json)" in refusal.hint
