"""A throwaway LAN of Linux network namespaces: N hosts on one bridge (DESIGN §6, system tests).

    root namespace: untouched (no address, route, link or process of ours ever lands there)

    ┌──────────────── PREFIX-sw ─────────────────┐   the switch: a bridge with multicast
    │ PREFIX-br  (multicast_snooping 0)          │   snooping off, so mDNS floods to all
    │   PREFIX-s1       PREFIX-s2      ...       │   cut(i)/heal(i) = port i down/up
    └─────┬─────────────────┬────────────────────┘
     veth │            veth │
    ┌─────┴─ PREFIX-n1 ┐ ┌──┴──── PREFIX-n2 ┐       a host: lo + PREFIX-h<i>,
    │ 10.213.X.11/24   │ │ 10.213.X.12/24   │       netem(i) shapes its interface
    └──────────────────┘ └──────────────────┘

Veth pairs are created directly inside their namespaces (never in the root one). Every name
starts with PREFIX (``fd<pid%10000><letter>`` unless given), so ``down()``, the atexit hook and
``python -m tests.netns cleanup`` remove exactly what was made, by name. Processes started in a
host are killed by PID at teardown, then any other process left in our namespaces (e.g. job
agents a daemon detached) is killed too, before the namespaces go.

A marker file per network (``/run/floydd-netns/PREFIX.json``) records its owner PID, so
``cleanup`` can tell a network a crashed run left behind from one that is in use.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from tests.netns._sys import ip, killpg, netns_names, netns_pids
from tests.netns.registry import (MARKERS, PREFIX, auto_prefix, cleanup, list_networks, prefix_of,
                                  read_marker, remove, write_marker)

__all__ = ["TestNetwork", "Host", "NetnsUnavailable", "NetemUnavailable", "netns_unavailable_reason",
           "netem_unavailable_reason", "list_networks", "cleanup", "REPO", "SUBNET", "MARKERS"]

REPO = Path(__file__).resolve().parents[2]
SUBNET = "10.213"                    # 10.213.X.0/24, used only inside our namespaces
_MAX_HOSTS = 99


class NetnsUnavailable(RuntimeError):
    """Not root, or no ``ip netns``: the multi-host tests cannot run here."""


class NetemUnavailable(RuntimeError):
    """The kernel has no ``sch_netem`` qdisc (CONFIG_NET_SCH_NETEM): no delay or loss."""


def netns_unavailable_reason() -> str | None:
    """Why no test network can be made here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces); CI runs as root"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
    except FileNotFoundError:
        return "needs iproute2 (`ip`): apt-get install -y iproute2"
    except subprocess.SubprocessError as e:
        return f"`ip netns` does not work here: {e}"
    return None


_netem_reason: list[str | None] = []


def netem_unavailable_reason() -> str | None:
    """Why ``netem()`` cannot work here (probed once, in a scratch namespace), or None."""
    if not _netem_reason:
        name = f"fd{os.getpid() % 10000}z-n0"  # an auto prefix: cleanup finds it if we crash
        try:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
            ip("netns", "add", name)
            ip("link", "add", "p0", "type", "veth", "peer", "name", "p1", ns=name)
            res = subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "p0", "root",
                                  "netem", "delay", "1ms"], capture_output=True, text=True, timeout=10)
            if res.returncode == 0:
                _netem_reason.append(None)
            else:
                _netem_reason.append("the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): "
                                     + (res.stderr.strip() or "tc failed"))
        except FileNotFoundError:
            _netem_reason.append("needs `tc` (iproute2)")
        except RuntimeError as e:
            _netem_reason.append(f"could not probe for netem: {e}")
        finally:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return _netem_reason[0]


