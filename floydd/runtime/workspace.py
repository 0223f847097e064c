"""A job's workspace on this node: ``STATE/jobs/<project>/<n>/``.

::

    code/       the code snapshot (→ /code, writable, the job's cwd)
    input/      the /input mount (→ read-only); other mounts mirror their target: /data → data/
    output/     empty at start, or a rerun's starting point (→ /output, read-write); becomes
                the dataset version PROJECT/N/output
    home/       $HOME          tmp/   $TMPDIR without a sandbox
    spec.json   what the agent runs         status.json   what the agent reports
    job.log     ``<ts> <o|e> <text>`` lines agent.log     the agent's own log
    stop        why the job was stopped (written before the agent gets SIGTERM)

:func:`prepare` is idempotent: every step records what it did in ``.prepared``, and a
step interrupted half-way (daemon killed during a restore) is redone from scratch. It
also records the job's attempt: a new attempt placed on the same node first drops the
previous run's ``stop`` and ``status.json`` (they would stop it, or end it, at once) and
its ``/output``. A rerun's ``resume`` (the tree of the last attempt's ``/output``, a
checkpoint or its final output) is recorded first, then restored into ``output/`` as it
was, writable: the job resumes from its checkpoints (:mod:`floydd.runtime.checkpoint`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from floydd import log
from floydd.agent.spec import Mount
from floydd.model import check_mount_target
from floydd.agent.status import atomic_write
from floydd.errors import InvalidSpec, UnsafePath

__all__ = ["job_dir", "prepare", "plan_mounts", "release_inputs", "note", "DIRS", "STALE"]

DIRS = ("code", "input", "output", "home", "tmp")
STALE = ("stop", "status.json")
"""What an earlier run of the same job on this node (an earlier attempt) leaves that must not
speak for the next: its stop request and its final status."""
_STEPS = ".prepared"
_ATTEMPT = "attempt"
_RESUME = "resume"
_OUTPUT = "/output"


def job_dir(state_dir: Path, project: str, number: int) -> Path:
    """``STATE/jobs/<project>/<number>`` (the project name must be a plain name)."""
    if not project or "/" in project or project in (".", "..") or project.startswith(".") or "\0" in project:
        raise UnsafePath(f"{project!r} cannot name a workspace folder", hint="project names are plain words")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise UnsafePath(f"job number {number!r} must be a whole number ≥ 1", hint="jobs are PROJECT/N")
    return Path(state_dir).absolute() / "jobs" / project / str(number)


def plan_mounts(data: list[dict[str, Any]] | None) -> tuple[Mount, ...]:
    """The job's data mounts as workspace folders, shallowest first (``/input`` → ``input``)."""
    mounts: list[Mount] = []
    seen: set[str] = set()
    for item in data or ():
        target = check_mount_target(item.get("mount"))
        if target in seen:
            raise InvalidSpec(f"two data mounts at {target}", hint="give each dataset its own mount point")
        seen.add(target)
        mounts.append(Mount(source=target.lstrip("/"), target=target))
    return tuple(sorted(mounts, key=lambda m: (m.target.count("/"), m.target)))


