"""``floyd login`` / ``logout`` / ``whoami`` and ``floyd token``: using the lab from elsewhere.

A person makes a personal token on any box where they have an account (``floyd token
create``, over that box's socket), then on their laptop ``floyd login HOST`` pins the
cluster's CA (:mod:`floydd.security.pinning`: checked against ``--fingerprint``, or shown
to be confirmed, as SSH does with a new host key) and the box that answered there (its node
id, :mod:`floydd.security.boxpin`), asks for the token, checks it with the box, and keeps it
all in ``CONFIG/login.json`` (0600; ``CONFIG`` is ``FLOYD_CONFIG_DIR`` or the user's config
folder, e.g. ``~/.config/floyd``), with what the box said of the lab (members, revoked
certificates; kept up to date as the box's answers say it changed). From then on every
``floyd`` command (and ``floyd top``) talks to that box over TLS as that person
(:func:`floydd.cli.common.connect`), until ``floyd logout``; a server at that address that
is not that box (another box, a removed one, a revoked certificate) is refused before the
token is sent.

A login saved by an older floyd pinned only the CA: its first use pins the box that answers
then, and says so once (the trust ``floyd login`` gives the box it meets; ``floyd login``
again to pin anew).
"""

from __future__ import annotations

import sys

import click

from floydd.cli.common import STALE, connect, echo_json, fail, handle_errors
from floydd.cli.table import print_table
from floydd.client import Client
from floydd.config import DEFAULT_API_PORT
from floydd.errors import FloyddError, UserError
from floydd.reach import Login, login_path, saved_login
from floydd.reach import save_login as _save

__all__ = ["Login", "saved_login", "login_path", "login", "logout", "whoami", "token"]

_DURATIONS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit() or host.endswith(":") and not host.startswith("["):
        host, port = address.strip(), str(DEFAULT_API_PORT)     # no port (or a bare IPv6 address)
    host = host.strip("[]")
    if not host or not 0 < int(port) < 65536:
        raise UserError(f"{address!r} is not HOST[:PORT]", hint=f"e.g. floyd login gpu1.lab or 10.0.0.5:{DEFAULT_API_PORT}")
    return host, int(port)


@click.command()
@click.argument("address", metavar="HOST[:PORT]")
@click.option("--fingerprint", default=None, metavar="FP|JOIN_TOKEN",
              help="The cluster CA's fingerprint (floydd members prints it) or a join token of the cluster: "
                   "checked before any token is sent.")
@click.option("--token-stdin", is_flag=True, help="Read the personal token from stdin instead of asking.")
@click.option("--yes", is_flag=True, help="Trust the CA the box shows without asking (only on a network you trust).")
@handle_errors
def login(address: str, fingerprint: str | None, token_stdin: bool, yes: bool) -> None:
    """Use the lab from this machine: pin the box's cluster CA, then log in with a personal token.

    Make the token on a box where you have an account: floyd token create.
    """
    from floydd.cluster.state.apitokens import parse_api_token
    from floydd.security.boxpin import Pin
    from floydd.security.pinning import first_contact, matches, parse_fingerprint
    host, port = _split(address)
    expected = parse_fingerprint(fingerprint) if fingerprint else None
    contact = first_contact(host, port)
    where = f"{host}:{port}"
    if expected is not None and not matches(contact.fingerprint, expected):
        fail(f"the cluster CA at {where} is {contact.short}, not the {expected[:16]} you gave: refused, "
             "no token was sent", "check the fingerprint with the lab's admin (floydd members prints it)")
    if contact.node_id is None:
        fail(f"the server at {where} presented a certificate of that CA that names no box: refused, no token "
             "was sent", "give the address of a box's API (floydd members lists them)")
    pin = Pin(address=where, node_id=contact.node_id, trust=contact.trust)
    box = f"{pin.box} (node {contact.node_id})" if pin.box != f"node {contact.node_id}" else pin.box
    previous = _previous()
    if previous is not None and previous.address == where and previous.node_id not in (None, contact.node_id):
        click.echo(f"WARNING: the box at {where} changed since you last logged in (was node {previous.node_id}, "
                   f"now {box}): the lab may have moved its boxes, or someone is answering in its place", err=True)
    if expected is None:
        if previous is not None and previous.address == where and previous.fingerprint != contact.fingerprint:
            click.echo(f"WARNING: the cluster CA at {where} changed since you last logged in "
                       f"(was sha256:{previous.fingerprint[:16]}, now {contact.short}): the lab may have made its "
                       "cluster anew, or someone is intercepting", err=True)
        click.echo(f"the cluster CA at {where} is sha256:{contact.fingerprint}; the box there is {box}", err=True)
        if not yes:
            if not sys.stdin.isatty() or token_stdin:
                fail("not logging in to a CA nobody checked", "give --fingerprint (floydd members or a join token "
                     "shows it), or --yes if you trust this network")
            if not click.confirm("is this your lab's? (compare with floydd members on a box)", err=True):
                fail("not logged in", "compare the fingerprint with the lab's admin, then try again")
    text = sys.stdin.readline().strip() if token_stdin else click.prompt(
        "personal token (floyd token create on a box makes one)", hide_input=True, err=True)
    parse_api_token(text)                           # malformed: said here, sent nowhere
    learned: list[Pin] = []
    client = Client(address=where, token=text, ca_pem=contact.ca_pem, timeout=30, pin=pin,
                    on_pin=lambda new, _why: learned.append(new))
    who = client.whoami()                           # only to the box met above (boxpin.admit)
    pin = learned[-1] if learned else pin
    path = _save(Login(address=where, ca_pem=contact.ca_pem.decode(), fingerprint=contact.fingerprint,
                       token=text, person=who["person"], node_id=pin.node_id, trust=pin.trust.to_json()))
    click.echo(f"logged in to {where} as {who['person']}: box {box}, cluster CA {contact.short}; kept in {path}")
    click.echo("floyd now runs your commands on that cluster, on that box only; floyd logout goes back to this "
               "machine's daemon", err=True)


