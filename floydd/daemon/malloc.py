"""glibc's allocator, told once that start-up is over (issue 23: an idle lone box ≤ 60 MiB).

Start-up (imports, the integrity checks, the first raft entries, the executor's threads)
frees memory that glibc keeps at the top of its heaps until they grow again; an idle daemon
never grows them again, so :func:`trim` (``malloc_trim(0)``) gives those pages back once the
daemon serves. Measured on an idle lone box (``bench/daemon_idle.py``): ~0.6-0.8 MiB less RSS;
trimming again 5 s later gave nothing more.

Not kept: ``mallopt(M_ARENA_MAX, 2)`` before the threads start measured ≤ 0.3 MiB more
(within the noise of three runs) and would make the store's parallel hashing and sealing
threads share two arenas. ``gc.freeze()`` moves objects out of the collector's sight but
frees nothing (no RSS change; it matters for fork, which the daemon does not use for jobs).

Anything but glibc (musl, a sanitiser's allocator) may lack the call: then it does nothing.
"""

from __future__ import annotations

import ctypes

from floydd import log

__all__ = ["trim"]


def trim() -> None:
    """Give the heaps' free pages back to the system (a few ms; call it rarely)."""
    try:
        libc = ctypes.CDLL(None)        # the C library the interpreter was linked with: no search
    except OSError:
        return
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
        log.daemon.debug("malloc_trim after start-up")
