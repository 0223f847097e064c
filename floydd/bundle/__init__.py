"""The export file's format: what ``floyd export`` writes and ``floyd import`` reads, and nothing of a daemon.

A bundle is one signed, sealed, framed file (:mod:`floydd.exchange` makes and commits them on
a daemon). This package is the format alone, so that the CLI can check a file, make or derive
its key and read its table of contents without loading the daemon's side::

    file        container   a framed stream, not a tar: header, parts, trailer. Each part is
                reader      named ("log of mnist/3") and hashed, each record in it sealed, so a
                            flipped byte is refused *naming the part*; it is written and read
                            in one pass (an HTTP body, a pipe), in bounded memory
    keys        crypto      the importing site has another store secret, so chunks are opened
                            with the exporter's key and sealed again under a random export key
                            for the journey (printed once, a --key-file, or a passphrase with
                            scrypt); a wrong key is refused by a check value, before anything
    signature   signing     the manifest is signed by the exporting box's node key, with the
                            chain to its cluster CA; the origin is the CA's fingerprint (a box
                            never init-ed signs with its node key alone, and says so)

It imports nothing of floydd but :mod:`floydd.errors` (an import contract in pyproject.toml
holds the CLI to it).
"""

from __future__ import annotations

from floydd.bundle.container import Damaged, NotAnExport, Truncated, WrongKey
from floydd.bundle.crypto import SCRYPT, ExportKey, new_salt
from floydd.bundle.reader import Reader, read_header
from floydd.bundle.signing import Origin

__all__ = ["ExportKey", "Origin", "Reader", "read_header", "Damaged", "Truncated", "NotAnExport", "WrongKey",
           "SCRYPT", "new_salt"]
