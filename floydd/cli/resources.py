"""What a job asks of each box, as ``floyd run`` and ``floyd restart`` read it.

FloydHub's ``--gpu`` and ``--cpu`` stay what they were, and take a number too::

    --gpu           one GPU                 --cpu           CPU only (the default without --gpu)
    --gpu 2         two GPUs on each box    --cpu 4         4 cores set aside on each box
    --memory 16G    16 GiB set aside on each box (K, M, G, T: powers of 1024)

``--cpu N`` goes with or without ``--gpu`` (``--gpu 2 --cpu 8``); ``--cpu`` alone with
``--gpu`` is refused (it says "no GPU"). Without ``--cpu N`` or ``--memory`` the daemon that
takes the job fills in its ``job_cpus`` (1) and ``job_memory`` (0: none) from its config. A
box starts a job only while the jobs it runs leave it the cores and memory asked; the rest
queue (``floyd status`` says why). A count is read as the flag's value only when it is a
number, so a command that is itself a number goes after ``--``.
"""

from __future__ import annotations

import re

import click

from floydd.errors import InvalidSpec
from floydd.model import Resources, check_cpus, parse_size

__all__ = ["OptionalCounts", "CPU_HELP", "MEMORY_HELP", "resource_fields"]

_NUMBER = re.compile(r"\d+(\.\d+)?|\.\d+")
_ALONE = "alone"
CPU_HELP = ("Alone: run on CPU only (the default without --gpu). With N: set N cores aside on each box "
            "(e.g. 4 or 0.5), with or without --gpu; default: the daemon's job_cpus (1). PyTorch and NumPy "
            "in the job use that many threads (OMP_NUM_THREADS; --param OMP_NUM_THREADS=K to choose).")
MEMORY_HELP = ("Set SIZE of memory aside on each box (e.g. 16G, 512M); the job waits for a box that has it. "
               "Default: the daemon's job_memory (0: none).")


class OptionalCounts(click.Command):
    """``--gpu`` alone means one GPU and ``--cpu`` alone CPU only; followed by a number
    (``--gpu 2``, ``--cpu 0.5``, or ``--gpu=2``) they ask for that many."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        fixed = []
        for i, arg in enumerate(args):
            if arg == "--":
                fixed.extend(args[i:])
                break
            alone = i + 1 >= len(args) or not _NUMBER.fullmatch(args[i + 1])
            if arg == "--gpu" and (alone or not args[i + 1].isdigit()):
                arg = "--gpu=1"
            elif arg == "--cpu" and alone:
                arg = f"--cpu={_ALONE}"
            fixed.append(arg)
        return super().parse_args(ctx, fixed)


def resource_fields(gpu: int | None, cpu: str | None, memory: str | None, nodes: int | None,
                    *, restart: bool = False) -> dict:
    """The submission's resource fields from the flags (only those given when ``restart``),
    checked here so a typo costs no upload."""
    if gpu is not None and gpu < 1:
        raise InvalidSpec(f"--gpu {gpu}: ask for at least one GPU", hint="or use --cpu")
    fields: dict = {}
    if cpu == _ALONE:
        if gpu is not None:
            raise InvalidSpec("--gpu and --cpu (alone: CPU only) exclude each other",
                              hint="pick one, or give --cpu a number of cores to go with the GPUs: --gpu 2 --cpu 8")
        fields["gpus"] = 0
    elif cpu is not None:
        try:
            fields["cpus"] = check_cpus(float(cpu))
        except ValueError:
            raise InvalidSpec(f"--cpu {cpu!r:.40} is not a number of cores", hint="e.g. --cpu 4") from None
    if gpu is not None:
        fields["gpus"] = gpu
    elif not restart:
        fields.setdefault("gpus", 0)
    if memory is not None:
        fields["memory"] = parse_size(memory)
    if nodes is not None:
        fields["nodes"] = nodes
    Resources(gpu_count=fields.get("gpus", 0), nodes=fields.get("nodes", 1), cpus=fields.get("cpus", 0),
              memory=fields.get("memory", 0))
    return fields
