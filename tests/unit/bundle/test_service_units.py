"""packaging/units: the system unit (floydd.service) and the user unit (user/floydd.service).

They pass ``systemd-analyze verify`` (where systemd-analyze is installed), they say what keeps
jobs alive across a restart and bubblewrap working under the hardening, they travel in the
bundle, and the bundle's install.sh writes them for its prefix, group and job user. What the
kill mode means for a running job is tested with real processes in
tests/system/test_service_restart.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNITS = ROOT / "packaging" / "units"
SYSTEM_UNIT, USER_UNIT = UNITS / "floydd.service", UNITS / "user" / "floydd.service"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed on this machine")


def _load_bundlelib():
    spec = importlib.util.spec_from_file_location("floydd_bundlelib_units", ROOT / "packaging" / "bundlelib.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _settings(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` -> its values in order (a unit may repeat a key), comments dropped."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in path.read_text().replace("\\\n", " ").splitlines():   # a line ending in \ goes on
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return found


def _verify(unit: Path, tmp_path: Path, *, user: bool) -> tuple[int, list[str]]:
    """``systemd-analyze verify``: its exit code and what it says about this unit. An unknown
    key or a bad value is only a warning there (exit 0), so the warnings count as failures."""
    env = dict(os.environ)
    if user:    # a user manager wants a runtime dir of its own
        runtime = tmp_path / "xdg-runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = str(runtime)
    res = subprocess.run([ANALYZE, *(["--user"] if user else []), "verify", str(unit)], env=env,
                         capture_output=True, text=True, timeout=60)
    said = [line for line in (res.stdout + res.stderr).splitlines() if unit.name in line]
    return res.returncode, said + ([res.stderr.strip()] if res.returncode and not said else [])


def _pointed_at_floydd(unit: Path, into: Path) -> Path:
    """A copy of ``unit`` whose ExecStart names this machine's installed ``floydd`` script:
    verify refuses an ExecStart that is not an executable, and /opt/floydd exists only where
    the bundle was installed."""
    floydd = shutil.which("floydd") or str(Path(sys.executable).with_name("floydd"))
    assert os.access(floydd, os.X_OK), f"no floydd script installed ({floydd}): pip install -e ."
    into.mkdir(parents=True, exist_ok=True)
    text = unit.read_text()
    assert "ExecStart=/opt/floydd/bin/floydd " in text
    (into / unit.name).write_text(text.replace("ExecStart=/opt/floydd/bin/floydd ", f"ExecStart={floydd} "))
    return into / unit.name


@needs_analyze
@pytest.mark.parametrize("unit,user", [(SYSTEM_UNIT, False), (USER_UNIT, True)], ids=["system", "user"])
def test_the_units_pass_systemd_analyze_verify(unit, user, tmp_path):
    code, said = _verify(_pointed_at_floydd(unit, tmp_path / ("user" if user else "system")), tmp_path, user=user)
    assert code == 0 and said == [], said


@needs_analyze
def test_verify_would_catch_a_bad_unit(tmp_path):
    """The check above is not vacuous: a misspelt kill mode fails it."""
    copy = _pointed_at_floydd(SYSTEM_UNIT, tmp_path / "bad")
    copy.write_text(copy.read_text().replace("KillMode=process", "KillMode=proces"))
    code, said = _verify(copy, tmp_path, user=False)
    assert said and "kill mode" in said[0].lower(), said


def test_the_system_unit_stops_the_daemon_alone_and_restarts_it_on_failure():
    unit = _settings(SYSTEM_UNIT)
    assert unit["Service.ExecStart"] == ["/opt/floydd/bin/floydd start --system"]
    assert unit["Service.KillMode"] == ["process"]      # jobs' agents are in the same control group
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Install.WantedBy"] == ["multi-user.target"]
    assert "Service.StandardError" not in unit and "Service.StandardOutput" not in unit   # the journal
    # the state and the socket's folder, writable under ProtectSystem=strict
    assert unit["Service.StateDirectory"] == ["floydd"] and unit["Service.StateDirectoryMode"] == ["0700"]
    assert unit["Service.ReadWritePaths"] == ["/run/floydd"]
    assert unit["Service.ExecStartPre"] == ["+/usr/bin/install -d -o root -g floyd -m 0750 /run/floydd"]
    assert "Service.RuntimeDirectory" not in unit   # root's group: floydd refuses the folder (owned_dirs)
    for user_setting in ("User", "Group", "DynamicUser"):  # root: it hands each job to floyd-job
        assert f"Service.{user_setting}" not in unit


def test_the_system_units_hardening_leaves_bubblewrap_and_gpus_working():
    unit = _settings(SYSTEM_UNIT)
    assert unit["Service.ProtectSystem"] == ["strict"]
    assert unit["Service.ProtectHome"] == ["read-only"]
    breaks = {
        "PrivateUsers": "bwrap as root makes namespaces and mounts",
        "RestrictNamespaces": "bwrap unshares mount, pid, ipc (and net for builds)",
        "PrivateDevices": "GPUs are /dev/nvidia*", "DevicePolicy": "GPUs", "DeviceAllow": "GPUs",
        "ProtectClock": "implies a device allow-list: GPUs vanish",
        "NoNewPrivileges": "an AppArmor transition into bwrap's profile", "MemoryDenyWriteExecute": "jobs' JITs",
        "RestrictAddressFamilies": "inherited by jobs (InfiniBand)", "SystemCallFilter": "inherited by jobs",
        "UMask": "environments the job user must read",
    }
    present = {key: why for key, why in breaks.items() if f"Service.{key}" in unit}
    assert present == {}, present
    (dropped,) = unit["Service.CapabilityBoundingSet"]
    assert dropped.startswith("~")          # a deny list: everything bwrap, setpriv and the agent use stays
    needed = {"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_SYS_CHROOT", "CAP_CHOWN",
              "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_NET_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_MODULE"}
    assert needed.isdisjoint(dropped[1:].split()), needed & set(dropped[1:].split())


def test_the_user_unit_runs_floydd_start_in_the_foreground_without_sandboxing():
    unit = _settings(USER_UNIT)
    assert unit["Service.ExecStart"] == ["/opt/floydd/bin/floydd start"]
    assert unit["Service.KillMode"] == ["process"] and unit["Service.Restart"] == ["on-failure"]
    assert unit["Install.WantedBy"] == ["default.target"]
    sandboxing = [k for k in unit if k.split(".")[1].startswith(("Protect", "Private", "Restrict"))]
    assert sandboxing == []                 # in a user manager they take user namespaces bwrap needs


def test_the_bundle_carries_both_units(tmp_path):
    B = _load_bundlelib()
    members = B.folder_members(UNITS, "floydd-0.1.0-x/units")
    assert [(name, mode) for name, _, mode in members] == [("floydd-0.1.0-x/units/floydd.service", 0o644),
                                                          ("floydd-0.1.0-x/units/user/floydd.service", 0o644)]
    assert B.folder_members(tmp_path / "missing", "x/units") == []


# -- install.sh ----------------------------------------------------------------------------------

def _fake_bundle(tmp_path: Path) -> tuple[Path, Path]:
    """An unpacked bundle whose pip does nothing, and an existing venv at the prefix (install.sh
    upgrades one in place) whose floydd answers --version: what is left is the units' part."""
    top = tmp_path / "bundle"
    (top / "wheels").mkdir(parents=True)
    shutil.copy2(ROOT / "packaging" / "bundle" / "install.sh", top / "install.sh")
    shutil.copytree(UNITS, top / "units")
    py = "%d.%d" % sys.version_info[:2]
    (top / "bundle.env").write_text(f"FLOYDD_VERSION=0.0.0\nBUNDLE_PYTHON={py}\nBUNDLE_PLATFORM=test\n"
                                    "BUNDLE_VARIANT=no-torch\nBUNDLE_TORCH=none\n")
    (top / "requirements.lock").write_text("")
    with zipfile.ZipFile(top / "wheels" / "pip-0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("pip/__main__.py", "")
    prefix = tmp_path / "opt" / "floydd"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "pyvenv.cfg").write_text(f"home = {Path(os.path.realpath(sys.executable)).parent}\n")
    (prefix / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    (prefix / "bin" / "floydd").write_text("#!/bin/sh\necho floydd 0.0.0\n")
    (prefix / "bin" / "floydd").chmod(0o755)
    return top, prefix


def _install(top: Path, prefix: Path, *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run(["bash", str(top / "install.sh"), "--prefix", str(prefix), "--no-links",
                          "--python", sys.executable, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_install_writes_the_units_for_its_prefix_group_and_job_user(tmp_path):
    import grp
    import pwd
    top, prefix = _fake_bundle(tmp_path)
    group, user = grp.getgrgid(os.getgid()).gr_name, pwd.getpwuid(os.getuid()).pw_name   # both exist: none made
    units = tmp_path / "units"
    res = _install(top, prefix, "--system", "--group", group, "--job-user", user, "--unit-dir", str(units))
    system, user_unit = units / "system" / "floydd.service", units / "user" / "floydd.service"
    assert f"system unit: {system}" in res.stdout and f"user unit: {user_unit}" in res.stdout, res.stdout
    assert "no systemctl daemon-reload" in res.stdout        # a --unit-dir is not where systemd looks

    wrote = _settings(system)
    assert wrote["Service.ExecStart"] == [f"{prefix}/bin/floydd start --system"]
    assert wrote["Service.ExecStartPre"] == [f"+/usr/bin/install -d -o root -g {group} -m 0750 /run/floydd"]
    assert wrote["Service.Environment"] == [f"FLOYDD_SYSTEM_GROUP={group} FLOYDD_JOB_USER={user}"]
    shipped = _settings(SYSTEM_UNIT)
    changed = {k for k in shipped.keys() | wrote.keys() if shipped.get(k) != wrote.get(k)}
    assert changed == {"Service.ExecStart", "Service.ExecStartPre", "Service.Environment"}, changed
    assert user_unit.read_text() == USER_UNIT.read_text().replace("/opt/floydd/", f"{prefix}/")
    assert oct(system.stat().st_mode & 0o777) == "0o644" and not list(units.rglob("*.part"))
    if ANALYZE:                             # what it wrote is a valid unit too (its floydd exists)
        for unit, as_user in ((system, False), (user_unit, True)):
            code, said = _verify(unit, tmp_path, user=as_user)
            assert code == 0 and said == [], said


def test_install_with_no_units_writes_none(tmp_path):
    top, prefix = _fake_bundle(tmp_path)
    res = _install(top, prefix, "--no-units", "--unit-dir", str(tmp_path / "units"))
    assert not (tmp_path / "units").exists() and " unit" not in res.stdout, res.stdout


@pytest.mark.skipif(Path("/run/systemd/system").exists(), reason="systemd runs here: install.sh would use it")
def test_where_systemd_does_not_run_install_says_it_skipped_the_units(tmp_path):
    top, prefix = _fake_bundle(tmp_path)
    units = (Path("/etc/systemd/system/floydd.service"), Path("/etc/systemd/user/floydd.service"))
    before = {p: p.exists() for p in units}
    res = _install(top, prefix)
    assert "systemd is not running here: no service units installed" in res.stdout, res.stdout
    assert f"'{prefix}/bin/floydd start' under this box's own supervisor" in res.stdout, res.stdout
    assert {p: p.exists() for p in before} == before
