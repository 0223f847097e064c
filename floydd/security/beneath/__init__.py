"""Descriptor-relative, no-symlink paths: how the daemon touches a tree someone else controls.

The daemon (root on a system-mode box) reads, hashes, copies, chowns and deletes inside
trees that a job or a person can change while it works: a job's ``/output`` (checkpoints,
the final save), its workspace (clean-up, hand-over to the job user), restores and
uploads. ``O_NOFOLLOW`` on an absolute path guards only its last component: a job that
swaps a folder for a symlink (``renameat2(RENAME_EXCHANGE)``) between the daemon's look
and its open gets a parent followed, and the daemon reads ``/var/lib/floydd/store/key``
into the job's output. So no operation here ever resolves a path by name from ``/``:

- a tree is entered once, through a directory descriptor (:func:`open_root`; the path up
  to it is the caller's, e.g. the daemon's own state folder);
- everything below is opened relative to a descriptor with ``openat2(RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` where the kernel has it (Linux 5.6+,
  called through ``syscall(2)``: Python 3.11 has no ``os.openat2``), else component by
  component with ``O_NOFOLLOW | O_DIRECTORY`` from the descriptor (:func:`open_beneath`).
  Either way a symlink met anywhere is refused (``ELOOP``), never followed, and ``..`` or
  an absolute path is refused before any call;
- single entries are acted on with the ``*at`` calls and ``AT_SYMLINK_NOFOLLOW`` relative
  to a verified folder descriptor (stat, readlink, chown, chmod, unlink, rmdir).

What a held folder descriptor reaches after a rename is still a folder the job could
write (it can move its own folders, never root's, and a move out of a mount fails with
``EXDEV``), so a swap can change *which* of the job's files are read, never make the
daemon read a file from outside the tree.

Helpers: :func:`walk` (``scandir`` over descriptors, each folder read once),
:func:`remove_tree` / :func:`empty_dir`, :func:`chown_tree`, :func:`chmod_at`, and
:func:`resolves_inside` (whether a link, followed by the kernel, stays beneath the root:
the snapshot's "link inside the tree" rule without ``realpath``).

Two modules: :mod:`.resolve` (``openat2`` and its fallback, :class:`Dirs`, single-entry
calls) and :mod:`.trees` (walk, remove, chown); import this package, not them.

Why not ``shutil.rmtree``: on Linux it is descriptor-based below its top (and says so,
``rmtree.avoids_symlink_attacks``), but it recurses once per folder level (a job's folder
nested a few thousand deep raises ``RecursionError`` in the daemon), it cannot enter a
read-only folder as a non-root daemon (a restored tree may hold one), and its top is
resolved by path unless ``dir_fd`` is given. :func:`remove_tree` is iterative, opens
folders through :class:`Dirs`, and opens up read-only folders of its own.
"""

from floydd.security.beneath.resolve import (RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, Dirs,
                                             chmod_at, join_rel, make_dirs, open_beneath, open_dir, open_root,
                                             openat2_available, resolves_inside, split_rel)
from floydd.security.beneath.trees import Found, chown_tree, empty_dir, remove_path, remove_tree, walk

__all__ = ["RESOLVE_BENEATH", "RESOLVE_NO_SYMLINKS", "RESOLVE_NO_MAGICLINKS", "openat2_available",
           "open_root", "open_beneath", "open_dir", "make_dirs", "Dirs", "Found", "walk", "remove_tree", "remove_path", "empty_dir",
           "chown_tree", "chmod_at", "resolves_inside", "split_rel", "join_rel"]
