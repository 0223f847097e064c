"""packaging/bundlelib.py: wheel names, platform tags, each variant's torch, lock text."""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load():
    # packaging/ is no Python package (it would shadow PyPA's ``packaging``): load by path
    spec = importlib.util.spec_from_file_location("floydd_bundlelib", ROOT / "packaging" / "bundlelib.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


B = _load()
CPU = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
CUDA = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
LINUX = "manylinux_2_28_x86_64"


def test_wheel_names_split_and_normalise():
    w = B.parse_wheel("/x/Sqlite_Utils-4.2.1-py3-none-any.whl")
    assert (w.filename, w.name, w.version, w.platforms) == ("Sqlite_Utils-4.2.1-py3-none-any.whl", "sqlite-utils",
                                                            "4.2.1", ("any",))
    w = B.parse_wheel("aiohttp-3.14.5-1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl")
    assert (w.version, w.platforms) == ("3.14.5", ("manylinux2014_x86_64", "manylinux_2_17_x86_64"))
    assert B.parse_wheel(CPU).local == "cpu" and B.parse_wheel(CUDA).local == ""
    for bad in ("floydd-0.1.0.tar.gz", "notawheel.whl", "a-1-py3.whl"):
        with pytest.raises(ValueError, match="not a wheel"):
            B.parse_wheel(bad)


def test_a_glibc_platform_takes_every_older_manylinux_tag_and_its_aliases():
    tags = B.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64"} <= set(tags)
    assert not any(t.startswith("manylinux_2_29") for t in tags) and len(tags) == 24 + 3
    # a legacy name means its glibc level; an alias exists only for the arches it was defined for
    assert B.platform_tags("manylinux2014_aarch64") == [
        "manylinux_2_17_aarch64", "manylinux2014_aarch64", *(f"manylinux_2_{m}_aarch64" for m in range(16, 4, -1))]
    assert B.platform_tags("musllinux_1_2_x86_64") == ["musllinux_1_2_x86_64", "musllinux_1_1_x86_64"]
    assert B.platform_tags("macosx_11_0_arm64") == ["macosx_11_0_arm64"]


def test_each_variant_asks_for_its_own_torch_build():
    assert B.torch_requirement("no-torch", "2.13.0", LINUX) is None
    assert B.torch_requirement("cpu", "2.13.0", LINUX) == "torch==2.13.0+cpu"
    assert B.torch_requirement("cpu", "2.13.0", "macosx_11_0_arm64") == "torch==2.13.0"
    # the +cpu build sorts above the plain (CUDA) one, so the gpu variant excludes it
    assert B.torch_requirement("gpu", "2.13.0", LINUX) == "torch==2.13.0,!=2.13.0+cpu"
    with pytest.raises(ValueError, match="macOS"):
        B.torch_requirement("gpu", "2.13.0", "macosx_11_0_arm64")
    with pytest.raises(ValueError, match="not one of"):
        B.torch_requirement("rocm", "2.13.0", LINUX)


def test_the_wheels_really_downloaded_are_checked_against_the_variant():
    base = [B.parse_wheel("click-8.1.0-py3-none-any.whl"), B.parse_wheel("nvidia_ml_py-13.0-py3-none-any.whl")]
    nccl = B.parse_wheel("nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl")
    cpu, cuda = B.parse_wheel(CPU), B.parse_wheel(CUDA)
    assert B.check_variant("no-torch", base, LINUX) is None
    assert "torch is in" in B.check_variant("no-torch", [*base, cpu], LINUX)
    assert B.check_variant("cpu", [*base, cpu], LINUX) is None  # nvidia-ml-py is no CUDA library
    assert "not a CPU build" in B.check_variant("cpu", [*base, cuda], LINUX)
    assert "nvidia-nccl-cu13" in B.check_variant("cpu", [*base, cpu, nccl], LINUX)
    assert B.check_variant("gpu", [*base, cuda, nccl], LINUX) is None
    assert "CPU build" in B.check_variant("gpu", [*base, cpu], LINUX)
    assert "0 torch wheels" in B.check_variant("gpu", base, LINUX)


def test_the_lock_pins_each_wheel_with_its_hashes_in_pips_format():
    text = B.lock_text([("Zeroconf-0.1-cp311-cp311-manylinux_2_17_x86_64.whl", "b" * 64),
                        ("zeroconf-0.1-cp311-cp311-musllinux_1_1_x86_64.whl", "a" * 64),
                        (CPU, "c" * 64)], "first\nsecond")
    assert text.splitlines() == ["# first", "# second",
                                 f"torch==2.13.0+cpu --hash=sha256:{'c' * 64}",
                                 f"zeroconf==0.1 --hash=sha256:{'a' * 64} --hash=sha256:{'b' * 64}"]
    assert B.read_lock_names(text + "Foo_Bar[x]>=1 ; python_version>'3'\n") == {"torch", "zeroconf", "foo-bar"}


def test_bundle_env_is_shell_quoted_and_names_are_stable():
    assert B.env_text({"A": "x y", "B": "it's"}) == "A='x y'\nB='it'\"'\"'s'\n"
    assert B.bundle_stem("0.1.0", "3.11", LINUX, "gpu") == "floydd-0.1.0-py311-manylinux_2_28_x86_64-gpu"


def test_the_tar_is_reproducible_and_has_its_folders(tmp_path):
    (tmp_path / "w.whl").write_bytes(b"wheel")
    members = [("top/wheels/w.whl", tmp_path / "w.whl", 0o644), ("top/install.sh", b"#!/bin/sh\n", 0o755)]
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    B.write_tar(a, members, 1_700_000_000)
    B.write_tar(b, list(reversed(members)), 1_700_000_000)
    assert a.read_bytes() == b.read_bytes() and not list(tmp_path.glob("*.part"))
    with tarfile.open(fileobj=io.BytesIO(a.read_bytes())) as tar:
        listing = [(m.name, m.isdir(), m.mode, m.uname) for m in tar.getmembers()]
        assert tar.extractfile("top/wheels/w.whl").read() == b"wheel"
    assert listing == [("top", True, 0o755, "root"), ("top/install.sh", False, 0o755, "root"),
                       ("top/wheels", True, 0o755, "root"), ("top/wheels/w.whl", False, 0o644, "root")]
