"""The multi-host test network itself: reachability, cuts, netem, multicast, and clean teardown."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.netns.network import (MARKERS, SUBNET, REPO, TestNetwork, cleanup, netem_unavailable_reason,
                                 netns_unavailable_reason)

needs_netns = pytest.mark.skipif(bool(netns_unavailable_reason()), reason=f"{netns_unavailable_reason()}")


def _netns_list() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout


def _root(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_hosts_reach_each_other(netns):
    net = netns(3)
    for a in net.hosts:
        for b in net.hosts:
            if a is not b:
                assert a.reaches(b.ip), f"{a} cannot reach {b}"
    assert net.host(1).ip == f"{SUBNET}.{net.octet}.11"


def test_a_cut_host_is_unreachable_until_healed(netns):
    net = netns(3)
    h1, h2, h3 = net.hosts
    assert h1.reaches(h2.ip)
    net.cut(2)
    assert h1.ping(h2.ip, timeout=0.3) == [None]
    assert h3.ping(h2.ip, timeout=0.3) == [None]
    assert h1.reaches(h3.ip), "cutting host 2 must not cut the others"
    net.heal(2)
    wait_until(lambda: h1.reaches(h2.ip, timeout=0.3), timeout=10, what="host 2 reachable after heal")


def test_multicast_crosses_the_bridge(netns):
    net = netns(3)
    echoes = [h.popen([sys.executable, "-m", "tests.netns._probe", "mcast-echo", "--iface", h.ip],
                      stdout=subprocess.PIPE, text=True) for h in net.hosts[1:]]
    for echo in echoes:
        assert json.loads(echo.stdout.readline())["ready"]
    res = net.host(1).python("-m", "tests.netns._probe", "mcast-rtt", "--iface", net.host(1).ip,
                             "--expect", "2", "--timeout", "5")
    assert sorted(json.loads(res.stdout)["replies"]) == [net.host(2).ip, net.host(3).ip]


@pytest.mark.skipif(bool(netem_unavailable_reason()), reason=f"{netem_unavailable_reason()}")
def test_netem_adds_measurable_delay_and_loss(netns):
    net = netns(2)
    h1, h2 = net.hosts
    base = statistics.median(h1.ping(h2.ip, count=5))
    net.netem(2, delay_ms=60)  # on h2's egress: the replies
    delayed = [r for r in h1.ping(h2.ip, count=5) if r is not None]
    assert len(delayed) == 5 and min(delayed) >= 60, delayed
    net.netem(2, loss_pct=100)
    assert h1.ping(h2.ip, count=2, timeout=0.3) == [None, None]
    net.clear_netem(2)
    assert statistics.median(h1.ping(h2.ip, count=5)) < base + 20


def test_netem_says_why_when_the_kernel_lacks_it(netns):
    net = netns(1)
    reason = netem_unavailable_reason()
    if reason is None:
        net.netem(1, delay_ms=1)
        assert "netem" in net.host(1).run(["tc", "qdisc", "show"]).stdout
    else:
        with pytest.raises(RuntimeError, match="netem"):
            net.netem(1, delay_ms=1)


@needs_netns
def test_teardown_leaves_no_namespace_link_marker_or_process():
    net = TestNetwork().up(2)
    prefix = net.prefix
    try:
        started = net.host(1).popen(["sleep", "600"])
        # A process that escaped our process group still dies: it lives in our namespace.
        escaped = int(net.host(2).run("setsid sleep 600 > /dev/null 2>&1 & echo $!").stdout)
        assert not _dead(started.pid) and not _dead(escaped)
        assert f"{prefix}-n1" in _netns_list() and (MARKERS / f"{prefix}.json").exists()
    finally:
        net.down()
    assert prefix not in _netns_list()
    assert prefix not in _root("-o", "link", "show")
    assert not (MARKERS / f"{prefix}.json").exists()
    assert started.poll() is not None
    wait_until(lambda: _dead(escaped), timeout=10, what="the escaped process to die")
    net.down()  # twice is fine


@needs_netns
def test_the_root_namespace_gains_no_address_route_or_link():
    before = {what: _root(*what.split()) for what in ("-o addr", "route", "-o link")}
    with TestNetwork().up(2) as net:
        assert net.host(1).reaches(net.host(2).ip)
        during = {what: _root(*what.split()) for what in ("-o addr", "route", "-o link")}
    after = {what: _root(*what.split()) for what in ("-o addr", "route", "-o link")}
    for snapshot in (during, after):
        assert f"{SUBNET}." not in snapshot["-o addr"] + snapshot["route"]
        assert net.prefix not in snapshot["-o link"]
    assert during["route"] == before["route"] == after["route"]


@needs_netns
def test_kill_refuses_a_process_that_is_not_ours():
    with TestNetwork().up(1) as net:
        with pytest.raises(ValueError):
            net.kill(os.getpid())
        proc = net.host(1).popen(["sleep", "600"])
        net.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM


_MAKER = textwrap.dedent("""
    import os, signal, sys, time
    # Ctrl-C as at a terminal: a run started in the background by a non-interactive shell
    # (nohup, CI wrappers) inherits SIGINT ignored, and would never see the interrupt
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from tests.netns.network import TestNetwork
    net = TestNetwork().up(1)
    proc = net.host(1).popen(["sleep", "600"])
    print(net.prefix, proc.pid, flush=True)
    if sys.argv[1] == "crash":
        os._exit(3)          # no atexit, no finally: what a crashed run leaves behind
    time.sleep(600)          # waits to be signalled
""")


def _maker(mode: str) -> tuple[subprocess.Popen, str, int]:
    proc = subprocess.Popen([sys.executable, "-c", _MAKER, mode], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    prefix, pid = proc.stdout.readline().split()
    return proc, prefix, int(pid)


@needs_netns
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_run_cleans_up_after_itself(sig):
    proc, prefix, child = _maker("wait")
    try:
        assert f"{prefix}-n1" in _netns_list()
        proc.send_signal(sig)
        proc.wait(timeout=30)
        assert prefix not in _netns_list()
        wait_until(lambda: _dead(child), timeout=10, what="the host's process to die")
    finally:
        if proc.poll() is None:
            proc.kill()
        cleanup(prefix)


@needs_netns
def test_cleanup_removes_what_a_crashed_run_left_and_spares_live_networks():
    with TestNetwork().up(1) as live:
        proc, prefix, child = _maker("crash")
        try:
            assert proc.wait(timeout=30) == 3
            assert f"{prefix}-n1" in _netns_list() and not _dead(child)
            removed = cleanup()
            assert prefix in removed and live.prefix not in removed
            assert prefix not in _netns_list()
            assert f"{live.prefix}-n1" in _netns_list()
            wait_until(lambda: _dead(child), timeout=10, what="the left-behind process to die")
        finally:
            cleanup(prefix)
