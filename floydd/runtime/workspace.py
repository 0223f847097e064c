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

The workspace folder itself is the daemon's (0700), but what is in ``code/``, ``output/``,
``home/``, ``tmp/`` and the mounts belongs to the job once it ran (an earlier attempt's
processes may even outlive it): below the workspace, everything here (clearing, making
mount folders, restoring, opening up modes, :func:`remove`) goes through descriptors
without following a link (:mod:`floydd.security.beneath`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from pathlib import Path
from typing import Iterable

from floydd import log
from floydd.agent.spec import BindMount
from floydd.model import Mount, Run, check_mount_target
from floydd.agent.status import atomic_write
from floydd.errors import InvalidSpec, UnsafePath
from floydd.security import beneath

__all__ = ["job_dir", "prepare", "plan_mounts", "release_inputs", "remove", "note", "attempt_log", "DIRS", "STALE"]

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


def plan_mounts(data: Iterable[Mount]) -> tuple[BindMount, ...]:
    """The job's data mounts as workspace folders, shallowest first (``/input`` → ``input``)."""
    mounts: list[BindMount] = []
    seen: set[str] = set()
    for item in data:
        target = check_mount_target(item.mount)
        if target in seen:
            raise InvalidSpec(f"two data mounts at {target}", hint="give each dataset its own mount point")
        seen.add(target)
        mounts.append(BindMount(source=target.lstrip("/"), target=target))
    return tuple(sorted(mounts, key=lambda m: (m.target.count("/"), m.target)))


def prepare(ws: Path, run: Run, store, *, resume: str | None = None) -> tuple[BindMount, ...]:
    """Make ``ws`` ready for the agent: folders, code, data mounts, an output/ that is empty
    or, with ``resume`` (a tree id), the last attempt's.

    Synchronous (restores can be large): call it in a thread. Returns the mounts to
    put in the agent's spec. A start resumed after a restart of the daemon (no ``resume``
    given) restores what the first try recorded.
    """
    ws = Path(ws)
    mounts = plan_mounts(run.data)
    trees = {m.target: str(item.tree) for m in mounts for item in run.data if item.mount == m.target}
    for folder in (ws.parent.parent, ws.parent, ws):  # STATE/jobs, STATE/jobs/<project>, the workspace
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(ws, 0o700)
    ws_fd = beneath.open_root(ws)
    try:
        for name in DIRS:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=ws_fd)
        _prepare_in(ws, ws_fd, run, store, mounts, trees, resume)
    finally:
        os.close(ws_fd)
    (ws / "job.log").touch(mode=0o600)  # floyd logs works from the start
    log.runtime.debug("workspace %s ready (%d mounts)", ws, len(mounts))
    return mounts


def attempt_log(ws: Path, attempt: int) -> Path:
    """Where an earlier attempt's log is kept in the workspace once a later one runs here
    (``job.log`` is always the latest attempt's)."""
    return Path(ws) / f"job.log.{int(attempt)}"


def _keep_attempt_log(ws_fd: int, earlier: str | None) -> None:
    """A rerun here writes a new ``job.log``: the earlier attempt's moves to ``job.log.K``
    (issue 21: the rerun appended to it, and its metrics were read again as the rerun's). An
    agent of that attempt still writing keeps writing to the file it opened, the kept one."""
    if not earlier or not earlier.isdigit() or earlier == "0":
        return
    with contextlib.suppress(FileNotFoundError):
        if os.stat("job.log", dir_fd=ws_fd, follow_symlinks=False).st_size:
            os.rename("job.log", attempt_log(Path("."), int(earlier)).name, src_dir_fd=ws_fd, dst_dir_fd=ws_fd)


def _prepare_in(ws: Path, ws_fd: int, run: Run, store, mounts: tuple[BindMount, ...],
                trees: dict[str, str], resume: str | None) -> None:
    done = _load_steps(ws)
    attempt = str(run.attempt)
    if done.get(_ATTEMPT) != attempt:  # a new run of the job here: an older run's stop and status are not its own
        for name in STALE:
            with contextlib.suppress(FileNotFoundError):
                (ws / name).unlink()
        _keep_attempt_log(ws_fd, done.get(_ATTEMPT))
        done.pop(_OUTPUT, None)
        done.pop(_RESUME, None)
        done[_ATTEMPT] = attempt
        _save_steps(ws, done)
    if resume:
        done[_RESUME] = resume
        _save_steps(ws, done)

    code_tree = run.code_tree
    if done.get("/code") != (code_tree or ""):
        done.pop("/code", None)
        _save_steps(ws, done)
        _restore(store, code_tree, ws, ws_fd, "code")
        beneath.chmod_at(ws_fd, "code", 0o700)
        done["/code"] = code_tree or ""
        _save_steps(ws, done)

    for mount in mounts:
        tree = trees[mount.target]
        if done.get(mount.target) == tree:
            continue
        if mount.target in done:  # our own earlier restore (maybe cut short): redo it and what it holds
            _clear(ws_fd, mount.source)
        for nested in [t for t in done if t.startswith(mount.target + "/")]:
            done.pop(nested)
        if _holds_something(ws_fd, mount.source):
            raise InvalidSpec(f"data mount {mount.target} collides with a folder of another mount",
                              hint="mount the datasets at separate paths, e.g. /input and /data")
        done[mount.target] = "pending:" + tree
        _save_steps(ws, done)
        store.restore(_tree_id(tree), ws / mount.source, within=ws)
        _chmod(ws_fd, mount.source, 0o700)
        done[mount.target] = tree
        _save_steps(ws, done)

    _prepare_output(ws, ws_fd, done, store)


