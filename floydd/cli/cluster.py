"""Operator verbs for the cluster: ``floydd init``, ``join``, ``members``, ``drain``,
``leave``, ``remove``, ``recover``, ``rotate-store-key`` (join tokens: :mod:`floydd.cli.tokens`)."""

from __future__ import annotations

import asyncio
import time

import click

from floydd.cli.common import (box_client, box_config, echo_json, fail, format_when, handle_errors, parse_ttl,
                               state_option)
from floydd.errors import Conflict, UserError
from floydd.security.owned_dirs import claim_state_dir
from floydd.present import clock_column, skew_warnings

__all__ = ["init", "join", "members", "drain", "leave", "remove", "recover", "rotate_store_key"]


def _refuse_if_running(config, what: str) -> None:
    if box_client(config).ping():
        raise Conflict(f"floydd is running on {config.state_dir}", hint=f"stop it first (floydd stop), then {what}")


def _network_options(fn):
    fn = click.option("--advertise", default=None, metavar="HOST:PORT",
                      help="Address peers reach this node at (default: its first LAN address).")(fn)
    fn = click.option("--listen", default="0.0.0.0:7654", show_default=True, metavar="HOST:PORT",
                      help="Where the node-to-node mTLS listener binds.")(fn)
    fn = click.option("--seed", "seeds", multiple=True, metavar="HOST:PORT",
                      help="A peer to contact when multicast does not reach it. Repeatable.")(fn)
    fn = click.option("--api-listen", default="", metavar="HOST:PORT|off",
                      help="Where people's floyd reaches this box over TLS (floyd login) "
                           "[default: the --listen host, port 7655; off: nowhere].")(fn)
    return fn


def _api_listen(text: str) -> str:
    from floydd.daemon.cluster_files import DEFAULT_API_PORT, split_address
    if text in ("", "off"):
        return text
    split_address(text, DEFAULT_API_PORT)      # refused now, not at the next start
    return text


@click.command()
@state_option
@click.option("--name", "cluster_name", default="floydd", show_default=True, help="Cluster name.")
@_network_options
@handle_errors
def init(state_dir, cluster_name, listen, advertise, seeds, api_listen) -> None:
    """Make this box the first node of a new cluster (CA, certificate, raft log)."""
    from floydd.daemon.cluster_files import ClusterSettings, api_address, guess_address, split_address, write_settings
    from floydd.security.identity import init_cluster
    config = box_config(state_dir)
    api_listen = _api_listen(api_listen)
    _refuse_if_running(config, "run floydd init again")
    if (config.state_dir / "cluster.json").exists() or (config.state_dir / "tls" / "node.crt").exists():
        raise Conflict(f"{config.state_dir} already belongs to a cluster",
                       hint="floydd members shows it; floydd recover rebuilds one from this node")
    _host, port = split_address(listen)
    advertise = advertise or f"{guess_address()}:{port}"
    adv_host, _ = split_address(advertise)
    claim_state_dir(config.state_dir)      # ours, 0700; one another user made first is refused
    ca, identity = init_cluster(config.state_dir / "ca", config.state_dir / "tls", cluster_name, [adv_host],
                                validity=config.cert_validity)
    settings = ClusterSettings(name=cluster_name, listen=listen, advertise=advertise, seeds=list(seeds),
                               pending="bootstrap", admin=_me(), api_listen=api_listen)
    write_settings(config.state_dir, settings)
    click.echo(f"cluster {cluster_name} created: CA {ca.short_fingerprint}, this node {identity.node_id}")
    click.echo(f"start the daemon (floydd start) to listen on {listen}, then `floydd token create` "
               "here and `floydd join TOKEN` on the next box")
    api = api_address(settings)
    if api is not None:
        click.echo(f"people elsewhere: floyd token create on a box, then on their laptop floyd login "
                   f"{adv_host}:{api[1]} --fingerprint {ca.short_fingerprint}")


