"""A benchmark's temp folder: made under ``--dir`` (default: the system temp dir), removed at
the end unless ``--keep``, when its path is printed instead."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def scratch(prefix: str, where: str | None = None, *, keep: bool = False) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    try:
        yield base
    finally:
        if keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