def _previous() -> Login | None:
    try:
        return saved_login()
    except UserError:
        return None


@click.command()
@click.option("--revoke", is_flag=True, help="Also revoke the token on the cluster (it stops working everywhere).")
@handle_errors
def logout(revoke: bool) -> None:
    """Forget the login: floyd talks to this machine's daemon again."""
    path = login_path()
    entry = _previous()
    if entry is None and not path.exists():
        click.echo("not logged in anywhere")
        return
    if revoke and entry is not None:
        from floydd.cluster.state.apitokens import parse_api_token
        token_id, _ = parse_api_token(entry.token)
        try:
            entry.client(timeout=30).revoke_api_token(token_id)
            click.echo(f"token {token_id} revoked")
        except FloyddError as exc:
            fail(f"could not revoke the token: {exc.message}", "the login is kept; try again, or floyd logout "
                 "without --revoke and revoke it from a box (floyd token revoke ID)")
    path.unlink(missing_ok=True)
    click.echo(f"logged out{f' of {entry.address}' if entry else ''}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the API's answer as JSON.")
@handle_errors
def whoami(as_json: bool) -> None:
    """Who your commands run as, and where."""
    client = connect(autostart=False)
    who = client.whoami()
    if as_json:
        echo_json(who)
        return
    click.echo(f"{who['person']} on {client.where} (box {who['node']})")


@click.group()
def token() -> None:
    """Personal API tokens: what floyd login uses on a laptop (made on a box where you have an account)."""


def _ttl(text: str | None) -> float | None:
    if not text:
        return None
    number, unit = text[:-1] if text[-1:] in _DURATIONS else text, text[-1:] if text[-1:] in _DURATIONS else ""
    try:
        value = float(number) * _DURATIONS[unit]
    except ValueError:
        raise UserError(f"--ttl {text!r} is not a duration", hint="e.g. 3600, 12h, 30d") from None
    if value <= 0:
        raise UserError(f"--ttl {text!r} must be above zero", hint="leave it out for a token that does not expire")
    return value


@token.command(name="create")
@click.option("--label", default="", help="What it is for (e.g. 'laptop'), shown by floyd token list.")
@click.option("--ttl", default=None, help="How long it works (e.g. 12h, 30d) [default: until revoked].")
@click.option("--for", "person", default=None, metavar="PERSON", help="An admin: make it for someone else.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's answer as JSON (the token included).")
@handle_errors
def token_create(label: str, ttl: str | None, person: str | None, as_json: bool) -> None:
    """Print a new personal token (shown once: keep it like a password)."""
    client = connect()
    answer = client.create_api_token(label=label, ttl=_ttl(ttl), person=person)
    if as_json:
        echo_json(answer)
        return
    click.echo(answer["token"])
    where = client.whoami().get("api") or "HOST"
    click.echo(f"token {answer['id']} for {answer['person']}; on your laptop: floyd login {where} "
               "(it asks for this token). floyd token revoke ID stops it.", err=True)


@token.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the API's answer as JSON.")
@STALE
@handle_errors
def token_list(as_json: bool, stale: bool) -> None:
    """Your personal tokens (an admin: everyone's); never their secrets."""
    import time
    tokens = connect().api_tokens(stale=stale)
    if as_json:
        echo_json(tokens)
        return
    if not tokens:
        click.echo("no personal tokens (floyd token create makes one)")
        return

    def when(ts):
        return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))
    print_table(["ID", "PERSON", "STATE", "LABEL", "MADE", "EXPIRES"],
                [[t["id"], t["person"], t["state"], t.get("label") or "-", when(t["created"]), when(t.get("expires"))]
                 for t in tokens])


@token.command(name="revoke")
@click.argument("token_id", metavar="ID")
@handle_errors
def token_revoke(token_id: str) -> None:
    """Stop token ID working, on every box at once."""
    record = connect().revoke_api_token(token_id.split(".")[1] if token_id.startswith("FLP1.") else token_id)
    click.echo(f"token {record['id']} of {record['person']} revoked")
