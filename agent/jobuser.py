"""System mode: the job runs as the unprivileged job user, never as root or the daemon.

A daemon installed as a service runs as root (it must, to hand the job over to another
account); every job on it runs as one shared account, ``floyd-job`` (``job_user``), inside
the sandbox. One shared account rather than a fresh uid per job from a range because:

- the sandbox already keeps jobs apart: each has its own pid and IPC namespaces (no job
  can see, signal or trace another's processes), its own /tmp and /dev/shm, and sees only its
  own workspace; a per-job uid would add nothing there;
- a named account is in /etc/passwd (the sandbox shows it), so ``whoami``, pip, torch's and
  matplotlib's cache paths work; an anonymous uid from a range breaks them;
- nothing to allocate, record or recover after a crash (which uid is whose, which are free);
- the files a job leaves belong to a known account that the admin can find and clean.

How: bubblewrap starts as root (it binds the job's folders, which live in the 0700 state
folder), keeping only ``CAP_SETUID``/``CAP_SETGID``; inside, ``setpriv`` switches to the job
user (all supplementary groups cleared, ``no_new_privs``) and runs the job's shell. Switching
from root to another uid clears every remaining capability, so the job holds none. Bubblewrap
as the job user itself would need unprivileged user namespaces and search access to the state
folder, which the job user must not have.

Before the job starts the agent (root) makes the folders the job sees its own (:func:`hand_over`):
``code``, ``output``, ``home`` and the data mounts; the workspace itself, the other jobs'
workspaces and the state folder stay root's, 0700, and are not in the sandbox at all.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from floydd.agent.spec import AgentSpec
from floydd.errors import FloyddError, InvalidSpec
from floydd.security import beneath

__all__ = ["hand_over", "switch_args", "bwrap_caps", "owned_folders"]


def owned_folders(spec: AgentSpec) -> list[str]:
    """The workspace folders the job sees, relative to the workspace (each top folder once)."""
    names = ["code", "output", "home", "tmp"]
    for mount in spec.mounts:
        top = mount.source.split("/")[0]
        if top not in names:
            names.append(top)
    return names


def hand_over(ws: Path, spec: AgentSpec) -> None:
    """Make what the job sees (:func:`owned_folders`) the job user's, never through a link:
    each entry is chowned itself, relative to its folder's descriptor (a folder an earlier
    run of the job swapped for a link is walked as the link it is, not followed)."""
    assert spec.uid is not None and spec.gid is not None
    try:
        ws_fd = beneath.open_root(ws)
        try:
            for name in owned_folders(spec):
                try:
                    st = os.stat(name, dir_fd=ws_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    continue
                beneath.chown_tree(ws_fd, name, spec.uid, spec.gid)
        finally:
            os.close(ws_fd)
    except OSError as exc:
        raise FloyddError(f"cannot give the job's folders to the job user (uid {spec.uid}): {exc}",
                          hint="system mode needs the daemon to run as root") from None


def bwrap_caps() -> list[str]:
    """What bubblewrap (as root, after ``--cap-drop ALL``) keeps for :func:`switch_args`."""
    return ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def switch_args(uid: int, gid: int) -> list[str]:
    """The command prefix that becomes the job user inside the sandbox."""
    if uid == 0 or gid == 0:
        raise InvalidSpec("a job must not run as root", hint="set job_user to an unprivileged account")
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        raise InvalidSpec("setpriv is not installed: jobs cannot be handed to the job user",
                          hint="install util-linux (apt install util-linux)")
    # bwrap (root without CAP_DAC_OVERRIDE) cannot enter the job user's 0700 /code: the job
    # user does, then runs the job's shell from there
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs", "--",
            "/bin/sh", "-c", 'cd /code && exec "$0" "$@"']
