"""How a user's process reaches its daemon: the box ``floyd login`` saved, else the local one.

Used by the CLI and the TUI alike (neither imports the other): :func:`connect` finds the
daemon to talk to, starting a single-node one in the background when none answers;
:class:`Login` is what ``floyd login`` keeps (``floydd.cli.login`` writes it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from floydd.client import Client
from floydd.config import default_state_dir, socket_path_for
from floydd.errors import Unavailable, UserError
from floydd.security.owned_dirs import claim_state_dir, open_private_file
from floydd.system import SERVICE_DOWN, SERVICE_DOWN_HINT, discover, system_paths

if TYPE_CHECKING:
    from floydd.security.boxpin import Pin

__all__ = ["connect", "Login", "saved_login", "login_path", "save_login"]

_AUTOSTART_TIMEOUT = 30.0


def connect(*, autostart: bool = True) -> Client:
    """The daemon to talk to: FLOYD_HOST (the dev TCP port), an explicit FLOYDD_STATE_DIR's,
    the box ``floyd login`` saved (TLS, :class:`Login`), the user's socket, the system
    socket, or a new one (:func:`floydd.system.discover`).

    Only when none answers does it start a single-node daemon in the background
    (state under the user's data dir, log there), and says so once on stderr; never on a box
    whose system service is installed but stopped: there it says the service is down.
    """
    host = os.environ.get("FLOYD_HOST")
    if host:
        return Client(address=host, token=os.environ.get("FLOYD_TOKEN"))
    explicit = os.environ.get("FLOYDD_STATE_DIR")
    if not explicit:
        login = saved_login()
        if login is not None:
            return login.client()
    state_dir = Path(explicit).expanduser().absolute() if explicit else default_state_dir()
    client = Client(socket_path_for(state_dir), log_path=state_dir / "floydd.log")
    paths = system_paths()
    system = Client(paths.socket_path, log_path=paths.state_dir / "floydd.log")
    clients = {client.socket_path: client, system.socket_path: system}
    found = discover(os.environ, client.socket_path, paths, answers=lambda sock: clients[sock].ping())
    if found.kind in ("user", "system"):
        return clients[Path(found.where)]
    if found.kind == "down":
        raise Unavailable(SERVICE_DOWN, hint=SERVICE_DOWN_HINT)
    if not autostart:
        raise Unavailable(f"no floydd daemon answers at {client.where}", hint="start one with `floydd start`")
    _start_background(state_dir, client)
    return client


def _start_background(state_dir: Path, client: Client) -> None:
    claim_state_dir(state_dir)          # a state dir another user made first is refused
    log_path = state_dir / "floydd.log"
    # never through a link someone planted: the daemon's output would go where it points
    with os.fdopen(open_private_file(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(state_dir)],
                                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + _AUTOSTART_TIMEOUT
    while time.monotonic() < deadline:
        if client.ping():
            click.echo(f"floyd: started a single-node floydd in the background (state {state_dir}, "
                       f"log {log_path}); stop it with `floydd stop`", err=True)
            return
        if proc.poll() is not None and not client.ping():
            if client.ping():  # another floyd started one at the same moment
                return
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise Unavailable("the background floydd exited at start: " + (" / ".join(tail) or "no output"),
                              hint=f"see {log_path}; or run `floydd start` in a terminal to watch it")
        time.sleep(0.05)
    raise Unavailable(f"the background floydd did not answer within {_AUTOSTART_TIMEOUT:.0f}s",
                      hint=f"see {log_path}")


@dataclass(frozen=True)
class Login:
    """What ``floyd login`` keeps: where, the pinned CA, the token, who it speaks for, the box
    pinned there (its node id; None: saved by an older floyd) and what it said of the lab."""

    address: str
    ca_pem: str
    fingerprint: str
    token: str
    person: str
    node_id: str | None = None
    trust: dict = field(default_factory=dict)

    def pin(self) -> Pin:
        from floydd.security.boxpin import Pin, Trust
        try:
            trust = Trust.from_json(self.trust or {})
        except ValueError:
            trust = Trust()             # damaged lists: the node pin still holds; the box sends them again
        return Pin(address=self.address, node_id=self.node_id, trust=trust)

    def client(self, **kw) -> Client:
        return Client(address=self.address, token=self.token, ca_pem=self.ca_pem.encode(), pin=self.pin(),
                      on_pin=self._keep, **kw)

    def _keep(self, pin: Pin, why: str) -> None:
        """The pin changed while talking to the box: keep it (unless the login changed meanwhile)."""
        if why == "adopted":
            click.echo(f"floyd: your login to {self.address} was made by an older floyd, which pinned only the "
                       f"cluster CA; it now pins the box that answered there, {pin.box} (node {pin.node_id}), "
                       "and refuses any other (floyd login again to pin anew)", err=True)
        try:
            current = saved_login()
        except UserError:
            return
        if current is None or (current.address, current.token) != (self.address, self.token):
            return
        if current.node_id not in (None, pin.node_id):
            return
        save_login(replace(current, node_id=pin.node_id, trust=pin.trust.to_json()))


def login_path() -> Path:
    folder = os.environ.get("FLOYD_CONFIG_DIR")
    if not folder:
        import platformdirs
        folder = platformdirs.user_config_dir("floyd")
    return Path(folder).expanduser() / "login.json"


def saved_login() -> Login | None:
    """The login ``floyd login`` saved, or None; a damaged file is said, not ignored."""
    path = login_path()
    try:
        data = json.loads(path.read_text())
        node_id, trust = data.get("node_id"), data.get("trust") or {}
        if not (node_id is None or isinstance(node_id, str)) or not isinstance(trust, dict):
            raise TypeError("node_id or trust")
        return Login(**{k: data[k] for k in ("address", "ca_pem", "fingerprint", "token", "person")},
                     node_id=node_id, trust=trust)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path} is damaged ({type(exc).__name__}), so floyd does not know where you logged in",
                        hint="floyd logout removes it; then floyd login HOST again") from None


def save_login(entry: Login) -> Path:
    path = login_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(entry), f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
