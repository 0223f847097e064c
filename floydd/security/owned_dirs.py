"""Folders in shared places (the temp dir): made by us at 0700, refused otherwise.

A state dir too deep for a unix socket path puts the API socket in a folder under the
temp dir named after the uid and the state dir (:func:`shared_socket_dir`), so daemon
and clients agree without talking. The temp dir is writable by every local user: one
of them can create that folder first (0777, or a symlink to their own) and then replace
the socket and receive the next ``floyd run``. So the daemon creates the folder itself
(0700) and both the daemon and the clients refuse it unless it is a real folder (not a
link), owned by them, with no group or other permissions.

The check opens the folder with ``O_DIRECTORY | O_NOFOLLOW`` and looks at that open
folder (``fstat``), so what is checked is what the path names at that moment; the temp
dir is sticky, so nobody else can rename our folder away afterwards, and nobody else
can write into a 0700 folder.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from floydd.errors import FloyddError

__all__ = ["UNSAFE_FOLDER", "shared_socket_dir", "is_shared_socket", "socket_folder_hint", "folder_problem",
           "ensure_owned_dir", "open_owned_dir", "check_owned_dir", "claim_state_dir", "open_private_file",
           "ensure_group_dir"]

UNSAFE_FOLDER = "unsafe_folder"
"""The code of the error raised for a folder or file in a shared place that is not safely ours."""

_SHARED_NAME = re.compile(r"floydd-(\d+)-[0-9a-f]{16}")


def shared_socket_dir(state_dir: Path) -> Path:
    """The short folder under the temp dir that holds the socket of ``state_dir``'s daemon."""
    digest = hashlib.sha256(os.fsencode(Path(state_dir).absolute())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"floydd-{os.getuid()}-{digest}"


def is_shared_socket(socket_path: Path) -> bool:
    """Whether ``socket_path`` lives in a :func:`shared_socket_dir` (a folder others could
    have made) rather than in a state dir."""
    folder = Path(socket_path).parent
    return (folder.parent == Path(tempfile.gettempdir())
            and _SHARED_NAME.fullmatch(folder.name) is not None)


def socket_folder_hint(folder: Path) -> str:
    """What to do about a refused socket folder (said by the daemon and the clients alike)."""
    return (f"the state dir is too deep for a socket path, so its socket goes in {folder}; remove that "
            "folder (as its owner or root) and start the daemon again, or choose a shorter state dir "
            "(FLOYDD_STATE_DIR or --state-dir) so the socket fits in it")


def folder_problem(st: os.stat_result, uid: int, gid: int | None = None) -> str | None:
    """Why a folder with this ``lstat`` result is unsafe for a user ``uid``, or None.

    Pure, so the rules are tested without a second user: not a folder (a symlink, a
    file), owned by someone else, or open to the group or others (0700). With ``gid``, a
    folder shared with that group's members (a system daemon's socket folder): it must be of
    that group, mode 0750 or tighter (the group may enter and list, never write: nobody but
    its owner can put a socket of their own in it).
    """
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by uid {uid} (this user)"
    if gid is not None and st.st_gid != gid:
        return f"belongs to group {st.st_gid}, not to group {gid} (the socket's group)"
    mode = stat.S_IMODE(st.st_mode)
    if gid is None and mode & 0o077:
        return f"has mode {mode:04o}: the group or other users can use it (must be 0700)"
    if gid is not None and mode & 0o027:
        return f"has mode {mode:04o}: other users can use it or its group can write it (must be 0750)"
    return None


def ensure_group_dir(path: Path, gid: int, *, hint: str = "") -> Path:
    """Create ``path`` as 0750, this user's, of group ``gid``, or accept an existing one only if
    :func:`check_owned_dir` does for that group; like :func:`ensure_owned_dir`, it never
    repairs a folder someone else made."""
    path = Path(path)
    if _made(path):
        os.chown(path, -1, gid, follow_symlinks=False)
        os.chmod(path, 0o750, follow_symlinks=False)
    return check_owned_dir(path, hint=hint, gid=gid)


def ensure_owned_dir(path: Path, *, hint: str = "") -> Path:
    """Create ``path`` (its parent must exist) with mode 0700, or accept an existing one
    only if :func:`check_owned_dir` does. Never loosens or repairs someone else's folder."""
    path = Path(path)
    if _made(path):
        os.chmod(path, 0o700, follow_symlinks=False)  # a umask like 0o277 must not leave it unusable
    return check_owned_dir(path, hint=hint)


def _made(path: Path) -> bool:
    """``mkdir`` at 0700; False when something was already there."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    return True


def open_owned_dir(path: Path, *, hint: str = "", gid: int | None = None) -> int:
    """Open ``path`` (``O_DIRECTORY | O_NOFOLLOW``) and return the descriptor if it is a
    real folder owned by this user with mode 0700 (with ``gid``: of that group, 0750 or
    tighter, :func:`folder_problem`) in a parent that others cannot rename it out of; else
    refuse (:data:`UNSAFE_FOLDER`). A missing folder raises ``FileNotFoundError``. Paths
    opened through ``/proc/self/fd/N/`` then name exactly the folder that was checked."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _unsafe(path, folder_problem(os.lstat(path), os.geteuid(), gid) or "is not a folder",
                          hint) from None
        raise
    problem = folder_problem(os.fstat(fd), os.geteuid(), gid)
    if problem is None:
        parent = os.stat(path.parent)
        if parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX and parent.st_uid != os.geteuid():
            problem = f"is in {path.parent}, which others can write and which is not sticky"
    if problem:
        os.close(fd)
        raise _unsafe(path, problem, hint)
    return fd