def _prepare_output(ws: Path, ws_fd: int, done: dict[str, str], store) -> None:
    """output/: empty, or the recorded ``resume`` tree restored (once per attempt; a restore
    cut short is redone), every part of it writable by the job."""
    resume = done.get(_RESUME, "")
    if not resume:
        _clear(ws_fd, "output")
        os.mkdir("output", 0o700, dir_fd=ws_fd)
        return
    if done.get(_OUTPUT) == resume:
        return
    done[_OUTPUT] = "pending:" + resume
    _save_steps(ws, done)
    _clear(ws_fd, "output")
    store.restore(_tree_id(resume), ws / "output", within=ws)
    _open_up(ws_fd, "output")
    done[_OUTPUT] = resume
    _save_steps(ws, done)
    log.runtime.info("workspace %s: /output starts from tree %s", ws, resume[:12])


def release_inputs(ws: Path, mounts: tuple[BindMount, ...] | None = None) -> None:
    """After the job: drop the restored data copies and tmp/ (the store keeps the data)."""
    ws = Path(ws)
    if mounts is None:
        mounts = tuple(BindMount(source=t.lstrip("/"), target=t) for t in _load_steps(ws)
                       if t.startswith("/") and t not in ("/code", _OUTPUT))
    ws_fd = beneath.open_root(ws)
    try:
        for mount in mounts:
            _clear(ws_fd, mount.source)
        _clear(ws_fd, "tmp")
    finally:
        os.close(ws_fd)


def remove(ws: Path) -> None:
    """Delete a job's workspace, whatever the job left in it, never following a link it made;
    what cannot be removed is logged, not raised (the job's record is gone already)."""
    try:
        beneath.remove_path(ws)
    except OSError as exc:
        log.runtime.warning("workspace %s: not all of it could be removed: %s", ws, exc)


def note(log_path: Path, *lines: str, stream: bytes = b"o") -> None:
    """Append lines of floydd's own to a job's log, in the agent's format (environment builds,
    what of /output was skipped). Only while no agent writes it, or between its lines."""
    stamp = b"%.6f %s " % (time.time(), stream)
    with open(log_path, "ab") as f:
        f.write(b"".join(stamp + line.encode(errors="replace") + b"\n" for line in lines))


def _restore(store, tree: str | None, ws: Path, ws_fd: int, rel: str) -> None:
    _clear(ws_fd, rel)
    if not tree:
        os.mkdir(rel, 0o700, dir_fd=ws_fd)
        return
    store.restore(_tree_id(tree), ws / rel, within=ws)


def _tree_id(tree: str):
    try:
        from floydd.store.ids import ObjectId
    except ImportError:  # pragma: no cover - the store always ships ids
        return tree
    return ObjectId.from_hex(tree)


def _clear(ws_fd: int, rel: str) -> None:
    """Remove ``rel`` below the workspace (a folder, possibly with read-only parts, a file or
    a link), if present; a link on its way is refused, not followed."""
    parent, name = beneath.split_rel(os.fsencode(rel))
    try:
        parent_fd = beneath.open_dir(ws_fd, parent)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _not_a_folder(parent, exc) from None
    try:
        beneath.remove_tree(parent_fd, name)
    finally:
        os.close(parent_fd)


def _holds_something(ws_fd: int, rel: str) -> bool:
    """Whether ``rel`` below the workspace exists and is not an empty folder."""
    try:
        fd = beneath.open_dir(ws_fd, rel)
    except FileNotFoundError:
        return False
    except OSError:
        return True             # a file or a link where the mount goes
    try:
        with os.scandir(fd) as entries:
            return any(True for _ in entries)
    finally:
        os.close(fd)


def _chmod(ws_fd: int, rel: str, mode: int) -> None:
    parent, name = beneath.split_rel(os.fsencode(rel))
    fd = beneath.open_dir(ws_fd, parent)
    try:
        beneath.chmod_at(fd, name, mode)
    finally:
        os.close(fd)


def _open_up(ws_fd: int, rel: str) -> None:
    """Every folder of ``rel`` 0700 and every file at least rw for its owner (a restored
    checkpoint the job goes on writing); links are left as they are."""
    _chmod(ws_fd, rel, 0o700)
    fd = beneath.open_dir(ws_fd, rel)
    try:
        for f in beneath.walk(fd, on_error=_changed_meanwhile):
            try:
                st = f.lstat()
                if stat.S_ISDIR(st.st_mode):
                    beneath.chmod_at(f.dir_fd, f.name, 0o700)
                elif stat.S_ISREG(st.st_mode):
                    beneath.chmod_at(f.dir_fd, f.name, stat.S_IMODE(st.st_mode) | 0o600)
            except OSError as exc:
                _changed_meanwhile(f.rel, exc)
    finally:
        os.close(fd)


def _changed_meanwhile(rel: bytes, exc: OSError) -> None:
    """An entry gone or swapped for a link since it was listed (something of an earlier run
    still at work): nothing of ours to open up; any other error is raised."""
    if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
        raise exc


def _not_a_folder(rel: bytes, exc: OSError) -> UnsafePath:
    return UnsafePath(f"workspace folder {os.fsdecode(rel)} is not a folder ({exc.strerror}); "
                      "it is not followed", hint="delete the job and run it again")


def _load_steps(ws: Path) -> dict[str, str]:
    try:
        return dict(json.loads((ws / _STEPS).read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def _save_steps(ws: Path, done: dict[str, str]) -> None:
    atomic_write(ws / _STEPS, json.dumps(done).encode())