class Host:
    """One machine of the test network: its own namespace, address and processes."""

    def __init__(self, net: TestNetwork, index: int) -> None:
        self.net = net
        self.index = index
        self.ns = f"{net.prefix}-n{index}"
        self.ifname = f"{net.prefix}-h{index}"          # inside the host
        self.port = f"{net.prefix}-s{index}"            # its switch port, inside the switch
        self.ip = f"{SUBNET}.{net.octet}.{10 + index}"

    def __repr__(self) -> str:
        return f"Host({self.index}, {self.ns}, {self.ip})"

    def argv(self, cmd: Sequence[str] | str) -> list[str]:
        """``cmd`` wrapped to run in this host (a string is run by ``sh -c``)."""
        cmd = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        return ["ip", "netns", "exec", self.ns, *cmd]

    def run(self, cmd: Sequence[str] | str, *, check: bool = True, timeout: float = 60,
            env: dict[str, str | None] | None = None, input: str | None = None,
            cwd: Path | str = REPO) -> subprocess.CompletedProcess:
        """Run ``cmd`` in this host to completion; output captured as text."""
        res = subprocess.run(self.argv(cmd), capture_output=True, text=True, timeout=timeout,
                             env=_env(env), input=input, cwd=cwd)
        if check and res.returncode != 0:
            raise subprocess.CalledProcessError(res.returncode, res.args, res.stdout, res.stderr)
        return res

    def popen(self, cmd: Sequence[str] | str, *, env: dict[str, str | None] | None = None,
              cwd: Path | str = REPO, **kw) -> subprocess.Popen:
        """Start ``cmd`` in this host; it is killed (with its process group) at teardown."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(self.argv(cmd), env=_env(env), cwd=cwd, start_new_session=True, **kw)
        self.net._track(proc)
        return proc

    def python(self, *args: str, **kw) -> subprocess.CompletedProcess:
        """``python ARGS`` in this host, with this repository importable."""
        return self.run([sys.executable, *args], **kw)

    def floydd(self, state_dir: Path | str, *args: str, check: bool = True,
               **kw) -> subprocess.CompletedProcess:
        """``floydd ARGS --state-dir STATE`` in this host (:func:`tests.harness.processes.floydd`)."""
        from tests.harness.processes import floydd
        return floydd(*args, state=state_dir, host=self, check=check, **kw)

    def ping(self, target: str, *, count: int = 1, timeout: float = 1.0,
             interval: float = 0.05) -> list[float | None]:
        """ICMP echo round trips to ``target`` in ms (None: lost), from this host."""
        res = self.python("-m", "tests.netns._probe", "ping", target, "--count", str(count),
                          "--timeout", str(timeout), "--interval", str(interval),
                          timeout=count * (timeout + interval) + 30)
        return json.loads(res.stdout)["rtt_ms"]

    def reaches(self, target: str, timeout: float = 1.0) -> bool:
        """One ping answered within ``timeout``?"""
        return self.ping(target, timeout=timeout)[0] is not None

    def start_floydd(self, state_dir: Path | str, *extra_args: str, env: dict[str, str | None] | None = None,
                     timeout: float = 30) -> Floydd:
        """Run ``floydd start --state-dir STATE EXTRA...`` in this host and wait until it answers."""
        from tests.harness.netns import Floydd
        return Floydd(self, Path(state_dir), extra_args, env or {}).start(timeout=timeout)


class TestNetwork:
    """N hosts on one bridge. ``with TestNetwork().up(3) as net: net.host(1).run(...)``."""

    __test__ = False  # not a pytest test class

    def __init__(self, prefix: str | None = None, *, octet: int | None = None, manual: bool = False) -> None:
        if prefix is None:
            prefix = auto_prefix()
        if not PREFIX.match(prefix):
            raise ValueError(f"prefix {prefix!r}: 2-10 lowercase letters/digits, starting with a letter")
        self.prefix = prefix
        self.octet = octet if octet is not None else 1 + sum(map(ord, prefix)) % 250
        self.manual = manual
        self.switch = f"{prefix}-sw"
        self.bridge = f"{prefix}-br"
        self.hosts: list[Host] = []
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._is_up = False

    def __repr__(self) -> str:
        return f"TestNetwork({self.prefix!r}, {len(self.hosts)} hosts, {SUBNET}.{self.octet}.0/24)"

    # -- building and tearing down --------------------------------------------------------

    def up(self, n: int) -> TestNetwork:
        """Make the switch and ``n`` hosts; on any failure, remove what was made and raise."""
        reason = netns_unavailable_reason()
        if reason:
            raise NetnsUnavailable(reason)
        if not 1 <= n <= _MAX_HOSTS:
            raise ValueError(f"1 to {_MAX_HOSTS} hosts, not {n}")
        if self._is_up:
            raise RuntimeError(f"{self!r} is already up")
        existing = [name for name in netns_names() if prefix_of(name) == self.prefix]
        if existing:
            raise RuntimeError(f"namespaces with prefix {self.prefix} exist already: {existing} "
                               f"(python -m tests.netns cleanup --prefix {self.prefix})")
        if not self.manual:  # a network made by hand outlives its maker, until `down`
            _LIVE.add(self)
            _install_sigterm_handler()
        self._is_up = True
        self.hosts = [Host(self, i) for i in range(1, n + 1)]
        write_marker(self.prefix, hosts=n, octet=self.octet, manual=self.manual)
        try:
            ip("netns", "add", self.switch)
            ip("link", "add", self.bridge, "type", "bridge", "mcast_snooping", "0", "stp_state", "0",
                "forward_delay", "0", ns=self.switch)
            ip("link", "set", self.bridge, "up", ns=self.switch)
            for h in self.hosts:
                ip("netns", "add", h.ns)
                ip("link", "add", h.ifname, "netns", h.ns, "type", "veth", "peer", "name", h.port,
                    "netns", self.switch)
                ip("link", "set", h.port, "master", self.bridge, "up", ns=self.switch)
                ip("link", "set", "lo", "up", ns=h.ns)
                ip("addr", "add", f"{h.ip}/24", "dev", h.ifname, ns=h.ns)
                ip("link", "set", h.ifname, "multicast", "on", "up", ns=h.ns)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Kill every process of ours, delete every namespace of ours. Safe to call twice."""
        with self._lock:
            _LIVE.discard(self)
            procs, self._procs = self._procs, []
        for proc in procs:
            if proc.poll() is None:
                killpg(proc.pid)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        remove(self.prefix)
        self._is_up = False

    def __enter__(self) -> TestNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @classmethod
    def attach(cls, prefix: str) -> TestNetwork:
        """The network with this prefix that is up already (made by ``python -m tests.netns up``)."""
        marker = read_marker(prefix)
        hosts = sorted(int(name.rsplit("-n", 1)[1]) for name in netns_names()
                       if prefix_of(name) == prefix and "-n" in name)
        if not hosts:
            raise LookupError(f"no test network with prefix {prefix!r} (python -m tests.netns list)")
        net = cls(prefix, octet=marker.get("octet"), manual=bool(marker.get("manual")))
        net.hosts = [Host(net, i) for i in range(1, max(hosts) + 1)]
        net._is_up = True
        return net

    # -- using it -------------------------------------------------------------------------

    def host(self, i: int) -> Host:
        """Host ``i``, counting from 1 (its address ends in 10+i)."""
        if not 1 <= i <= len(self.hosts):
            raise IndexError(f"host {i}: this network has hosts 1..{len(self.hosts)}")
        return self.hosts[i - 1]

    def cut(self, i: int) -> None:
        """Unplug host ``i``: its switch port goes down (its own stack is untouched)."""
        ip("link", "set", self.host(i).port, "down", ns=self.switch)

    def heal(self, i: int) -> None:
        """Plug host ``i`` back in."""
        ip("link", "set", self.host(i).port, "up", ns=self.switch)

    def netem(self, i: int, *, delay_ms: float = 0, jitter_ms: float = 0, loss_pct: float = 0) -> None:
        """Delay and/or drop what host ``i`` sends (``tc qdisc ... netem`` on its interface)."""
        reason = netem_unavailable_reason()
        if reason:
            raise NetemUnavailable(reason)
        h = self.host(i)
        args = ["delay", f"{delay_ms}ms"] + ([f"{jitter_ms}ms"] if jitter_ms else [])
        if loss_pct:
            args += ["loss", f"{loss_pct}%"]
        h.run(["tc", "qdisc", "replace", "dev", h.ifname, "root", "netem", *args])

    def clear_netem(self, i: int) -> None:
        """Undo :meth:`netem` on host ``i`` (nothing to undo is fine)."""
        h = self.host(i)
        h.run(["tc", "qdisc", "del", "dev", h.ifname, "root"], check=False)

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal a process of this network (started here, or living in one of its hosts)."""
        tracked = {p.pid for p in self._procs}
        if pid not in tracked and pid not in self.pids():
            raise ValueError(f"pid {pid} is not a process of {self!r}")
        os.kill(pid, sig)

    def pids(self) -> set[int]:
        """Every process living in one of this network's namespaces now."""
        return {pid for ns in [self.switch, *(h.ns for h in self.hosts)] for pid in netns_pids(ns)}

    def _track(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.append(proc)


# -- teardown when the process ends --------------------------------------------------------

_LIVE: set[TestNetwork] = set()


def _down_all() -> None:
    for net in list(_LIVE):
        net.down()


atexit.register(_down_all)


def _install_sigterm_handler() -> None:
    """Turn SIGTERM into SystemExit so try/finally, fixtures and atexit still clean up."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _env(extra: dict[str, str | None] | None) -> dict[str, str]:
    """Our environment, this repository importable, plus ``extra`` (a None value unsets)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
