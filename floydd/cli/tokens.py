"""``floydd token create|list|revoke``: the one-time join tokens that let a new box in."""

from __future__ import annotations

import click

from floydd.cli.common import box_client, box_config, echo_json, format_when, handle_errors, parse_ttl, state_option
from floydd.errors import UserError

__all__ = ["token"]


@click.group()
def token() -> None:
    """One-time join tokens for new nodes (made, listed and revoked on any voter)."""


@token.command(name="create")
@state_option
@click.option("--ttl", default="24h", show_default=True, help="How long the token works (e.g. 30m, 24h).")
@click.option("--sign-in", "sign_in", multiple=True, metavar="PERSON",
              help="A person signed in on the new box once it joins (their login name acts as them there). "
                   "Repeatable; default: you; 'none': nobody.")
@handle_errors
def token_create(state_dir, ttl, sign_in) -> None:
    """Print a one-time join token carrying the cluster CA's fingerprint.

    The new box acts for the people the token signs in (you, unless --sign-in says otherwise)
    and for nobody else until an admin runs floydd user map NAME BOX."""
    if "none" in sign_in and len(sign_in) > 1:
        raise UserError("--sign-in none means nobody: give it alone", hint="floydd token create --sign-in none")
    names = None if not sign_in else [] if sign_in == ("none",) else list(sign_in)
    answer = box_client(box_config(state_dir)).create_token(parse_ttl(ttl), sign_in=names)
    click.echo(answer["token"])
    click.echo(f"on the new box: floydd join {answer['token']}   (works once, for {ttl}; if this box is down, "
               "add the address of another voter: floydd join TOKEN HOST:PORT)", err=True)


@token.command(name="list")
@state_option
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@handle_errors
def token_list(state_dir, as_json) -> None:
    """The cluster's join tokens: id, who made it where, expiry, and which node used it (or revoked)."""
    tokens = box_client(box_config(state_dir)).tokens()
    if as_json:
        echo_json(tokens)
        return
    if not tokens:
        click.echo("no join tokens (floydd token create makes one)")
        return
    click.echo(f"{'ID':<16}  {'STATE':<8} {'MADE':<16} {'BY':<12} {'ON':<16} {'EXPIRES':<16} USED BY / REVOKED")
    for t in tokens:
        used = (f"node {t['used_by']} at {format_when(t['used'])}" + (" (join cancelled)" if t.get("revoked") else "")
                if t.get("used") is not None else
                f"revoked at {format_when(t['revoked'])} by {t.get('revoked_by') or '?'}"
                if t.get("revoked") is not None else "-")
        click.echo(f"{t['id']:<16}  {t['state']:<8} {format_when(t['created']):<16} {t['made_by'] or '?':<12} "
                   f"{t['made_on'] or '?':<16} {format_when(t['expires']):<16} {used}")


@token.command(name="revoke")
@state_option
@click.argument("token_id", metavar="ID")
@handle_errors
def token_revoke(state_dir, token_id) -> None:
    """Revoke join token ID (the third part of the token, as floydd token list shows it).

    A token already used by a box that is not a member yet (its daemon not started) cancels
    that join: the box can never become a member with it."""
    record = box_client(box_config(state_dir)).revoke_token(token_id)
    if record.get("cancelled_join"):
        click.echo(f"join token {record['id']} revoked; the join of node {record['cancelled_join']} it made is "
                   "cancelled: that box can never become a member with it")
        return
    click.echo(f"join token {record['id']} revoked: no voter accepts it any more")
