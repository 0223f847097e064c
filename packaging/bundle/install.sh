#!/usr/bin/env bash
# Install floydd from this bundle with no network: a venv at PREFIX (default /opt/floydd)
# filled by pip from wheels/ only, every file checked against requirements.lock's hashes.
#
#   ./install.sh                      # /opt/floydd, links in /usr/local/bin
#   sudo ./install.sh --system        # also the floyd group and the floyd-job user
#   ./install.sh --prefix ~/floydd --bin-dir ~/.local/bin
#
# Options: --prefix DIR, --bin-dir DIR, --no-links, --python PATH (a Python X.Y matching the
# bundle), --system [--group NAME] [--job-user NAME], --unit-dir DIR, --no-units. As root where
# systemd runs it installs the service units (units/) in /etc/systemd (--unit-dir: elsewhere,
# even without systemd). Running it again upgrades in place.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# FLOYDD_VERSION, BUNDLE_PYTHON, BUNDLE_PLATFORM, BUNDLE_VARIANT, BUNDLE_TORCH
. "$here/bundle.env"

prefix=/opt/floydd
bindir=/usr/local/bin
bindir_given=0
links=1
python=python3
system=0
group=floyd
job_user=floyd-job
units=1
unitdir=/etc/systemd
unitdir_given=0

die() { echo "install.sh: $1" >&2; [ -z "${2:-}" ] || echo "hint: $2" >&2; exit 2; }
note() { echo "install.sh: $*"; }
value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 wants a value" "see ./install.sh --help"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) value "$@"; prefix=$2; shift 2 ;;
    --bin-dir) value "$@"; bindir=$2; bindir_given=1; shift 2 ;;
    --no-links) links=0; shift ;;
    --python) value "$@"; python=$2; shift 2 ;;
    --system) system=1; shift ;;
    --group) value "$@"; group=$2; shift 2 ;;
    --job-user) value "$@"; job_user=$2; shift 2 ;;
    --unit-dir) value "$@"; unitdir=$2; unitdir_given=1; shift 2 ;;
    --no-units) units=0; shift ;;
    -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown option $1" "see ./install.sh --help" ;;
  esac
done

# -- the interpreter: the bundle's wheels are built for one Python X.Y -------------------------
command -v "$python" >/dev/null 2>&1 ||
  die "no $python here" "install Python $BUNDLE_PYTHON, or pass --python PATH"
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) ||
  die "$python does not run as a Python" "pass --python PATH to a Python $BUNDLE_PYTHON"
[ "$have" = "$BUNDLE_PYTHON" ] ||
  die "this bundle is for Python $BUNDLE_PYTHON and $python is $have" \
      "pass --python PATH to a Python $BUNDLE_PYTHON, or build a bundle with --python $have"

# -- the venv, then pip from the bundle's own pip wheel (no ensurepip needed) ------------------
if [ -e "$prefix" ] && [ ! -f "$prefix/pyvenv.cfg" ] && [ -n "$(ls -A "$prefix" 2>/dev/null)" ]; then
  die "$prefix exists and is not a venv" "remove it or pass --prefix DIR"
fi
[ -f "$prefix/pyvenv.cfg" ] || "$python" -m venv --without-pip "$prefix"
pip_wheel=$(ls "$here"/wheels/pip-*.whl 2>/dev/null | head -n 1)
[ -n "$pip_wheel" ] || die "no pip wheel in $here/wheels" "rebuild the bundle with packaging/build-bundle"

