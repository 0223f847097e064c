"""A job log that stops early: a note when the daemon says why, the banner when it went away."""

from __future__ import annotations

from floydd.client import GONE
from floydd.errors import Unavailable
from floydd.tui.poll import View, Want
from floydd.tui.poller import Poller
from tests.tui.fake_cluster import NOW, FakeClient


class _Client(FakeClient):
    """One log line, then the error ``end`` (as :meth:`floydd.client.Client.logs` raises it)."""

    end: Unavailable

    def logs(self, key: str, *, follow: bool = False, offset: int = 0):
        if offset == 0:
            yield b"1.0 o one\n"
        raise self.end


def test_a_log_the_daemon_cannot_read_now_is_a_note_not_kept() -> None:
    c = _Client()
    c.end = Unavailable("node b does not answer", hint="floyd nodes")
    p = Poller(c, clock=lambda: NOW)
    for _ in range(2):                  # the note is shown once, however often it is polled
        snap = p.poll(Want(view=View.DETAIL, job="mnist/5"))
        assert snap.reachable and [line.text for line in snap.detail.log] == [
            "one", "[floydd] log unavailable: node b does not answer"]
    assert snap.detail.log_total == 1


def test_a_daemon_gone_mid_log_is_the_banner() -> None:
    c = _Client()
    c.end = Unavailable("the floydd daemon at /x.sock went away in the middle of this command", code=GONE,
                        hint="check it with `floydd status`; then run the command again")
    snap = Poller(c, clock=lambda: NOW).poll(Want(view=View.DETAIL, job="mnist/5"))
    assert not snap.reachable and "went away" in snap.error and "floydd status" in snap.hint