@click.command()
@state_option
@click.argument("join_token", metavar="TOKEN")
@click.argument("address", required=False)
@_network_options
@handle_errors
def join(state_dir, join_token, address, listen, advertise, seeds, api_listen) -> None:
    """Join the cluster TOKEN was made for (at ADDRESS, or the address inside the token).

    The CA fingerprint in the token is checked before anything is sent. A box used alone
    keeps what it had: its jobs stay listed, and on the next start its store is re-sealed
    under the cluster's secret and its datasets enter the cluster's catalog.
    """
    from floydd.daemon.cluster_files import ClusterSettings, check_can_join, guess_address, leave_own_cluster, \
        split_address, write_settings
    from floydd.daemon.integrity import check_state
    from floydd.security.identity import NodeIdentity
    from floydd.cluster.net.join import join as do_join
    from floydd.security.tokens import parse_token
    config = box_config(state_dir)
    api_listen = _api_listen(api_listen)
    _refuse_if_running(config, "join")
    if (config.state_dir / "cluster.json").exists():
        raise Conflict(f"{config.state_dir} already belongs to a cluster",
                       hint="leave it first (floydd leave), or use another --state-dir")
    parsed = parse_token(join_token)
    target = address or parsed.address
    if not target:
        raise UserError("the token names no address", hint="give the address of a member: floydd join TOKEN HOST:PORT")
    _host, port = split_address(listen)
    advertise = advertise or f"{guess_address()}:{port}"
    adv_host, _ = split_address(advertise)
    claim_state_dir(config.state_dir)      # ours, 0700; one another user made first is refused
    check_state(config, doing="join")      # a damaged raft.db/records.db is not read as an empty one
    check_can_join(config.state_dir)
    identity = NodeIdentity.load_or_create(config.state_dir / "tls")
    result = asyncio.run(do_join(join_token, target, identity.node_id, identity.key, addresses=[adv_host]))
    leave_own_cluster(config.state_dir, config.records_path, config.store_dir, result.store_secret)
    identity.install(result.cert_pem, result.ca_pem, expect_ca_fingerprint=result.ca_fingerprint)
    write_settings(config.state_dir, ClusterSettings(name=result.cluster, listen=listen, advertise=advertise,
                                                     seeds=list(seeds), pending="join", join=[target],
                                                     api_listen=api_listen))
    click.echo(f"joined cluster {result.cluster} as node {identity.node_id}; start the daemon: floydd start")


@click.command()
@state_option
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def members(state_dir, as_json) -> None:
    """The cluster's nodes with their raft role (voter, learner), the leader, each one's health
    (the same word as ``floyd nodes``: healthy, suspect, stale, off...) and when its node
    certificate expires (renewed by itself well before)."""
    data = box_client(box_config(state_dir)).cluster()
    if as_json:
        echo_json(data)
        return
    for m in data["members"]:
        role = "leader" if m["leader"] else m["role"]
        here = "  (this node)" if m["id"] == data["node_id"] else ""
        expires = f"cert until {format_when(m['cert_expires'], '%Y-%m-%d %H:%M:%S')}" if m.get("cert_expires") else "cert -"
        click.echo(f"{m['id']}  {m['name'] or '-':<16} {role:<8} {m['address'] or '-':<22} {m['health']:<8} "
                   f"{m.get('version') or '-':<7} {expires}  {clock_column(m)}{here}")
    for line in skew_warnings(data["members"]):
        click.echo(line, err=True)
    for m in data["members"]:
        if m.get("store_why"):
            click.echo(f"  {m['name'] or m['id']}: {m['store_why']}; no new copies or jobs go there until it recovers")
    for m in data["members"]:
        if m.get("audit_differs"):
            click.echo(f"warning: {m['name'] or m['id']}'s audit chain differs from this box's: {m['audit_differs']}",
                       err=True)
    if not data["initialised"]:
        click.echo("this box is a cluster of one: `floydd init` lets other boxes join it, keeping its jobs and data")
    elif data.get("protocol", 1) < max((m.get("protocol") or 1 for m in data["members"]), default=1):
        click.echo("some boxes run an older release: what came with the newer one (accounts, personal tokens, "
                   "the audit log, imports) switches on once every box is upgraded")
    if data["initialised"] and data.get("ca_fingerprint"):
        click.echo(f"cluster CA sha256:{data['ca_fingerprint']}")
        if data.get("api"):
            click.echo(f"from a laptop: floyd login {data['api']} --fingerprint sha256:{data['ca_fingerprint'][:16]}")


@click.command()
@state_option
@click.option("--off", is_flag=True, help="Take jobs again (a restart of the daemon does too).")
@click.option("--wait", is_flag=True, help="Then wait until no job runs here any more.")
@click.option("--timeout", "wait_for", default="12h", show_default=True, help="How long --wait waits (30m, 12h, 2d).")
@handle_errors
def drain(state_dir, off, wait, wait_for) -> None:
    """No new jobs on this box (for an upgrade or repairs); the jobs running here carry on.

    Running jobs need not end first: they live through a restart of the daemon (a service
    unit's KillMode=process), and the new daemon picks them up. Upgrading a lab box by box:
    docs/operations.md, "Upgrades".
    """
    client = box_client(box_config(state_dir))
    answer = client.drain(not off)
    box = answer.get("name") or answer["node"]
    if off:
        click.echo(f"box {box} takes jobs again")
        return
    running = answer["running"]
    click.echo(f"box {box} drained: no new jobs are placed here; "
               + (f"{len(running)} still run ({', '.join(running[:5])}{' ...' if len(running) > 5 else ''}): they "
                  "carry on through a daemon restart" if running else "nothing runs here")
               + "; floydd drain --off undoes it")
    if not wait or not running:
        return
    deadline = time.monotonic() + parse_ttl(wait_for)
    while client.info()["running"]:
        if time.monotonic() > deadline:
            fail(f"jobs still run here after {wait_for}", "they carry on; upgrade and restart floydd anyway, "
                 "or wait longer (--timeout)")
        time.sleep(2)
    click.echo("no job runs here any more")


