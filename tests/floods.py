"""What the flood tests throw at a box (issue 20, "Limits"): archives that unpack to far more
than they weigh, and jobs that print without end."""

from __future__ import annotations

import gzip
import io
import tarfile

__all__ = ["sparse_tar", "zeros_tar_gz", "empty_files_tar", "LOG_FLOOD", "METRIC_FLOOD"]


def sparse_tar(real_size: int, name: str = "big", tail: bytes = b"tail") -> bytes:
    """A few KB of PAX tar holding one GNU sparse (1.0) member of ``real_size`` bytes: all
    holes but ``tail`` at its end (what ``tar --sparse`` makes of a file from ``truncate -s``)."""
    sparse_map = b"1\n%d\n%d\n" % (real_size - len(tail), len(tail))
    payload = sparse_map.ljust(512, b"\0") + tail
    info = tarfile.TarInfo(f"GNUSparseFile.0/{name}")
    info.size = len(payload)
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
                        "GNU.sparse.realsize": str(real_size)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def zeros_tar_gz(size: int, name: str = "zeros") -> bytes:
    """A gzipped tar of one file of ``size`` zero bytes (a few KB per 10 MB)."""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w|") as tar:
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, _Zeros(size))
    return raw.getvalue()


def empty_files_tar(count: int) -> bytes:
    """A tar of ``count`` empty files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(count):
            tar.addfile(tarfile.TarInfo(f"f{i}"))
    return buf.getvalue()


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


LOG_FLOOD = """\
import os, sys
line = b"x" * 1023 + b"\\n"
block = line * 1024
out = sys.stdout.buffer
for _ in range({mib}):
    out.write(block)
out.flush()
"""
"""A job writing ``{mib}`` MiB of output as fast as it can (format with ``mib=``)."""

METRIC_FLOOD = """\
import sys
out = sys.stdout
for i in range({lines}):
    out.write('{{"metric": "loss", "value": %d, "step": %d}}\\n' % (i, i))
    if i % 1000 == 0:
        out.write('{{"metric": "acc", "value": %d, "step": %d}}\\n' % (i, i))
out.write('{{"metric": "acc", "value": -1, "step": {lines}}}\\n')
out.flush()
"""
"""A job printing ``{lines}`` metric lines as fast as it can, ending with ``acc = -1``."""
