"""``floyd top``: the Textual app, its one poller thread, and ``main()``.

The app owns the poller (:class:`floydd.tui.poller.Poller`), runs it in one
thread worker (``exclusive``) that posts a :class:`SnapshotReady` about once a
second (at once when the visible screen wants something new), and hands each
snapshot to the visible screen. Screens never call the daemon; stop and restart
are queued to the same poller thread. Give it any client (``floydd.client.Client``
or a fake) and a clock; both are injected by the tests.

Keys (the footer shows those of the screen in front; the mouse works too:
click a row, double-click to open, click a column title to sort, click a key):

    1 2 3        cluster, jobs, experiments          r   poll now      q  quit
    ↑↓ PgUp/PgDn home/end (or j k g G)  move         ⏎   open the job under the cursor
    jobs:        l  log (detail, log focused)  s stop  R restart  / filter  f state  o sort
    job detail:  m  next metric  F  follow/pause the log  s stop  R restart  esc back
    experiments: space  pick/unpick a run  p/P  project  m  metric  c  clear picks
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any, Callable, Sequence

from textual import work
from textual.app import App, ScreenStackError
from textual.binding import Binding
from textual.message import Message
from textual.worker import get_current_worker

from floydd.model import OPEN_STATES, JobView
from floydd.tui.gcpace import GcPacing
from floydd.tui.poll import Snapshot, Want
from floydd.tui.poller import Outcome, Poller, Restart, Stop
from floydd.tui.screens.base import SnapshotScreen
from floydd.tui.screens.cluster import ClusterScreen
from floydd.tui.screens.confirm import Confirm
from floydd.tui.screens.experiments import ExperimentsScreen
from floydd.tui.screens.job_detail import JobDetailScreen
from floydd.tui.screens.jobs import JobsScreen

__all__ = ["FloydTop", "SnapshotReady", "main"]


class SnapshotReady(Message):
    """Posted by the poller thread: a new snapshot and what became of queued commands."""

    def __init__(self, snapshot: Snapshot, outcomes: tuple[Outcome, ...] = ()) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.outcomes = outcomes


class FloydTop(App[None]):
    """Cluster, jobs, job detail and experiments screens over one poller."""

    TITLE = "floyd top"
    MODES = {"cluster": ClusterScreen, "jobs": JobsScreen, "experiments": ExperimentsScreen}
    DEFAULT_MODE = "cluster"
    BINDINGS = [
        Binding("1", "switch_mode('cluster')", "Cluster"),
        Binding("2", "switch_mode('jobs')", "Jobs"),
        Binding("3", "switch_mode('experiments')", "Experiments"),
        Binding("r", "poll_now", "Refresh"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, client: Any, *, clock: Callable[[], float] = time.time, refresh: float = 1.0,
                 poller: Poller | None = None, pace_gc: bool = False) -> None:
        super().__init__()
        self.poller = poller or Poller(client, clock=clock)
        self.gc_pacing = GcPacing() if pace_gc else None
        """Full passes of Python's collector between polls, not mid-draw (:mod:`floydd.tui.gcpace`;
        it changes the process's collector while the app runs: ``floyd top`` and the bench)."""
        self.refresh_seconds = refresh
        self.snapshot: Snapshot | None = None
        self.polls = 0
        self.draw_ms = 0.0
        """How long handing the last snapshot to the screen took (the bench reads it)."""
        self._want = Want()
        self._wake = threading.Event()
        self._stopping = False

    # -- the poller thread --------------------------------------------------------------

    def on_mount(self) -> None:
        self._poll_loop()

    @work(thread=True, exclusive=True, group="poller", name="poller", exit_on_error=False)
    def _poll_loop(self) -> None:
        worker = get_current_worker()
        while not (self._stopping or worker.is_cancelled):
            self._wake.clear()
            outcomes = tuple(self.poller.run_commands())
            snapshot = self.poller.poll(self._want)
            if self._stopping or worker.is_cancelled:
                return
            if self.gc_pacing is not None:
                self.gc_pacing.after_poll()        # a full pass of the collector here, not mid-draw
            self.post_message(SnapshotReady(snapshot, outcomes))
            self._wake.wait(self.refresh_seconds)

    def on_unmount(self) -> None:
        self._stopping = True
        self._wake.set()
        if self.gc_pacing is not None:
            self.gc_pacing.stop()

    async def action_quit(self) -> None:
        self._stopping = True
        self._wake.set()
        self.exit()

    def set_want(self, want: Want) -> None:
        """What the visible screen needs; a change polls at once."""
        if want != self._want:
            self._want = want
            self._wake.set()

    def action_poll_now(self) -> None:
        self._wake.set()

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        started = time.perf_counter()
        snap = self.snapshot = message.snapshot
        self.polls += 1
        for outcome in message.outcomes:
            self.notify(outcome.message + (f"\n{outcome.hint}" if outcome.hint else ""),
                        severity="information" if outcome.ok else "error", timeout=6)
        info = snap.info or {}
        if info:
            size = info.get("cluster_size")
            self.sub_title = (f"{info.get('node', '?')} ({info.get('role', '?')}) · "
                              f"{size} node{'s' if size != 1 else ''} · floydd {info.get('version', '?')}")
        try:
            screen = self.screen
        except ScreenStackError:  # starting up or shutting down: nothing to draw on
            return
        if isinstance(screen, SnapshotScreen):
            screen.show(snap)
        self.draw_ms = (time.perf_counter() - started) * 1000

    # -- navigation and commands (called by screens) -----------------------------------

    def open_job(self, key: str, *, logs: bool = False) -> None:
        self.push_screen(JobDetailScreen(key, logs=logs))

    def confirm_stop(self, job: JobView) -> None:
        key, state = job.id, job.state
        if state not in OPEN_STATES:
            self.notify(f"{key} is {state}; only queued or running jobs can be stopped", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.command(Stop(key))

        self.push_screen(Confirm(f"Stop {key} ({state}, {job.user or 'unknown user'})?\n"
                                 "Its processes get SIGTERM, then SIGKILL.", yes="Stop"), answered)

    def confirm_restart(self, job: JobView) -> None:
        key = job.id

        def answered(yes: bool | None) -> None:
            if yes:
                self.command(Restart(key, {}))

        self.push_screen(Confirm(f"Restart {key} as a new run with the same code, data and params?",
                                 yes="Restart"), answered)

    def command(self, command: Stop | Restart) -> None:
        """Queue a command for the poller thread; the next snapshot comes at once."""
        self.poller.submit(command)
        self._wake.set()


def main(argv: Sequence[str] | None = None) -> None:
    """``floyd-tui`` / ``python -m floydd.tui`` / ``floyd top``."""
    parser = argparse.ArgumentParser(prog="floyd top", description="Watch the cluster, its jobs and experiments.")
    parser.add_argument("--refresh", type=float, default=1.0, metavar="SECONDS",
                        help="seconds between polls of the daemon (default 1.0)")
    parser.add_argument("--serve", nargs="?", const="127.0.0.1:8000", default=None, metavar="HOST:PORT",
                        help="serve the TUI to a browser with textual-serve (default 127.0.0.1:8000); "
                             "the URL printed at start lets one browser in, once (a new one is printed for "
                             "the next); on loopback only your own user is served")
    parser.add_argument("--host", default=None, metavar="ADDRESS",
                        help="with --serve: listen on ADDRESS instead of 127.0.0.1 (it warns)")
    args = parser.parse_args(argv)
    if args.refresh <= 0:
        parser.error("--refresh must be positive")
    if args.serve is not None:
        from floydd.tui.serve import serve

        serve(args.serve, args.refresh, host=args.host)
        return
    from floydd.tui.connection import Reconnecting

    FloydTop(Reconnecting(), refresh=args.refresh, pace_gc=True).run()
