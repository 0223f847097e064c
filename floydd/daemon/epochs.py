"""Store key epochs as the daemon runs them: rotating, handing keys to members, re-sealing.

``floydd rotate-store-key`` (an admin; also after ``floydd remove``) calls :meth:`StoreEpochs.rotate`
on the box it reaches: that box makes a random secret, keeps it (``STORE/keys/pending-FP``,
durable) and proposes ``store.epoch`` (:mod:`floydd.cluster.state.keyepochs`: the number and the
fingerprint, never the secret). Once committed it installs the key and seals new objects
under it. Every other box, every ``store_epoch_check`` seconds, looks for epochs the cluster
records whose key it lacks and asks a member for it over mutual TLS
(``POST /cluster/v1/store/epoch-key``, :mod:`floydd.daemon.joining`: answered to current
members only), the box that made it first; it checks the secret against the recorded
fingerprint before it keeps it. So the new key reaches exactly the boxes that are members
when they ask, a box that joins later included; a removed box is refused.

Meanwhile a background task re-seals the objects that are under an older epoch
(:class:`floydd.store.keys.epochs.Resealer`), at most ``store_reseal_rate`` MB a second, while the
daemon serves: it writes in slices of at most half a second's worth and sleeps for the rest
of that second's share, so requests and uploads keep the disk and the GIL most of the time.
A joining box whose store was re-keyed to the cluster's secret at start (its objects under
epoch 0) catches up the same way, and a stop or a crash in the middle is resumed at the next
start (the walk starts over and skips what is done).

Where a box stands is :meth:`StoreEpochs.report` (``GET /v1/cluster/store-key``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from floydd import log
from floydd.cluster.state import keyepochs
from floydd.cluster.state.versions import at_least
from floydd.errors import Conflict, FloyddError, StoreError
from floydd.store import Store
from floydd.store.keys import epochs as store_epochs
from floydd.store.keys.crypto import SECRET_SIZE
from floydd.store.keys.rekey import rekey_pending

__all__ = ["StoreEpochs", "SLICE_S"]

_log = log.store.getChild("epochs")

SLICE_S = 0.5
"""The longest one slice of the re-seal runs at the configured rate (it holds the store's
shared lock meanwhile)."""

Ask = Callable[[str, dict, list[str]], Awaitable[dict]]


class StoreEpochs:
    def __init__(self, service: Any, store: Store, store_dir: Path, *, rate: float, check_every: float,
                 ask: Ask | None = None, clock: Callable[[], float] = time.time) -> None:
        self.service, self.store, self.store_dir = service, store, Path(store_dir)
        self.rate = rate            # bytes a second; 0: no re-seal
        self.check_every = check_every
        self.ask = ask              # POST to other boxes (TrustKeeper.ask); None: a box alone
        self._clock = clock
        self._resealer = store.resealer()
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()
        self.started_at: float | None = None    # when the re-seal toward the newest epoch began
        self.settled_in: float | None = None    # seconds it took, once a lap found nothing left

    # -- running -------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._keys_loop(), name="floydd.epochs.keys"),
                       asyncio.create_task(self._reseal_loop(), name="floydd.epochs.reseal")]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _keys_loop(self) -> None:
        while True:
            try:
                await self.fetch_missing()
            except FloyddError as exc:
                _log.info("store key epochs: %s (trying again)", exc)
            except Exception:   # a bug must not end the hand-over for good
                _log.exception("store key epochs: unexpected error (trying again)")
            await asyncio.sleep(self.check_every)

    async def _reseal_loop(self) -> None:
        while True:
            try:
                if not await self.reseal_slice():
                    try:
                        await asyncio.wait_for(self._wake.wait(), self.check_every)
                    except asyncio.TimeoutError:
                        pass
                    self._wake.clear()
            except FloyddError as exc:
                _log.warning("re-seal under store key epoch %d: %s (trying again)", self.store.seal_epoch, exc)
                await asyncio.sleep(self.check_every)
            except Exception:
                _log.exception("re-seal: unexpected error (trying again)")
                await asyncio.sleep(self.check_every)

    async def reseal_slice(self) -> bool:
        """One slice of the re-seal at the configured rate; False when there is nothing to do."""
        target = self.store.seal_epoch
        if self.rate <= 0 or target == 0 or self._resealer.settled_at == target:
            return False
        if await asyncio.to_thread(rekey_pending, self.store_dir):
            return False        # a joining box's re-seal under the cluster's secret comes first

        if self.started_at is None:
            self.started_at = self._clock()
        t0 = time.monotonic()
        done = await asyncio.to_thread(self.store.reseal_step, self._resealer,
                                       max(1, int(self.rate * SLICE_S)))
        if done.lapped and self._resealer.settled_at == target:
            self.settled_in = self._clock() - self.started_at
            _log.info("store re-sealed under key epoch %d: %d objects (%d bytes) in %.1f s", target,
                      self._resealer.objects_done, self._resealer.bytes_done, self.settled_in)
        spent = time.monotonic() - t0
        await asyncio.sleep(max(0.0, done.bytes / self.rate - spent) if self.rate else 0.0)
        return True

    # -- keys ------------------------------------------------------------------------------------

    async def fetch_missing(self) -> int:
        """Install every epoch key the cluster records that this box lacks; how many it got."""
        state = self.service.state
        me = self.service.node_id
        if me in state.removed or me not in state.nodes:
            return 0
        held = set(self.store.key_epochs())
        got = 0
        failed: FloyddError | None = None
        for rec in reversed(list(state.store_epochs)):     # the newest first: it is what new data needs
            n, fp = rec["epoch"], rec["fingerprint"]
            if n in held:
                continue
            try:
                secret = await asyncio.to_thread(store_epochs.epoch_secret, self.store_dir, n, fp)
                if secret is None:
                    secret = await self._fetch(rec)
                await asyncio.to_thread(self.store.add_epoch, n, secret, fp)
            except FloyddError as exc:      # one epoch's key held nowhere must not keep the others away
                failed = failed or exc
                continue
            _log.info("this box now holds store key epoch %d (made on %s); new objects are sealed under epoch %d",
                      n, rec["made_on"], self.store.seal_epoch)
            got += 1
        if got:
            self._restart_reseal()
        if failed is not None:
            raise failed
        return got

    async def _fetch(self, rec: dict) -> bytes:
        state = self.service.state
        me = self.service.node_id
        if self.ask is None:
            raise StoreError(f"store key epoch {rec['epoch']} was made on {rec['made_on']}, and this box cannot "
                             "ask other boxes", hint="run floydd rotate-store-key again")
        members = [n for n in state.nodes if n != me and n not in state.removed]
        among = sorted(members, key=lambda n: n != rec["made_on"])
        answer = await self.ask("/cluster/v1/store/epoch-key", {"epoch": rec["epoch"]}, among)
        try:
            secret = bytes.fromhex(str(answer.get("secret", "")))
        except ValueError:
            secret = b""
        if len(secret) != SECRET_SIZE:
            raise StoreError(f"a member sent a malformed key for store key epoch {rec['epoch']}")
        return secret

    def _restart_reseal(self) -> None:
        """A new epoch here: the re-seal toward it starts (its counts too)."""
        self.started_at, self.settled_in = self._clock(), None
        self._resealer.objects_done = self._resealer.bytes_done = 0
        self._wake.set()

    # -- rotating --------------------------------------------------------------------------------

    async def rotate(self, *, user: str, reason: str = "rotate") -> dict:
        """Start a new store key epoch, made here; returns its record."""
        state = self.service.state
        if not at_least(state, 3):
            raise Conflict("rotating the store key needs every box of the cluster on floydd 0.3 or later",
                           code="cluster_too_old", hint="upgrade the remaining boxes first")
        for _ in range(3):
            secret = secrets.token_bytes(SECRET_SIZE)
            fp = await asyncio.to_thread(store_epochs.write_pending, self.store_dir, secret)
            n = keyepochs.current(state) + 1
            cmd = {"op": keyepochs.OP, "epoch": n, "fingerprint": fp, "made_on": self.service.node_id,
                   "reason": reason, "user": user, "ts": self._clock()}
            try:
                rec = await self.service.commit(cmd)
            except Conflict as exc:
                await asyncio.to_thread(_forget_pending, self.store_dir, fp)
                if exc.code == "epoch_taken":
                    continue            # another rotation came first: take the next number
                raise
            # (any other error: not known whether it was committed; the pending key stays, and
            # fetch_missing installs it from there if the epoch was recorded)
            await asyncio.to_thread(self.store.add_epoch, rec["epoch"], secret, fp)
            self._restart_reseal()
            _log.warning("store key rotated by %s (%s): epoch %d, made here; new objects are sealed under it, "
                         "older ones are re-sealed in the background", user or "?", reason, rec["epoch"])
            return rec
        raise Conflict("other store key rotations kept coming first", code="epoch_taken", hint="try again")

    # -- reporting -------------------------------------------------------------------------------

    def report(self) -> dict:
        """Where this box stands: the cluster's newest epoch, the one it seals under, the re-seal."""
        r = self._resealer
        cluster = keyepochs.current(self.service.state)
        seal = self.store.seal_epoch
        return {"node": self.service.node_id, "cluster_epoch": cluster, "seal_epoch": seal,
                "held_epochs": self.store.key_epochs(),
                "epochs": list(self.service.state.store_epochs),
                "resealed": seal == 0 or r.settled_at == seal,
                "resealed_objects": r.objects_done, "resealed_bytes": r.bytes_done,
                "reseal_started": self.started_at, "reseal_seconds": self.settled_in,
                "reseal_rate": self.rate}


def _forget_pending(store_dir: Path, fingerprint: str) -> None:
    (Path(store_dir) / store_epochs.KEYS_DIR / f"pending-{fingerprint}").unlink(missing_ok=True)
