"""The torchrun command line a gang part runs, and what a gang's command may be."""

import shlex

import pytest

from floydd.errors import InvalidSpec
from floydd.jobs.gang import (check_gang_command, free_port, gang_env, interface_for, single_box_command,
                              torchrun_command)

ARGS = dict(nnodes=2, rank=1, nproc=4, host="10.0.0.5", port=29501)
RDZV = "--nnodes=2 --node-rank=1 --master-addr=10.0.0.5 --master-port=29501"


@pytest.mark.parametrize("command, expected", [
    ("python train.py --lr 0.1", f"python -m torch.distributed.run {RDZV} --nproc-per-node=4 train.py --lr 0.1"),
    ("python3 -m pkg.train --epochs 'two words'",
     f"python3 -m torch.distributed.run {RDZV} --nproc-per-node=4 -m pkg.train --epochs 'two words'"),
    ("torchrun train.py", f"torchrun {RDZV} --nproc-per-node=4 train.py"),
    ("torchrun --nproc-per-node 2 train.py", f"torchrun {RDZV} --nproc-per-node 2 train.py"),
    ("python -m torch.distributed.run --nproc_per_node=1 t.py",
     f"python -m torch.distributed.run {RDZV} --nproc_per_node=1 t.py"),
])
def test_the_command_runs_under_torchrun_with_the_committed_rendezvous(command, expected):
    check_gang_command(command)
    assert torchrun_command(command, **ARGS) == expected


def test_script_arguments_that_look_like_torchrun_options_are_the_scripts_own():
    check_gang_command("python train.py --nnodes 3")           # the script's flag, not torchrun's
    out = shlex.split(torchrun_command("python train.py --nnodes 3", **ARGS))
    assert out[-3:] == ["train.py", "--nnodes", "3"] and out.count("--nnodes=2") == 1


@pytest.mark.parametrize("command, says", [
    ("bash run.sh", "must start with python or torchrun"),
    ("cd src && python train.py", "must start with python or torchrun"),
    ("torchrun --nnodes 2 train.py", "leave out --nnodes"),
    ("torchrun --master_port=1234 --standalone train.py", "leave out --master_port, --standalone"),
    ("python -u train.py", "python options such as -u"),
    ("python", "needs a script"),
    ("python -m", "needs a module"),
    ("torchrun --nproc-per-node=2", "needs a script"),
    ("python 'unclosed", "cannot be split"),
])
def test_commands_floydd_cannot_put_under_torchrun_are_refused_with_what_to_write(command, says):
    with pytest.raises(InvalidSpec, match=says) as info:
        check_gang_command(command)
    assert info.value.hint


def test_the_part_knows_its_place_and_the_port_is_bindable():
    assert gang_env(nnodes=3, rank=2, host="h", port=7) == {"FLOYD_NNODES": "3", "FLOYD_NODE_RANK": "2",
                                                           "MASTER_ADDR": "h", "MASTER_PORT": "7"}
    import socket
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_gloo_and_nccl_are_pointed_at_the_interface_of_the_cluster_address():
    import psutil
    lo = next(name for name, addrs in psutil.net_if_addrs().items()
              if any(a.address == "127.0.0.1" for a in addrs))
    assert interface_for("127.0.0.1") == lo
    assert interface_for("203.0.113.9") is None            # not this box's (TEST-NET-3)
    assert interface_for("box-a.lab") is None               # a name: gloo and NCCL choose
    env = gang_env(nnodes=2, rank=0, host="h", port=1, ifname="eth1")
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert "GLOO_SOCKET_IFNAME" not in gang_env(nnodes=2, rank=0, host="h", port=1)


@pytest.mark.parametrize("command, gpus, expected", [
    ("torchrun train.py --lr 1", 4, "torchrun --standalone --nproc-per-node=4 train.py --lr 1"),
    ("torchrun --nproc_per_node 2 train.py", 4, "torchrun --standalone --nproc_per_node 2 train.py"),
    ("python -m torch.distributed.run t.py", 0, "python -m torch.distributed.run --standalone --nproc-per-node=1 t.py"),
    ("torchrun --master-port 29600 train.py", 2, None),           # the job chose its rendezvous
    ("torchrun --rdzv-backend=c10d --rdzv-endpoint=h:1 t.py", 2, None),
    ("python train.py", 2, None),                                  # not torchrun: as written
    ("bash -c 'torchrun x.py'", 2, None),
])
def test_a_one_box_torchrun_job_gets_its_own_port_and_one_process_per_gpu(command, gpus, expected):
    assert single_box_command(command, gpus) == expected
