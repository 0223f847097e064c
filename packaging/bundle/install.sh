#!/usr/bin/env bash
# Install floydd from this bundle with no network: a venv at PREFIX (default /opt/floydd)
# filled by pip from wheels/ only, every file checked against requirements.lock's hashes.
#
#   ./install.sh                      # /opt/floydd, links in /usr/local/bin
#   sudo ./install.sh --system        # also the floyd group and the floyd-job user
#   ./install.sh --prefix ~/floydd --bin-dir ~/.local/bin
#
# Options: --prefix DIR, --bin-dir DIR, --no-links, --python PATH (a Python X.Y matching the
# bundle), --system [--group NAME] [--job-user NAME]. Running it again upgrades in place.
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
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
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

command -v bwrap >/dev/null 2>&1 ||
  note "bubblewrap (bwrap) is not installed: jobs would run without a sandbox (it is a system package, not in this bundle)"

cat <<EOF
floydd $FLOYDD_VERSION installed in $prefix ($BUNDLE_VARIANT bundle, torch: $BUNDLE_TORCH).
Next, on the lab's first box:    $floydd_cmd init --name LAB
      on every box that joins:   $floydd_cmd join TOKEN    (TOKEN from '$floydd_cmd token create' on a member)
EOF
