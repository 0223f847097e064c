"""``floydd user``: the lab's people and their roles (:mod:`floydd.cluster.state.people`).

``add``, ``role``, ``remove``, ``map`` and ``unmap`` are an admin's (a lab of one's user is its
admin: its first ``add`` records them as such); ``list`` is anyone's.

A box acts only for the people signed in on it (from floydd 0.3, :mod:`floydd.cluster.state.signin`):
``add`` signs a person in on the box it runs through (``--box``, ``--every-box`` choose),
``map NAME BOX`` on another one (their login name there, or the uids given), ``unmap`` signs
them out of one."""

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
                  help="A local uid on a box that acts as them (there, instead of their login name). Repeatable.")
    @click.option("--box", "boxes", multiple=True, metavar="BOX",
                  help="A box where their login name acts as them (default: the box this runs through). Repeatable.")
    @click.option("--every-box", is_flag=True,
                  help="Their login name acts as them on every box, also boxes that join later: widens what one "
                       "stolen box can do in their name.")
    @pass_where(_config_options)
    @handle_errors
    def add(where, name, admin, uids, boxes, every_box) -> None:
        """Give NAME an account in this lab, signed in on the boxes it may use.

        A box acts only for the people signed in on it: their login name there (the box this
        runs through, unless --box or --every-box say otherwise) or a uid mapped with --uid.
        Add boxes later with floydd user map NAME BOX."""
        mapped: dict[str, list[int]] = {}
        for text in uids:
            box, uid = parse_uid(text)
            mapped.setdefault(box, []).append(uid)
        client, _ = _client(*where)
        person = client.add_person(name, "admin" if admin else "user", mapped,
                                   boxes=list(boxes) if boxes else None, every_box=every_box)
        role = "an admin" if person["role"] == "admin" else "a user"
        if "boxes" not in person:       # a cluster below level 3: the login name acts everywhere
            click.echo(f"{person['name']} added as {role}" + ("" if uids else "; their login name on each box acts as them"))
            return
        click.echo(f"{person['name']} added as {role}; {_where_acting(person, _names(client))}")
        if not person.get("every_box"):
            click.echo(f"other boxes act for {person['name']} once an admin runs floydd user map {person['name']} BOX "
                       f"(or {person['name']} uses a personal token through them)")

    @user.command("list")
    @click.option("--json", "as_json", is_flag=True, help="Print exactly what the daemon returned.")
    @STALE
    @pass_where(_config_options)
    @handle_errors
    def list_people(where, as_json, stale) -> None:
        """The lab's people, their roles, mapped uids and the boxes where their login name acts."""
        client, _ = _client(*where)
        people = client.people(stale=stale)
        if as_json:
            echo_json(people)
            return
        if not people:
            click.echo("no accounts: a lab of one, whose user is its admin (floydd user add NAME adds people)")
            return
        names = _names(client)
        print_table(["NAME", "ROLE", "UIDS", "LOGIN ON"],
                    [[p["name"], p["role"], ", ".join(f"{names.get(box, box[:12])}:{','.join(map(str, uids))}"
                                                       for box, uids in p["uids"].items()) or "-",
                      _login_on(p, names)] for p in people])

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
    @click.argument("box", required=False)
    @click.argument("uids", nargs=-1, type=click.IntRange(0, 2 ** 32 - 1))
    @click.option("--every-box", is_flag=True,
                  help="Their login name acts as them on every box (widens what one stolen box can do as them).")
    @pass_where(_config_options)
    @handle_errors
    def map_uids(where, name, box, uids, every_box) -> None:
        """Sign NAME in on BOX: the UIDS there act as NAME (none: NAME's login name there)."""
        client, _ = _client(*where)
        if every_box:
            if box or uids:
                raise InvalidSpec("--every-box names no box", hint=f"floydd user map {name} --every-box")
            client.sign_in_boxes(name, every_box=True)
            click.echo(f"{name}'s login name acts as them on every box (any box, also a stolen one, may act for {name}); "
                       f"undo with floydd user unmap {name} --every-box")
            return
        if not box:
            raise InvalidSpec("name a box (or --every-box)", hint=f"floydd user map {name} BOX [UID ...]")
        client.map_uids(name, box, list(uids))
        click.echo(f"on {box}, {'uid ' + ', '.join(map(str, uids)) if uids else 'the login name ' + name} "
                   f"acts as {name}")

    @user.command("unmap")
    @click.argument("name")
    @click.argument("box", required=False)
    @click.option("--every-box", is_flag=True, help="Undo --every-box (the boxes listed for them stay).")
    @pass_where(_config_options)
    @handle_errors
    def unmap(where, name, box, every_box) -> None:
        """Sign NAME out of BOX: neither their login name nor any uid acts as them there any more."""
        client, _ = _client(*where)
        if every_box == bool(box):
            raise InvalidSpec("name a box or --every-box", hint=f"floydd user unmap {name} BOX")
        person = client.sign_in_boxes(name, box, every_box=every_box, on=False)
        click.echo(f"{name} is signed out of {'every box not listed for them' if every_box else box}; "
                   f"{_where_acting(person, _names(client))}")

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


def _names(client) -> dict[str, str]:
    return {n["id"]: n.get("name") or n["id"] for n in client.nodes()}


def _login_on(person: dict, names: dict[str, str]) -> str:
    """Where a person's login name acts as them (boxes with uids mapped take those instead)."""
    if "boxes" not in person or person.get("every_box"):
        return "every box"
    boxes = [names.get(b, b[:12]) for b in person["boxes"] if b not in person["uids"]]
    return ", ".join(boxes) or "-"


def _where_acting(person: dict, names: dict[str, str]) -> str:
    """The sentence saying which boxes act for ``person``."""
    login = _login_on(person, names)
    mapped = [f"uid {','.join(map(str, u))} on {names.get(b, b[:12])}" for b, u in person["uids"].items()]
    said = ([] if login == "-" else [f"their login name acts as them on {login}"]) + mapped
    return "; ".join(said) if said else "no box acts for them (floydd user map NAME BOX signs them in)"
