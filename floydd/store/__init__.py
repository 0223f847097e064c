"""The encrypted content-addressed store (restic's layers, DESIGN §5 "Store").

    Store            open a store folder; snapshot / restore / read_tree / gc / verify
    ├── catalog      Catalog: named, numbered, immutable dataset versions (+ gc pins)
    ├── ingest       a folder in: walk + chunk + metadata cache -> one tree id
    ├── care/        keeping it whole
    │   ├── restore      tree -> folder, never outside it
    │   ├── maintenance  gc (lock scheme in its docstring) and verify
    │   ├── untrusted    when the catalog (or key) cannot be trusted: Store.open and gc refuse
    │   ├── rebuild      floydd repair: a catalog rebuilt from the trees in the store
    │   └── scrub        reading every object back, a budget at a time
    ├── dbfile       SQLite files that may be damaged: checks, salvage, set aside
    ├── keys/        the keys
    │   ├── crypto         keys, keyed BLAKE3 ids, AES-256-GCM; nothing else touches a key
    │   ├── rekey          re-seal the whole store under a new secret (steps, crash states)
    │   ├── reseal         the copying: old key -> new key, bounded memory
    │   ├── rekey_journal  rekey.db: inventory, old -> new ids, phase
    │   └── epochs         store key epochs: keys/epoch-N, the background re-seal (same ids)
    ├── tree, paths  manifests and the safe-path rules (untrusted input on restore)
    ├── objects      seal/open over a backend; Writer = one upload
    ├── backend      Backend protocol; local (disk) and memory implementations
    ├── chunker      FastCDC (pyfastcdc)
    ├── cache        file-metadata cache (unchanged files are not re-read)
    └── ignore       .floydignore (gitignore-style)
"""

from floydd.store.backend import Backend, Batch
from floydd.store.catalog import Catalog, DatasetVersion, check_name
from floydd.store.ids import ObjectId
from floydd.store.ignore import IGNORE_FILE, IgnoreRules
from floydd.store.local import LocalBackend
from floydd.store.care.maintenance import Damage, GcReport, VerifyReport
from floydd.store.memory import MemoryBackend
from floydd.store.ingest import SnapshotResult
from floydd.store.store import Store
from floydd.store.tree import Entry, Kind, Tree

__all__ = [
    "Store",
    "ObjectId",
    "Tree",
    "Entry",
    "Kind",
    "Catalog",
    "DatasetVersion",
    "check_name",
    "GcReport",
    "VerifyReport",
    "Damage",
    "SnapshotResult",
    "IgnoreRules",
    "IGNORE_FILE",
    "Backend",
    "Batch",
    "LocalBackend",
    "MemoryBackend",
]