def prepare(ws: Path, job: dict[str, Any], store, *, resume: str | None = None) -> tuple[Mount, ...]:
    """Make ``ws`` ready for the agent: folders, code, data mounts, an output/ that is empty
    or, with ``resume`` (a tree id), the last attempt's.

    Synchronous (restores can be large): call it in a thread. Returns the mounts to
    put in the agent's spec. A start resumed after a restart of the daemon (no ``resume``
    given) restores what the first try recorded.
    """
    ws = Path(ws)
    mounts = plan_mounts(job.get("data"))
    trees = {m.target: str(item["tree"]) for m in mounts for item in job.get("data") or ()
             if item.get("mount") == m.target}
    for folder in (ws.parent.parent, ws.parent, ws):  # STATE/jobs, STATE/jobs/<project>, the workspace
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(ws, 0o700)
    for name in DIRS:
        (ws / name).mkdir(mode=0o700, exist_ok=True)
    done = _load_steps(ws)
    attempt = str(job.get("attempt") or 0)
    if done.get(_ATTEMPT) != attempt:  # a new run of the job here: an older run's stop and status are not its own
        for name in STALE:
            with contextlib.suppress(FileNotFoundError):
                (ws / name).unlink()
        done.pop(_OUTPUT, None)
        done.pop(_RESUME, None)
        done[_ATTEMPT] = attempt
        _save_steps(ws, done)
    if resume:
        done[_RESUME] = resume
        _save_steps(ws, done)

    code_tree = job.get("code_tree")
    if done.get("/code") != (code_tree or ""):
        done.pop("/code", None)
        _save_steps(ws, done)
        _restore(store, code_tree, ws / "code")
        os.chmod(ws / "code", 0o700)
        done["/code"] = code_tree or ""
        _save_steps(ws, done)

    for mount in mounts:
        tree = trees[mount.target]
        if done.get(mount.target) == tree:
            continue
        dest = ws / mount.source
        if mount.target in done:  # our own earlier restore (maybe cut short): redo it and what it holds
            _clear(dest)
        for nested in [t for t in done if t.startswith(mount.target + "/")]:
            done.pop(nested)
        if dest.exists() and any(dest.iterdir()):
            raise InvalidSpec(f"data mount {mount.target} collides with a folder of another mount",
                              hint="mount the datasets at separate paths, e.g. /input and /data")
        done[mount.target] = "pending:" + tree
        _save_steps(ws, done)
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        store.restore(_tree_id(tree), dest)
        os.chmod(dest, 0o700)
        done[mount.target] = tree
        _save_steps(ws, done)

    _prepare_output(ws, done, store)
    (ws / "job.log").touch(mode=0o600)  # floyd logs works from the start
    log.runtime.debug("workspace %s ready (%d mounts)", ws, len(mounts))
    return mounts


def _prepare_output(ws: Path, done: dict[str, str], store) -> None:
    """output/: empty, or the recorded ``resume`` tree restored (once per attempt; a restore
    cut short is redone), every part of it writable by the job."""
    output, resume = ws / "output", done.get(_RESUME, "")
    if not resume:
        _clear(output)
        output.mkdir(mode=0o700)
        return
    if done.get(_OUTPUT) == resume:
        return
    done[_OUTPUT] = "pending:" + resume
    _save_steps(ws, done)
    _clear(output)
    store.restore(_tree_id(resume), output)
    for root, dirs, files in os.walk(output):
        os.chmod(root, 0o700)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o600)
    done[_OUTPUT] = resume
    _save_steps(ws, done)
    log.runtime.info("workspace %s: /output starts from tree %s", ws, resume[:12])


def release_inputs(ws: Path, mounts: tuple[Mount, ...] | None = None) -> None:
    """After the job: drop the restored data copies and tmp/ (the store keeps the data)."""
    ws = Path(ws)
    if mounts is None:
        mounts = tuple(Mount(source=t.lstrip("/"), target=t) for t in _load_steps(ws)
                       if t.startswith("/") and t not in ("/code", _OUTPUT))
    for mount in mounts:
        _clear(ws / mount.source)
    _clear(ws / "tmp")


def note(log_path: Path, *lines: str, stream: bytes = b"o") -> None:
    """Append lines of floydd's own to a job's log, in the agent's format (environment builds,
    what of /output was skipped). Only while no agent writes it, or between its lines."""
    stamp = b"%.6f %s " % (time.time(), stream)
    with open(log_path, "ab") as f:
        f.write(b"".join(stamp + line.encode(errors="replace") + b"\n" for line in lines))


def _restore(store, tree: str | None, dest: Path) -> None:
    if dest.exists():
        _clear(dest)
    if not tree:
        dest.mkdir(mode=0o700)
        return
    store.restore(_tree_id(tree), dest)


def _tree_id(tree: str):
    try:
        from floydd.store.ids import ObjectId
    except ImportError:  # pragma: no cover - the store always ships ids
        return tree
    return ObjectId.from_hex(tree)


def _clear(path: Path) -> None:
    """Remove ``path`` (a folder, possibly with read-only parts), if present."""
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    if not path.exists():
        return
    try:
        shutil.rmtree(path)
    except PermissionError:  # read-only folders from a restored tree: open them up, retry
        os.chmod(path, 0o700)
        for root, dirs, _ in os.walk(path):  # top-down: each folder is opened before it is read
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o700)
        shutil.rmtree(path)


def _load_steps(ws: Path) -> dict[str, str]:
    try:
        return dict(json.loads((ws / _STEPS).read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def _save_steps(ws: Path, done: dict[str, str]) -> None:
    atomic_write(ws / _STEPS, json.dumps(done).encode())