def check_owned_dir(path: Path, *, hint: str = "", gid: int | None = None) -> Path:
    """:func:`open_owned_dir`, for a check only."""
    os.close(open_owned_dir(path, hint=hint, gid=gid))
    return Path(path)


def claim_state_dir(path: Path) -> Path:
    """Make the state dir (and parents) if missing and make sure it is this user's: a
    state dir someone else made first (``--state-dir /tmp/x``) is refused, as is a
    symlink that someone else owns. One of our own with loose permissions is tightened
    to 0700 as before; a symlink of ours to a folder of ours (a bigger disk) is fine."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    hint = "choose a state dir of your own (--state-dir or FLOYDD_STATE_DIR), or remove this one as its owner"
    uid = os.geteuid()
    link = os.lstat(path)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (uid, 0):
        raise _unsafe(path, f"is a symbolic link owned by uid {link.st_uid}, not by uid {uid} (this user)", hint)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:
            raise _unsafe(path, f"is owned by uid {st.st_uid}, not by uid {uid} (this user)", hint)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def open_private_file(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` a file we keep in a folder others may reach: never through a symlink
    (``O_NOFOLLOW``), and refused unless it is a regular file owned by this user that
    nobody else may write. Returns the descriptor."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise _unsafe(Path(path), "is a symbolic link", f"remove {path} (it is not ours) and try again") from None
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "is not a regular file"
    elif st.st_uid != os.geteuid():
        problem = f"is owned by uid {st.st_uid}, not by uid {os.geteuid()} (this user)"
    elif stat.S_IMODE(st.st_mode) & 0o022:
        problem = f"has mode {stat.S_IMODE(st.st_mode):04o}: other users can write it"
    if problem:
        os.close(fd)
        raise _unsafe(Path(path), problem, f"remove {path} (it is not ours) and try again")
    return fd


def _unsafe(path: Path, problem: str, hint: str) -> FloyddError:
    return FloyddError(f"{path} {problem}; refusing to use it",
                       hint=hint or f"remove {path} (as its owner or root) and try again",
                       code=UNSAFE_FOLDER)
