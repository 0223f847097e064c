"""The personal token presented to this box for the request being served, and the signature
it lends to the commands proposed for its person.

How the key reaches the proposal: the TLS API's middleware (:mod:`floydd.api.middleware`),
having checked a personal token, sets :data:`PRESENTED` for the rest of that request
(:func:`presenting`); it is a :class:`contextvars.ContextVar`, so it follows the request's
handler through every ``await`` and into the tasks and threads it starts, and into nothing
else (a request of another person, the box's own loops). Where a command is proposed —
:meth:`RaftDriver.propose <floydd.cluster.driver.proposals.Proposals.propose>` and the
service's own forwarding (:meth:`floydd.cluster.writes.Commands.propose`) — :func:`signed`
adds ``auth = {token, sig}`` to a command made for that token's person (from cluster level 3,
when the cluster recorded the token's public key), then asks the rule every box asks on apply
(:func:`floydd.cluster.state.signin.check_acting`) on this box's copy of the state, so a refusal
comes at once, in the same words, before anything reaches the log.

The secret is held only as long as the request (never logged: no repr); the key is derived
from it when a command is signed.
"""

from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator

from floydd.cluster.state import commands, signin, versions
from floydd.security.token_keys import sign_command, signing_key

__all__ = ["PresentedToken", "PRESENTED", "presenting", "presented", "signed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PresentedToken:
    """A personal token checked at this box's TLS edge for the current request."""
    token_id: str
    person: str
    secret: str = field(repr=False)


PRESENTED: ContextVar[PresentedToken | None] = ContextVar("floydd.presented_token", default=None)


@contextlib.contextmanager
def presenting(token: PresentedToken | None) -> Iterator[None]:
    """``token`` is the one presented for what runs inside (None: no token)."""
    reset = PRESENTED.set(token)
    try:
        yield
    finally:
        PRESENTED.reset(reset)


def presented() -> PresentedToken | None:
    """The token presented for the request being served, if any."""
    return PRESENTED.get()


def signed(state: Any, cmd: dict, node_id: str) -> dict:
    """``cmd`` as box ``node_id`` proposes it (stamped: ``ts``, ``v``): signed by the presented
    token when made for its person; refused (Forbidden, ``not_signed_in``) when this box may
    not act for someone it is made for. Unchanged below level 3 or without people."""
    conf = cmd.get("op") == commands.CONF_OP                       # floydd remove's membership change
    if not versions.at_least(state, signin.LEVEL) or not state.people \
            or not (conf or cmd.get("op") in commands.PERSON_OPS):
        return cmd
    token = PRESENTED.get()
    if token is not None and "auth" not in cmd and token.person in signin.acting_names(cmd):
        record = state.apitokens.tokens.get(token.token_id)
        if conf and "ts" not in cmd:
            cmd = {**cmd, "ts": time.time()}                       # the token must be valid then
        sig = ""                            # one made before level 3 cannot sign: the refusal says so
        if record is not None and record.get("public_key"):
            sig = sign_command(signing_key(token.token_id, token.secret), cmd, node_id)
        cmd = {**cmd, "auth": {"token": token.token_id, "sig": sig}}
    (signin.check_conf_acting if conf else signin.check_acting)(state, cmd, node_id, accounts_only=True)
    return cmd