@click.command()
@state_option
@click.option("-y", "--yes", is_flag=True, help="Do not ask.")
@handle_errors
def leave(state_dir, yes) -> None:
    """Leave the cluster for good (running jobs here keep running)."""
    if not yes:
        click.confirm("leave the cluster for good? this node's certificate will be refused afterwards", abort=True)
    answer = box_client(box_config(state_dir)).leave()
    click.echo(f"node {answer['left']} left the cluster")


@click.command()
@state_option
@click.argument("node_id", metavar="NODE")
@click.option("-y", "--yes", is_flag=True, help="Do not ask.")
@handle_errors
def remove(state_dir, node_id, yes) -> None:
    """Take NODE (its id or name, from floydd members) out of the cluster for good and revoke
    its certificate: every box refuses it from then on (a stolen or retired box). A join that
    was redeemed but whose box has not started yet (its id: floydd token list, USED BY) is
    cancelled the same way. Admins only."""
    if not yes:
        click.confirm(f"remove node {node_id} for good? it must join again with a new token", abort=True)
    answer = box_client(box_config(state_dir)).remove_node(node_id)
    if answer.get("cancelled_join"):
        click.echo(f"the join of node {answer['removed']} is cancelled: its certificate is refused by every box and "
                   "it can never become a member with it")
    else:
        click.echo(f"node {answer['removed']} removed; its certificate is refused by every box")
    if answer.get("store_epoch") is not None:
        click.echo(f"store key rotated: epoch {answer['store_epoch']}, which {answer['removed']} never receives; "
                   "new data is sealed under it and older data is re-sealed in the background "
                   "(floydd rotate-store-key --show follows it)")
    elif answer.get("store_key"):
        click.echo(f"store key {answer['store_key']}", err=True)
    click.echo("to protect data it could read before, see docs/operations.md: a stolen box")


@click.command(name="rotate-store-key")
@state_option
@click.option("--show", is_flag=True, help="Only show the epochs and this box's re-seal.")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def rotate_store_key(state_dir, show, as_json) -> None:
    """Start a new store key epoch: new data is sealed under a new key that only the boxes that
    are members now receive, and older data is re-sealed under it in the background on every box
    (store_reseal_rate MB/s) while the daemons serve. floydd remove does it too. Object ids
    stay: a removed box can still recognise content it had, not open what is sealed anew.
    Admins only."""
    client = box_client(box_config(state_dir))
    answer = client.store_key() if show else client.rotate_store_key()
    if as_json:
        echo_json(answer)
        return
    here = answer if show else answer["here"]
    if not show:
        click.echo(f"store key epoch {answer['epoch']} started on {answer['made_on']} (fingerprint "
                   f"{answer['fingerprint']}): new data is sealed under it; each member fetches it and re-seals "
                   "its older objects in the background")
    click.echo(f"cluster epoch {here['cluster_epoch']}; this box seals under epoch {here['seal_epoch']}, holds "
               f"{', '.join(map(str, here['held_epochs']))}")
    if here["cluster_epoch"] > here["seal_epoch"]:
        state = "waiting for the newest epoch's key from a member"
    elif here["resealed"]:
        took = f" in {here['reseal_seconds']:.1f} s" if here.get("reseal_seconds") is not None else ""
        state = f"every object here is under epoch {here['seal_epoch']}{took}"
    else:
        state = f"re-sealing: {here['resealed_objects']} objects ({here['resealed_bytes'] / 1e6:,.1f} MB) so far"
    click.echo(f"re-seal  {state}")


def _me() -> str:
    """The user running this command (recorded as the admin by floydd init)."""
    import os
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


@click.command()
@state_option
@click.option("--yes-i-know", is_flag=True, help="Confirm that the other voters are gone for good.")
@handle_errors
def recover(state_dir, yes_i_know) -> None:
    """Turn this survivor into a new single-node cluster (when quorum is lost for good)."""
    from floydd.daemon.cluster_files import read_settings, write_settings
    config = box_config(state_dir)
    _refuse_if_running(config, "recover")
    settings = read_settings(config.state_dir)
    if settings is None:
        raise Conflict("this node is not part of a cluster", hint="nothing to recover")
    if not yes_i_know:
        raise UserError("recover makes this node a NEW single-node cluster; the other nodes must join it again",
                        hint="run again with --yes-i-know if the other voters are gone for good")
    from floydd.daemon.integrity import check_state
    check_state(config, doing="recover")        # its log is what the new cluster is made from
    settings.pending = "recover"
    write_settings(config.state_dir, settings)
    click.echo("WARNING: on its next start this node forms a new single-node cluster from its own log; "
               "make new tokens for the others. Start it now: floydd start", err=True)
