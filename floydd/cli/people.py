"""``floydd user``: the lab's people and their roles (:mod:`floydd.cluster.people`).

``add``, ``role``, ``remove`` and ``map`` are an admin's (a lab of one's user is its admin: its
first ``add`` records them as such); ``list`` is anyone's."""

from __future__ import annotations

import re

import click

from floydd.cli.common import STALE, echo_json, handle_errors, pass_where
from floydd.cli.table import print_table
from floydd.errors import InvalidSpec

__all__ = ["make_user", "parse_uid"]

_UID = re.compile(r"(?P<box>[^:]+):(?P<uid>\d{1,10})")


def parse_uid(text: str) -> tuple[str, int]:
    """``BOX:UID`` (a box's name or id, a uid) -> (box, uid)."""
    m = _UID.fullmatch(text.strip())
    if not m or int(m["uid"]) >= 2 ** 32:
        raise InvalidSpec(f"--uid {text!r} is not BOX:UID", hint="e.g. --uid gpu-box-2:1003 (floydd members names the boxes)")
    return m["box"], int(m["uid"])


def make_user(_config_options, _client) -> click.Group:
    """The ``floydd user`` group, with floydd's options for finding the daemon handed in by
    :mod:`floydd.cli.floydd` (as ``floydd audit``)."""

    @click.group()
    @_config_options
    @click.pass_context
    def user(ctx, state_dir, config_file, system) -> None:
        """People of the lab: accounts with a role (admin or user), and their uids per box."""
        ctx.obj = (state_dir, config_file, system)

    @user.command("add")
    @click.argument("name")
    @click.option("--admin", is_flag=True, help="Make them an admin (default: a user).")
    @click.option("--uid", "uids", multiple=True, metavar="BOX:UID",
                  help="A local uid on a box that acts as them (default: their login name on every box). Repeatable.")
    @pass_where(_config_options)
    @handle_errors
    def add(where, name, admin, uids) -> None:
        """Give NAME an account in this lab."""
        mapped: dict[str, list[int]] = {}
        for text in uids:
            box, uid = parse_uid(text)
            mapped.setdefault(box, []).append(uid)
        client, _ = _client(*where)
        person = client.add_person(name, "admin" if admin else "user", mapped)
        click.echo(f"{person['name']} added as {'an admin' if person['role'] == 'admin' else 'a user'}"
                   + ("" if uids else "; their login name on each box acts as them"))

    @user.command("list")
    @click.option("--json", "as_json", is_flag=True, help="Print exactly what the daemon returned.")
    @STALE
    @pass_where(_config_options)
    @handle_errors
    def list_people(where, as_json, stale) -> None:
        """The lab's people, their roles and mapped uids."""
        client, _ = _client(*where)
        people = client.people(stale=stale)
        if as_json:
            echo_json(people)
            return
        if not people:
            click.echo("no accounts: a lab of one, whose user is its admin (floydd user add NAME adds people)")
            return
        names = {n["id"]: n.get("name") or n["id"] for n in client.nodes()}
        print_table(["NAME", "ROLE", "UIDS"],
                    [[p["name"], p["role"], ", ".join(f"{names.get(box, box[:12])}:{','.join(map(str, uids))}"
                                                       for box, uids in p["uids"].items()) or "login name"]
                     for p in people])

    @user.command("role")
    @click.argument("name")
    @click.argument("role", type=click.Choice(["admin", "user"]))
    @pass_where(_config_options)
    @handle_errors
    def role(where, name, role) -> None:
        """Make NAME an admin or a user (the last admin stays one)."""
        client, _ = _client(*where)
        person = client.set_role(name, role)
        click.echo(f"{person['name']} is now {'an admin' if person['role'] == 'admin' else 'a user'}")

    @user.command("map")
    @click.argument("name")
    @click.argument("box")
    @click.argument("uids", nargs=-1, type=click.IntRange(0, 2 ** 32 - 1))
    @pass_where(_config_options)
    @handle_errors
    def map_uids(where, name, box, uids) -> None:
        """The uids on BOX that act as NAME (none: their login name there again)."""
        client, _ = _client(*where)
        client.map_uids(name, box, list(uids))
        click.echo(f"on {box}, {'uid ' + ', '.join(map(str, uids)) if uids else 'the login name ' + name} "
                   f"acts as {name}")

    @user.command("remove")
    @click.argument("name")
    @pass_where(_config_options)
    @handle_errors
    def remove(where, name) -> None:
        """Remove NAME's account (their jobs and datasets keep their name)."""
        client, _ = _client(*where)
        client.remove_person(name)
        click.echo(f"{name} removed; their jobs and datasets keep their name (an admin may act on them)")

    return user
