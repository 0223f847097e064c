"""This box's clock against the leader's (floydd.cluster.clockwatch), and a TLS failure caused
by certificate dates told apart from the rest (floydd.security.tls.time_trouble)."""

from __future__ import annotations

import logging
import ssl
from types import SimpleNamespace

import aiohttp
from aiohttp.client_reqrep import ConnectionKey

from floydd.cluster.driver.applied import Applied
from floydd.cluster.clockwatch import ClockWatch
from floydd.errors import Unavailable
from floydd.security.tls import time_trouble


class Driver:
    """The leader answers ``clock`` with its own wall clock, ``behind`` seconds after ours."""

    def __init__(self, box: "Clock", behind: float) -> None:
        self.box, self.behind, self.is_leader, self.down = box, behind, False, False
        self.served, self.hooks = {}, []

    def serve(self, name, answer) -> None:
        self.served[name] = answer

    def on_apply(self, hook) -> None:
        self.hooks.append(hook)

    async def query(self, name, args=None, *, via_leader=False, timeout=None):
        if self.down:
            raise Unavailable("no leader known")
        self.box.now += 0.002                          # on the way there
        answer = {"now": self.box.now - self.behind}
        self.box.now += 0.002                          # and back
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _watch(behind: float):
    clock = Clock()
    driver = Driver(clock, behind)
    state = SimpleNamespace(nodes={"me": {"id": "me", "name": "box2"}, "b3": {"id": "b3", "name": "box3"}})
    return ClockWatch(node_id="me", driver=driver, state=state, limit=30.0, timeout=1.0, clock=clock), driver, state


async def test_a_box_ten_minutes_ahead_measures_so_and_says_it_once(caplog):
    watch, driver, _ = _watch(behind=600.0)
    caplog.set_level(logging.WARNING, "floydd.cluster.clock")
    readings = [await watch.measure() for _ in range(3)]
    assert all(abs(r.offset + 600.0) < 1e-6 and abs(r.rtt - 0.004) < 1e-9 for r in readings)
    view = watch.view("me")
    assert view == {"clock_offset": 600.0, "clock": "10.0 min ahead of the leader", "clock_skewed": True}
    assert [r.message.count("this box's clock is 10.0 min ahead") for r in caplog.records] == [1]
    driver.behind = 0.0                                # set right: said once more
    await watch.measure()
    driver.down = True                                 # no leader: nothing measured, nothing said
    assert await watch.measure() is None
    assert len(caplog.records) == 2 and "back in step" in caplog.records[1].message
    assert driver.served["clock"]({}) == {"now": driver.box.now}   # what this box answers when it leads


async def test_the_leader_logs_a_skewed_box_once_per_episode_from_its_heartbeats(caplog):
    watch, driver, state = _watch(behind=0.0)
    driver.is_leader = True
    caplog.set_level(logging.WARNING, "floydd.cluster.clock")
    beat = {"op": "node.health", "id": "b3", "status": "up"}
    for offset in (0.0, 600.0, 600.2, 599.9):          # box3 10 minutes behind, heartbeat after heartbeat
        state.nodes["b3"]["clock"] = {"offset": offset, "rtt": 0.01}
        driver.hooks[0](Applied(index=1, term=1, command={**beat, "clock": {"offset": offset, "rtt": 0.01}}))
    assert [r.message for r in caplog.records] == [
        "[me] box box3: its clock is 10.0 min behind the leader (more than max_clock_skew, 30s): set its time right"]
    assert watch.view("b3")["clock_skewed"] and watch.view("b3")["clock_offset"] == -599.9
    assert watch.view("nobody") == {"clock_offset": None, "clock": "", "clock_skewed": False}


def test_a_certificate_not_valid_yet_is_told_apart_from_other_tls_failures():
    early = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                                            "certificate is not yet valid")
    early.verify_code, early.verify_message = 9, "certificate is not yet valid"
    wrapped = ConnectionError("cannot connect")
    wrapped.__cause__ = early
    assert "is not valid yet by this box's clock" in time_trouble(wrapped)
    other = ssl.SSLCertVerificationError(1, "certificate verify failed: unable to get local issuer certificate")
    other.verify_code = 20
    assert time_trouble(other) is None and time_trouble(OSError("refused")) is None
    refused = ssl.SSLError(1, "[SSL: TLSV1_ALERT_CERTIFICATE_EXPIRED] tlsv1 alert certificate expired")
    assert "refused this box's certificate" in time_trouble(refused)
    # aiohttp's own certificate error subclasses ssl's without a verify_code: told apart by its
    # cause, never an AttributeError (that ended the raft sender of a peer with a wrong name)
    mismatch = ssl.SSLCertVerificationError(1, "certificate verify failed: Hostname mismatch")
    mismatch.verify_code = 62
    key = ConnectionKey("127.0.0.1", 1, True, True, None, None, None)
    assert time_trouble(aiohttp.ClientConnectorCertificateError(key, mismatch)) is None
    early_via_aiohttp = aiohttp.ClientConnectorCertificateError(key, early)
    assert "is not valid yet" in time_trouble(early_via_aiohttp)