# Only the bundle counts: no pip.conf, no PIP_* settings of this box (an index, a constraint).
for var in $(env | sed -n 's/^\(PIP_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$var"; done
PIP_CONFIG_FILE=/dev/null "$prefix/bin/python" "$pip_wheel/pip" install --quiet --no-index \
  --find-links "$here/wheels" --require-hashes -r "$here/requirements.lock" \
  --disable-pip-version-check --no-warn-script-location
"$prefix/bin/floydd" --version >/dev/null

# -- commands on PATH --------------------------------------------------------------------------
floydd_cmd="$prefix/bin/floydd"
if [ "$links" = 1 ]; then
  [ "$bindir_given" = 0 ] || mkdir -p "$bindir"
  if [ -d "$bindir" ] && [ -w "$bindir" ]; then
    for cmd in floyd floydd; do ln -sfn "$prefix/bin/$cmd" "$bindir/$cmd"; done
    [ "$(command -v floydd || true)" != "$bindir/floydd" ] || floydd_cmd=floydd
  elif [ "$bindir_given" = 1 ]; then
    die "cannot write to $bindir" "run as root, or pass a --bin-dir you can write to"
  else
    note "not linking floyd and floydd into $bindir (not writable); add $prefix/bin to PATH"
  fi
fi

# -- system mode: the group that may use the daemon, the user jobs run as ----------------------
if [ "$system" = 1 ]; then
  if [ "$(id -u)" != 0 ]; then
    note "--system: not root, so no '$group' group or '$job_user' user made (run again as root)"
  else
    getent group "$group" >/dev/null || groupadd --system "$group"
    if ! id -u "$job_user" >/dev/null 2>&1; then
      nologin=$(command -v nologin || echo /bin/false)
      useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell "$nologin" --comment "floydd jobs" "$job_user"
    fi
    note "group '$group' (people who may use the daemon: usermod -aG $group NAME), job user '$job_user'"
  fi
fi

# -- service units: the system one with --system, the user one for everyone (units/) -----------
# The shipped units run /opt/floydd/bin/floydd as the floyd group's daemon; each copy is written
# for this prefix, group and job user. systemd is told only where it runs (/run/systemd/system).
put_unit() {  # SRC DEST [system]: SRC rewritten for this install, written atomically
  mkdir -p "$(dirname "$2")"
  sed -e "s|^ExecStart=/opt/floydd/bin/floydd |ExecStart=$prefix_abs/bin/floydd |" \
      -e "s|^\(ExecStartPre=.* -g \)floyd |\1$group |" "$1" >"$2.part"
  if [ "${3:-}" = system ] && { [ "$group" != floyd ] || [ "$job_user" != floyd-job ]; }; then
    sed -i -e "/^\[Service\]\$/a # install.sh --group/--job-user (FLOYDD_JOB_USER wins over job_user in floydd.toml)" \
        -e "/^\[Service\]\$/a Environment=FLOYDD_SYSTEM_GROUP=$group FLOYDD_JOB_USER=$job_user" "$2.part"
  fi
  chmod 0644 "$2.part"
  mv -f "$2.part" "$2"
}
systemd_runs=0
[ -d /run/systemd/system ] && systemd_runs=1
service=0
if [ "$units" = 0 ]; then
  :
elif [ ! -f "$here/units/floydd.service" ]; then
  note "no service units in this bundle (units/): none installed"
elif [ "$unitdir_given" = 0 ] && [ "$systemd_runs" = 0 ]; then
  start_cmd="$prefix/bin/floydd start"
  [ "$system" = 0 ] || start_cmd="$start_cmd --system"
  note "systemd is not running here: no service units installed (they are in $here/units); run" \
       "'$start_cmd' under this box's own supervisor"
elif [ "$unitdir_given" = 0 ] && [ "$(id -u)" != 0 ]; then
  note "not root: no service units installed; for a daemon of your own under systemd --user:" \
       "sed 's|/opt/floydd/|$prefix/|' $here/units/user/floydd.service > ~/.config/systemd/user/floydd.service;" \
       "systemctl --user enable --now floydd"
else
  prefix_abs=$(cd "$prefix" && pwd)
  case "$prefix_abs$group$job_user" in
    *[!A-Za-z0-9/._+-]*) die "cannot write service units for '$prefix_abs' (group '$group', job user '$job_user'):" \
                             "only letters, digits and / . _ + - (or pass --no-units)" ;;
  esac
  if [ "$system" = 1 ]; then
    put_unit "$here/units/floydd.service" "$unitdir/system/floydd.service" system
    note "system unit: $unitdir/system/floydd.service (KillMode=process: restarting it leaves jobs running)"
  fi
  if [ -f "$here/units/user/floydd.service" ]; then
    put_unit "$here/units/user/floydd.service" "$unitdir/user/floydd.service"
    note "user unit: $unitdir/user/floydd.service (anyone may run their own: systemctl --user enable --now floydd)"
  fi
  if [ "$unitdir_given" = 1 ]; then
    note "units written to $unitdir only: no systemctl daemon-reload (run it once they are where systemd looks)"
  else
    systemctl daemon-reload || note "systemctl daemon-reload failed: run it yourself"
    if [ "$system" = 1 ]; then
      service=1
      ! systemctl is-active --quiet floydd ||
        note "floydd is running: 'systemctl restart floydd' starts this version (running jobs carry on)"
    fi
  fi
fi

command -v bwrap >/dev/null 2>&1 ||
  note "bubblewrap (bwrap) is not installed: jobs would run without a sandbox (it is a system package, not in this bundle)"

cat <<EOF
floydd $FLOYDD_VERSION installed in $prefix ($BUNDLE_VARIANT bundle, torch: $BUNDLE_TORCH).
Next, on the lab's first box:    $floydd_cmd init --name LAB
      on every box that joins:   $floydd_cmd join TOKEN    (TOKEN from '$floydd_cmd token create' on a member)
EOF
[ "$service" = 0 ] || cat <<EOF
As the service: run init and join as  FLOYDD_SYSTEM=1 $floydd_cmd init|join ...  (its state), then
                                 systemctl enable --now floydd     (its log: journalctl -u floydd)
EOF
