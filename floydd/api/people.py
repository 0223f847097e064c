"""``/v1/people``: the lab's people and their roles (``floydd user``).

Anyone who reaches the API may list them; adding, removing, changing a role or the uids
that act as a person are an admin's, checked where every box checks them: on apply
(:mod:`floydd.cluster.state.authz`), for the person :func:`~floydd.api.request.acting_person`
found at this edge. Boxes may be named by name or id (``--uid BOX:UID``, ``--box BOX``).

Where a person is signed in (cluster level 3, :mod:`floydd.cluster.state.signin`): ``POST
/v1/people`` takes ``boxes`` (where their login name acts as them; left out: this box, which
the cluster fills in on apply) or ``every_box``; ``POST /v1/people/{name}/boxes`` lists or
unlists one box (``{node, on}``) or every box (``{every_box: true, on}``).
"""

from __future__ import annotations

from aiohttp import web

from floydd.api import keys
from floydd.api.params import query_stale
from floydd.api.request import acting_person, body, reply
from floydd.cluster.state.people import ROLES, check_person_name, listing
from floydd.errors import NotFound, UserError

routes = web.RouteTableDef()

_NAME = "/v1/people/{name}"


@routes.get("/v1/people")
async def list_people(request: web.Request) -> web.Response:
    """Every person, as the cluster has them (an account added on another box a moment ago
    too); ``stale=1``: as this box holds them now."""
    cluster = request.app[keys.CLUSTER]
    return reply(await cluster.read(lambda s: listing(s.people), stale=query_stale(request.query)))


@routes.post("/v1/people")
async def add(request: web.Request) -> web.Response:
    data = await body(request)
    name = check_person_name(data.get("name"))
    role = _role(data.get("role", "user"))
    uids = _uids(request, data.get("uids") or {})
    cmd = {"op": "person.add", "name": name, "role": role, "user": acting_person(request)}
    if uids:
        cmd["uids"] = uids
    if data.get("boxes") is not None:           # else this box (on apply, from cluster level 3)
        if not isinstance(data["boxes"], list):
            raise UserError("boxes is a list of boxes (names or ids)", hint="floydd user add NAME --box BOX")
        cmd["boxes"] = sorted({_node(request, box) for box in data["boxes"]})
    if data.get("every_box") is not None:
        cmd["every_box"] = _flag(data["every_box"], "every_box")
    return reply(await request.app[keys.CLUSTER].change_account(cmd), status=201)


@routes.post(_NAME + "/role")
async def set_role(request: web.Request) -> web.Response:
    role = _role((await body(request)).get("role"))
    cmd = {"op": "person.role", "name": request.match_info["name"], "role": role, "user": acting_person(request)}
    return reply(await request.app[keys.CLUSTER].change_account(cmd))


@routes.post(_NAME + "/uids")
async def map_uids(request: web.Request) -> web.Response:
    """The uids acting as the person on one box (``[]``: their login name there again)."""
    data = await body(request)
    uids = data.get("uids")
    if not isinstance(uids, list):
        raise UserError("uids is a list of uids", hint="floydd user map NAME BOX [UID ...]")
    node = _node(request, data.get("node"))
    cmd = {"op": "person.map", "name": request.match_info["name"], "node": node, "uids": uids,
           "user": acting_person(request)}
    return reply(await request.app[keys.CLUSTER].change_account(cmd))


@routes.post(_NAME + "/boxes")
async def sign_in_boxes(request: web.Request) -> web.Response:
    """Where the person's login name acts as them: list (``on``) or unlist one box (``node``,
    unlisting also drops the uids mapped there) or every box (``every_box``)."""
    data = await body(request)
    on = _flag(data.get("on", True), "on")
    cmd = {"op": "person.boxes", "name": request.match_info["name"], "on": on, "user": acting_person(request)}
    if _flag(data.get("every_box", False), "every_box"):
        cmd["every_box"] = True
    else:
        cmd["node"] = _node(request, data.get("node"))
    return reply(await request.app[keys.CLUSTER].change_account(cmd))


@routes.delete(_NAME)
async def remove(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    await request.app[keys.CLUSTER].change_account({"op": "person.remove", "name": name,
                                                   "user": acting_person(request)})
    return reply({"removed": name})


def _role(role) -> str:
    if role not in ROLES:
        raise UserError(f"role {str(role)[:40]!r} is not admin or user", code="invalid_spec",
                        hint="floydd user role NAME admin|user")
    return role


def _flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{what} is true or false", code="invalid_spec")
    return value


def _uids(request: web.Request, raw) -> dict[str, list[int]]:
    if not isinstance(raw, dict):
        raise UserError("uids maps boxes to lists of uids", hint="floydd user add NAME --uid BOX:UID")
    out: dict[str, list[int]] = {}
    for box, uids in raw.items():
        if not isinstance(uids, list) or not all(type(u) is int and u >= 0 for u in uids):
            raise UserError(f"uids on {box}: a list of uids (non-negative integers)",
                            hint="floydd user add NAME --uid BOX:UID")
        out.setdefault(_node(request, box), []).extend(uids)
    return out


def _node(request: web.Request, box) -> str:
    """A box named by its id or its name -> its node id."""
    cluster = request.app[keys.CLUSTER]
    nodes = cluster.state.nodes
    if not isinstance(box, str) or not box:
        raise UserError("name a box", hint="floydd members lists the boxes (name or id)")
    if box in nodes or box == cluster.node_id:
        return box
    named = sorted(nid for nid, n in nodes.items() if n.get("name") == box)
    if len(named) == 1:
        return named[0]
    raise NotFound(f"no box {box!r:.80}" if not named else f"{len(named)} boxes are named {box}: give its id",
                   code="node_not_found", hint="floydd members lists the boxes (name or id)")
