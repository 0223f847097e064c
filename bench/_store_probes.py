"""Side measurements for bench/store_ingest.py: what the machine and the alternatives allow
(AES-GCM speed and threading, chunkers, folder fsyncs), next to what floydd's store does."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

MiB = 1 << 20


def dir_fsyncs(root: Path, rounds: int) -> str:
    """fsync of 256 folders, each holding a fresh rename, serially and with
    :func:`floydd.store.fileio.fsync_dirs`, interleaved: min/median/max ms each."""
    from floydd.store.fileio import fsync_dir, fsync_dirs

    dirs = [root / f"{i:02x}" for i in range(256)]
    for d in dirs:
        d.mkdir(parents=True)
    times: dict[str, list[float]] = {"serial": [], "parallel": []}
    for r in range(rounds):
        for name in times:
            for d in dirs:
                (d / "a").write_bytes(b"x")
            os.sync()
            for d in dirs:
                os.rename(d / "a", d / f"{name}{r}")        # each folder has a name to make durable
            t = time.perf_counter()
            if name == "serial":
                for d in dirs:
                    fsync_dir(d)
            else:
                fsync_dirs(dirs)
            times[name].append((time.perf_counter() - t) * 1000)
    shutil.rmtree(root)
    s, p = (sorted(times[k]) for k in ("serial", "parallel"))
    return (f"{s[0]:.0f}/{s[len(s) // 2]:.0f}/{s[-1]:.0f} | {p[0]:.0f}/{p[len(p) // 2]:.0f}/{p[-1]:.0f} "
            f"(min/median/max)  {s[len(s) // 2] / p[len(p) // 2]:.1f}x faster")


def openssl_aes_gcm_mbps() -> float | None:
    try:
        out = subprocess.run(["openssl", "speed", "-evp", "aes-256-gcm", "-bytes", "1048576", "-seconds", "2"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^aes-256-gcm\s+([\d.]+)k", out, re.IGNORECASE | re.MULTILINE)
    return float(m.group(1)) * 1000 / 1e6 if m else None


def aead_threads_scaling() -> str:
    """Two threads sealing 4 MiB objects: CPU seconds per wall second. About 1.0 means
    ``cryptography`` holds the GIL during AES-GCM (before 50.0), so sealing on threads
    uses one core; up to 2.0 means it releases it (50.0 on)."""
    import threading

    import cryptography
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead, data, nonce = AESGCM(bytes(32)), bytes(4 << 20), bytes(12)

    def work() -> None:
        out = bytearray(len(data) + 16)
        for _ in range(40):
            aead.encrypt_into(nonce, data, b"", out)

    threads = [threading.Thread(target=work) for _ in range(2)]
    c, t = time.process_time(), time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return f"{(time.process_time() - c) / (time.perf_counter() - t):.2f}  (cryptography {cryptography.__version__})"


def chunker_comparison(mib: int) -> list[tuple[str, str]]:
    import hashlib

    data = random.Random(7).randbytes(mib * MiB)
    third = len(data) // 3
    edited = data[:third] + b"an insertion" + data[third:]
    params = dict(min_size=256 * 1024, avg_size=MiB, max_size=4 * MiB)

    def fixed(buf):
        return [buf[i:i + MiB] for i in range(0, len(buf), MiB)]

    candidates = []
    from pyfastcdc.cy import FastCDC as PyFastCDCCy
    from pyfastcdc.py import FastCDC as PyFastCDCPy
    cy = PyFastCDCCy(MiB, min_size=params["min_size"], max_size=params["max_size"])
    candidates.append(("pyfastcdc 0.3 (Cython) [chosen]", lambda b: [c.data for c in cy.cut_buf(b)], len(data)))
    py = PyFastCDCPy(MiB, min_size=params["min_size"], max_size=params["max_size"])
    candidates.append(("pyfastcdc (its pure-Python build)", lambda b: [c.data for c in py.cut_buf(b)], 4 * MiB))
    try:
        from fastcdc.fastcdc_cy import fastcdc_cy
        candidates.append(("fastcdc 1.7 (Cython)", lambda b: [c.data for c in fastcdc_cy(b, **params, fat=True)],
                           len(data)))
        from fastcdc.fastcdc_py import fastcdc_py
        candidates.append(("fastcdc 1.7 (pure Python)",
                           lambda b: [c.data for c in fastcdc_py(b, **params, fat=True)], 2 * MiB))
    except ImportError:
        candidates.append(("fastcdc (PyPI)", None, 0))
    candidates.append(("fixed 1 MiB blocks", fixed, len(data)))

    out = []
    for name, fn, sample in candidates:
        if fn is None:
            out.append((name, "not installed (pip install fastcdc to compare)"))
            continue
        buf = data[:sample]
        t0 = time.perf_counter()
        fn(buf)
        t = time.perf_counter() - t0
        speed = sample / 1e6 / t
        if sample == len(data):
            before = {hashlib.blake2b(bytes(c), digest_size=16).digest() for c in fn(data)}
            after = [hashlib.blake2b(bytes(c), digest_size=16).digest() for c in fn(edited)]
            reused = sum(h in before for h in after) / len(after)
            out.append((name, f"{speed:7.0f} MB/s   chunks reused after a 12-byte insertion: {reused:.0%}"))
        else:
            out.append((name, f"{speed:7.1f} MB/s   (on {sample // MiB} MiB; same cut points as its Cython twin)"))
    return out
