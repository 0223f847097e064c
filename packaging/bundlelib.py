"""What ``build-bundle`` and ``add-wheels`` share: wheel names, platform tags, the torch
requirement of each variant, hash-lock text, and a reproducible tar.

The pure functions (everything but :func:`sha256_file`, :func:`running_platform` and
:func:`write_tar`) are tested in ``tests/unit/bundle``. This folder is deliberately not a
Python package: ``packaging`` is also the name of PyPA's library, which pip and pytest
import, and a package of ours by that name would shadow it. The scripts find this module
next to themselves; tests load it by path.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

__all__ = ["VARIANTS", "Wheel", "parse_wheel", "normalize", "platform_tags", "running_platform",
           "torch_requirement", "check_variant", "lock_text", "read_lock_names", "bundle_stem",
           "env_text", "sha256_file", "folder_members", "write_tar"]

VARIANTS = ("cpu", "gpu", "no-torch")
"""``cpu``: torch's CPU build; ``gpu``: its CUDA build (with the nvidia-* wheels it needs);
``no-torch``: floydd alone (jobs bring their own framework through the wheelhouse)."""

_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?"
                    r"-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")
_MANYLINUX_LEGACY = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
_LEGACY_ARCHES = {  # which arches each legacy alias was defined for (PEP 513, 571, 599)
    "manylinux1": {"x86_64", "i686"},
    "manylinux2010": {"x86_64", "i686"},
    "manylinux2014": {"x86_64", "i686", "aarch64", "armv7l", "ppc64", "ppc64le", "s390x"},
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Wheel:
    """A wheel file's name, split (PEP 427); ``name`` is normalised (PEP 503)."""

    filename: str
    name: str
    version: str
    platforms: tuple[str, ...]

    @property
    def local(self) -> str:
        """The local version label (``cpu`` in ``2.13.0+cpu``), or ``""``."""
        return self.version.partition("+")[2]


def normalize(name: str) -> str:
    """PEP 503: ``Foo_Bar.baz`` -> ``foo-bar-baz``, so lock names compare as pip compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_wheel(filename: str) -> Wheel:
    """Split ``name-version[-build]-py-abi-platform.whl``; ValueError for anything else."""
    m = _WHEEL.match(os.path.basename(filename))
    if not m:
        raise ValueError(f"{filename}: not a wheel file name (name-version-python-abi-platform.whl)")
    return Wheel(filename=os.path.basename(filename), name=normalize(m["name"]), version=m["version"],
                 platforms=tuple(m["plat"].split(".")))


def platform_tags(tag: str) -> list[str]:
    """Every platform tag a box of platform ``tag`` runs, newest first, for ``pip --platform``.

    pip takes the tags it is given literally (it widens only ``manylinux2014``/``2010``), so
    ``manylinux_2_28_x86_64`` alone would refuse the many ``manylinux2014`` wheels: a glibc
    2.28 box runs every manylinux tag of glibc 2.28 or older, and their legacy aliases.
    musllinux widens the same way; other tags (macOS, Windows) pip widens itself.
    """
    legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(.+)", tag)
    if legacy:
        tag = f"manylinux_2_{_MANYLINUX_LEGACY[legacy[1]]}_{legacy[2]}"
    m = re.fullmatch(r"(manylinux|musllinux)_(\d+)_(\d+)_(.+)", tag)
    if not m:
        return [tag]
    family, major, minor, arch = m[1], int(m[2]), int(m[3]), m[4]
    floor = 5 if family == "manylinux" else 1
    tags: list[str] = []
    for glibc in range(minor, floor - 1, -1):
        tags.append(f"{family}_{major}_{glibc}_{arch}")
        if family == "manylinux" and major == 2:
            for alias, level in _MANYLINUX_LEGACY.items():
                if level == glibc and arch in _LEGACY_ARCHES[alias]:
                    tags.append(f"{alias}_{arch}")
    return tags


def running_platform() -> str:
    """This box's newest platform tag: ``manylinux_2_<glibc>_<arch>`` on glibc Linux."""
    system, machine = platform.system(), platform.machine()
    libc, version = platform.libc_ver()
    if system == "Linux" and libc == "glibc" and version:
        major, minor = version.split(".")[:2]
        return f"manylinux_{major}_{minor}_{machine}"
    raise SystemExit("build-bundle: cannot tell this box's platform tag; pass --platform "
                     "(e.g. manylinux_2_28_x86_64)")


