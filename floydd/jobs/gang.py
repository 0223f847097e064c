"""Gang jobs: one job over several boxes, run by ``torchrun`` with a committed rendezvous.

``floyd run --nodes 2 --gpu 4 "python train.py --lr 0.1"`` asks for two boxes with four free
GPUs each. The leader places the parts together or not at all (:func:`floydd.scheduler.place`);
the box given rank 0 picks a free port and commits it as the job's ``endpoint``; every part
then starts its command under torchrun's static rendezvous (rank 0 hosts the c10d store)::

    python -m torch.distributed.run --nnodes=2 --node-rank=R --nproc-per-node=4 \\
        --master-addr=RANK0_ADDRESS --master-port=PORT train.py --lr 0.1

so the user's script is the same one they run with ``torchrun`` on one box: one process per
GPU (one per box on CPUs, with gloo), ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set by torchrun.
Gloo and NCCL find their own address from the host name, which on many machines (Debian's
``127.0.1.1`` line in /etc/hosts, containers, network namespaces) resolves to an address the
other boxes cannot reach; each part is therefore told the interface that carries its box's
cluster address (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``, unless the job sets them).
A command may start with ``python SCRIPT``, ``python -m MODULE`` or ``torchrun [OPTIONS]``;
floydd owns the rendezvous options, so a command that sets them is refused at submission.

A job on one box whose command is ``torchrun ...`` (or ``python -m torch.distributed.run``)
and sets no rendezvous of its own gets ``--standalone`` (a rendezvous on a free port of its
own, rather than torchrun's default 127.0.0.1:29500 shared by every job on the box) and,
unless given, ``--nproc-per-node`` = its GPU count, so ``--gpu 4 "torchrun train.py"`` runs
four processes (:func:`single_box_command`). Any other command is left exactly as written.
"""

from __future__ import annotations

import ipaddress
import shlex
import socket

from floydd.model.gangcommand import NPROC, OWNED, as_torchrun, check_gang_command, split_command, torchrun_options

__all__ = ["check_gang_command", "torchrun_command", "single_box_command", "gang_env", "free_port",
           "interface_for"]


def torchrun_command(command: str, *, nnodes: int, rank: int, nproc: int, host: str, port: int) -> str:
    """``command`` (checked by :func:`check_gang_command`) as part ``rank`` of the gang."""
    words = split_command(command)
    ours = [f"--nnodes={nnodes}", f"--node-rank={rank}", f"--master-addr={host}", f"--master-port={port}"]
    head, rest = as_torchrun(words) or ([words[0], "-m", "torch.distributed.run"], words[1:])
    if not set(torchrun_options(rest)) & NPROC:
        ours.append(f"--nproc-per-node={nproc}")
    return shlex.join(head + ours + rest)


def single_box_command(command: str, gpus: int) -> str | None:
    """A one-box torchrun command with ``--standalone`` and ``--nproc-per-node`` filled in,
    or None when ``command`` is not torchrun or already chooses its rendezvous."""
    try:
        torchrun = as_torchrun(shlex.split(command))
    except ValueError:
        return None
    if torchrun is None:
        return None
    head, rest = torchrun
    options = set(torchrun_options(rest))
    if options & OWNED:
        return None
    ours = ["--standalone"] + ([] if options & NPROC else [f"--nproc-per-node={max(1, gpus)}"])
    return shlex.join(head + ours + rest)


def gang_env(*, nnodes: int, rank: int, host: str, port: int, ifname: str | None = None) -> dict[str, str]:
    """What a part's job sees besides torchrun's own variables: where it is in the gang, and
    (``ifname``) the interface gloo and NCCL must use to reach the other boxes."""
    env = {"FLOYD_NNODES": str(nnodes), "FLOYD_NODE_RANK": str(rank), "MASTER_ADDR": host, "MASTER_PORT": str(port)}
    if ifname:
        env.update(GLOO_SOCKET_IFNAME=ifname, NCCL_SOCKET_IFNAME=ifname)
    return env


def interface_for(address: str) -> str | None:
    """The name of this box's network interface holding ``address`` (its cluster address),
    or None (a host name, or an address behind NAT: then gloo and NCCL choose)."""
    import psutil               # here: floyd's CLI imports this module and starts faster without it
    try:
        wanted = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            try:
                if ipaddress.ip_address(addr.address.split("%")[0]) == wanted:
                    return name
            except ValueError:
                continue
    return None


def free_port() -> int:
    """A TCP port free on this box right now (rank 0's c10d store binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]
