#!/usr/bin/env python3
"""Offline bundle: size per variant, and install time from it with no network, against a
plain ``pip install`` of the same wheels without hashes and a bare ``tar x``, same run.

    python bench/bundle_install.py                       # no-torch and cpu, 3 rounds
    python bench/bundle_install.py --variants no-torch,cpu,gpu --install no-torch,cpu
    python bench/bundle_install.py --smoke                # no-torch, 1 round (~1 minute)

Each variant is built with packaging/build-bundle from this machine's pip configuration.
Where the pinned torch's CUDA build is not available, ``--gpu-torch VERSION`` builds the gpu
variant with another version (and ``--find-links DIR`` passes a wheel folder through).
Installs run under ``unshare -n`` (a network namespace with nothing up) when that is
permitted, so they cannot reach an index; the output says when it is not. Per round, in
alternating order: ``install.sh --prefix NEW`` (hash-checked, what an operator runs) and
``pip install --no-index --find-links wheels`` of the same pins without hashes into a venv
made the same way. The target (issue 15) is under 60 s for the install without torch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="no-torch,cpu", help="comma-separated: no-torch, cpu, gpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpu-torch", default=None, metavar="VERSION", help="torch version of the gpu variant")
    ap.add_argument("--find-links", action="append", default=[], metavar="DIR")
    ap.add_argument("--install", default=None,
                    help="variants to time installing (default: all built; gpu unpacks gigabytes)")
    ap.add_argument("--smoke", action="store_true", help="no-torch only, one round")
    ap.add_argument("--dir", default=None, help="where to make the temp folder (default: system temp)")
    args = ap.parse_args()
    if args.smoke:
        args.variants, args.rounds = "no-torch", 1
    variants = args.variants.split(",")
    installs = args.install.split(",") if args.install else variants
    jail = _jail()
    print(f"python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f}; installs run "
          + ("with no network (unshare -n)" if jail else "WITH the network (unshare -n not permitted here)"))
    with tempfile.TemporaryDirectory(prefix="bench-bundle-", dir=args.dir) as tmp:
        work = Path(tmp)
        bundles = {v: _build(v, args, work / "dist") for v in variants}
        for variant in installs:
            _install_rounds(variant, bundles[variant], work, args.rounds, jail)
    return 0


def _build(variant: str, args: argparse.Namespace, out: Path) -> Path:
    cmd = [sys.executable, str(ROOT / "packaging" / "build-bundle"), "--variant", variant, "--out", str(out)]
    if variant == "gpu" and args.gpu_torch:
        cmd += ["--torch", args.gpu_torch]
    for folder in args.find_links:
        cmd += ["--find-links", folder]
    t = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"bundle {variant}: build failed:\n{res.stderr.strip()}")
    (bundle,) = out.glob(f"floydd-*-{variant}.tar")
    with tarfile.open(bundle) as tar:
        wheels = [m for m in tar.getmembers() if m.name.endswith(".whl")]
    torch = sum(m.size for m in wheels if "/wheels/torch-" in m.name
                or ("/wheels/nvidia_" in m.name and "/wheels/nvidia_ml_py-" not in m.name))
    print(f"bundle {variant:8s} {bundle.stat().st_size / MiB:8.1f} MiB, {len(wheels)} wheels "
          f"(torch and CUDA libraries: {torch / MiB:.1f} MiB), built in {time.monotonic() - t:.1f} s: {bundle.name}")
    return bundle


def _install_rounds(variant: str, bundle: Path, work: Path, rounds: int, jail: list[str]) -> None:
    unpacked = work / f"unpacked-{variant}"
    unpacked.mkdir()
    t = time.monotonic()
    subprocess.run(["tar", "xf", str(bundle), "-C", str(unpacked)], check=True)
    untar = time.monotonic() - t
    (top,) = unpacked.iterdir()
    plain = top / "plain.txt"  # the same pins, no hashes
    plain.write_text("".join(line.split(" --hash")[0] + "\n" for line in
                             (top / "requirements.lock").read_text().splitlines() if not line.startswith("#")))
    (pip_wheel,) = (top / "wheels").glob("pip-*.whl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env["PIP_CONFIG_FILE"] = os.devnull
    ours, base = [], []
    for i in range(rounds):
        order = ["ours", "plain"] if i % 2 == 0 else ["plain", "ours"]
        for who in order:
            venv = work / f"venv-{variant}-{i}-{who}"
            subprocess.run(["sync"], check=True)
            t = time.monotonic()
            if who == "ours":
                cmd = [*jail, "bash", str(top / "install.sh"), "--prefix", str(venv), "--no-links",
                       "--python", sys.executable]
                _run(cmd, env)
                ours.append(time.monotonic() - t)
            else:
                _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env)
                _run([*jail, str(venv / "bin" / "python"), f"{pip_wheel}/pip", "install", "--quiet", "--no-index",
                      "--find-links", str(top / "wheels"), "-r", str(plain), "--disable-pip-version-check",
                      "--no-warn-script-location"], env)
                base.append(time.monotonic() - t)
            shutil.rmtree(venv)
        print(f"install {variant:8s} round {i + 1}: install.sh {ours[-1]:6.1f} s   plain pip (no hashes) "
              f"{base[-1]:6.1f} s   ratio {ours[-1] / base[-1]:.2f}x")
    mo, mb = statistics.median(ours), statistics.median(base)
    print(f"install {variant:8s} median: install.sh {mo:.1f} s vs plain pip {mb:.1f} s ({mo / mb:.2f}x), "
          f"tar x of the bundle {untar:.2f} s ({mo / max(untar, 1e-3):.0f}x)"
          + (f"; target < 60 s without torch: {'met' if mo < 60 else 'MISSED'}" if variant == "no-torch" else ""))


def _run(cmd: list[str], env: dict[str, str]) -> None:
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}... failed:\n{(res.stdout + res.stderr)[-2000:]}")


def _jail() -> list[str]:
    """``unshare -n`` when it works here (root, or unprivileged user namespaces), else nothing."""
    for cmd in (["unshare", "-n"], ["unshare", "-rn"]):
        if shutil.which("unshare") and subprocess.run([*cmd, "true"], capture_output=True).returncode == 0:
            return cmd
    return []


if __name__ == "__main__":
    sys.exit(main())