def torch_requirement(variant: str, version: str, plat: str) -> str | None:
    """What to ask pip for, so that the variant's build wins whatever else the index has.

    On Linux a plain ``torch==V`` is the CUDA build and the CPU build is ``V+cpu``; since
    ``V+cpu`` sorts above ``V``, the GPU variant must exclude it explicitly. macOS has only
    CPU builds (plain versions).
    """
    if variant == "no-torch":
        return None
    linux = "linux" in plat
    if variant == "cpu":
        return f"torch=={version}+cpu" if linux else f"torch=={version}"
    if variant == "gpu":
        if plat.startswith("macosx"):
            raise ValueError("there is no CUDA build of torch for macOS; use --variant cpu")
        return f"torch=={version},!={version}+cpu"
    raise ValueError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")


def check_variant(variant: str, wheels: Iterable[Wheel], plat: str) -> str | None:
    """Why these wheels are not the variant asked for (None: they are). Checked after the
    download, on what is really in the bundle, not on what was asked."""
    wheels = list(wheels)
    torch = [w for w in wheels if w.name == "torch"]
    nvidia = sorted(w.name for w in wheels if w.name.startswith("nvidia-") and w.name != "nvidia-ml-py")
    if variant == "no-torch":
        return "torch is in a no-torch bundle" if torch else None
    if len(torch) != 1:
        return f"{len(torch)} torch wheels in the bundle, not 1"
    build = torch[0].local
    if variant == "cpu":
        if "linux" in plat and not build.startswith("cpu"):
            return f"{torch[0].filename} is not a CPU build (no +cpu label)"
        if nvidia:
            return f"a CPU bundle pulled CUDA libraries: {', '.join(nvidia)}"
        return None
    if build.startswith("cpu"):
        return f"{torch[0].filename} is the CPU build; the gpu variant needs the CUDA build"
    return None


def lock_text(entries: Iterable[tuple[str, str]], header: str) -> str:
    """pip's ``--require-hashes`` requirements for (wheel file name, sha256) pairs: one line
    per name and version, with a ``--hash`` per file of it (several platform builds)."""
    hashes: dict[tuple[str, str], list[str]] = {}
    for filename, digest in entries:
        wheel = parse_wheel(filename)
        hashes.setdefault((wheel.name, wheel.version), []).append(digest)
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for (name, version), digests in sorted(hashes.items()):
        lines.append(f"{name}=={version} " + " ".join(f"--hash=sha256:{d}" for d in sorted(set(digests))))
    return "\n".join(lines) + "\n"


def read_lock_names(text: str) -> set[str]:
    """The normalised names a lock file pins."""
    names = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(normalize(re.split(r"[=<>!~ ;\[]", line, maxsplit=1)[0]))
    return names


def bundle_stem(version: str, python: str, plat: str, variant: str) -> str:
    """``floydd-0.1.0-py311-manylinux_2_28_x86_64-cpu``: the tar's name and its top folder."""
    return f"floydd-{version}-py{python.replace('.', '')}-{plat}-{variant}"


def env_text(facts: dict[str, str]) -> str:
    """``KEY=value`` lines a shell can source (``bundle.env``, read by install.sh)."""
    return "".join(f"{key}={shlex.quote(str(value))}\n" for key, value in facts.items())


# -- file I/O ----------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def folder_members(folder: Path, under: str) -> list[tuple[str, Path, int]]:
    """Every file below ``folder`` as :func:`write_tar` members named ``under/RELATIVE``
    (0644), sorted; none when the folder is missing. The service units (``packaging/units``,
    its ``user/`` folder too) travel this way."""
    if not folder.is_dir():
        return []
    return [(f"{under}/{path.relative_to(folder).as_posix()}", path, 0o644)
            for path in sorted(folder.rglob("*")) if path.is_file() and "__pycache__" not in path.parts]


def write_tar(out: Path, members: Iterable[tuple[str, Path | bytes, int]], mtime: int) -> None:
    """Write an uncompressed tar (wheels are compressed already) of (name, file or bytes,
    mode) entries, sorted, owned by root, all dated ``mtime``: the same inputs give the same
    bytes. Written beside ``out`` and renamed, so a half-written bundle never has its name."""
    part = out.with_name(out.name + ".part")
    with tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for name, source, mode in sorted(members, key=lambda m: m[0]):
            parts = name.split("/")
            for depth in range(1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in dirs:
                    dirs.add(folder)
                    tar.addfile(_info(folder, tarfile.DIRTYPE, 0o755, 0, mtime))
            if isinstance(source, bytes):
                tar.addfile(_info(name, tarfile.REGTYPE, mode, len(source), mtime), io.BytesIO(source))
            else:
                with open(source, "rb") as f:
                    tar.addfile(_info(name, tarfile.REGTYPE, mode, os.fstat(f.fileno()).st_size, mtime), f)
    os.replace(part, out)


def _info(name: str, kind: bytes, mode: int, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, mtime
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info
