"""What a gang job's command may be: ``python SCRIPT``, ``python -m MODULE`` or ``torchrun
[OPTIONS]`` without the rendezvous options floydd owns (:mod:`floydd.jobs.gang` runs it).

Pure, and here rather than in ``jobs/`` so that ``floyd run`` refuses such a command before
it uploads anything, without loading the daemon's side.
"""

from __future__ import annotations

import os
import shlex

from floydd.errors import InvalidSpec

__all__ = ["check_gang_command"]
# split_command, as_torchrun, torchrun_options, OWNED and NPROC: for floydd.jobs.gang, which
# writes the torchrun command line

OWNED = {"--nnodes", "--node-rank", "--node_rank", "--master-addr", "--master_addr", "--master-port",
          "--master_port", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
          "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf", "--standalone"}
NPROC = {"--nproc-per-node", "--nproc_per_node"}
_HINT = 'write e.g. --nodes 2 "python train.py --lr 0.1": floydd runs it under torchrun on every box'


def split_command(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise InvalidSpec(f"the command cannot be split into words: {exc}", hint=_HINT) from None
    if not words:
        raise InvalidSpec("the command is empty", hint=_HINT)
    return words


def _is_python(word: str) -> bool:
    name = os.path.basename(word)
    return name in ("python", "python3") or (name.startswith("python3.") and name[8:].isdigit())


def torchrun_options(words: list[str]) -> list[str]:
    """The options given to torchrun itself (before the script or ``-m``)."""
    out = []
    for word in words:
        if word in ("-m", "--module", "--no-python", "--no_python") or not word.startswith("-"):
            break
        out.append(word.split("=", 1)[0])
    return out


def as_torchrun(words: list[str]) -> tuple[list[str], list[str]] | None:
    """(``torchrun`` or ``python -m torch.distributed.run``, what follows) when ``words``
    already run torchrun; None otherwise."""
    if words[:1] == ["torchrun"]:
        return words[:1], words[1:]
    if len(words) >= 3 and _is_python(words[0]) and words[1:3] == ["-m", "torch.distributed.run"]:
        return words[:3], words[3:]
    return None


def check_gang_command(command: str) -> None:
    """Refuse (InvalidSpec, with what to write instead) a command floydd cannot put under torchrun."""
    words = split_command(command)
    head = words[0]
    torchrun = as_torchrun(words)
    if torchrun is not None:
        rest = torchrun[1]
        owned = sorted(set(torchrun_options(rest)) & OWNED)
        if owned:
            raise InvalidSpec(f"a job over several boxes gets its rendezvous from floydd; leave out {', '.join(owned)}",
                              hint=_HINT)
        if not any(not w.startswith("-") for w in rest):
            raise InvalidSpec("torchrun needs a script to run", hint=_HINT)
        return
    if not _is_python(head):
        raise InvalidSpec(f"a job over several boxes runs its command under torchrun, so it must start with "
                          f"python or torchrun, not {head!r}", hint=_HINT)
    if len(words) < 2:
        raise InvalidSpec("python needs a script to run", hint=_HINT)
    if words[1].startswith("-") and words[1] != "-m":
        raise InvalidSpec(f"python options such as {words[1]} do not pass through torchrun",
                          hint="write python SCRIPT ... or python -m MODULE ...; set PYTHONUNBUFFERED etc. "
                               "with --param")
    if words[1] == "-m" and len(words) < 3:
        raise InvalidSpec("python -m needs a module", hint=_HINT)
