#!/usr/bin/env bash
# The README's first command: digits end to end on the embedded single-node default.
# Makes the images, uploads them as a dataset, trains twice with different
# learning rates, then shows both runs side by side and fetches the output.
# Each run works in a fresh folder of its own (private to its user) under
# FLOYD_DEMO_DIR (default: the temp dir), so it can be run again, and by anyone.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
parent="${FLOYD_DEMO_DIR:-${TMPDIR:-/tmp}}"
mkdir -p "$parent"
work="$(mktemp -d "$parent/floyd-digits.XXXXXX")"
echo "digits: working in $work"
cp "$here/train.py" "$work/"
cd "$work"
python "$here/make_data.py" data >/dev/null
floyd init digits
echo 'data/' >> .floydignore
floyd data upload data --name digits-images -m "sklearn digits as PGM files"
floyd run --cpu --data digits-images:/input --param lr=0.05 -m "lr 0.05" -f "python train.py"
first=$(floyd status --json | python -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
floyd run --cpu --data digits-images:/input --param lr=0.01 -m "lr 0.01" -f "python train.py"
second=$(floyd status --json | python -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
floyd compare "$first" "$second"
floyd output "$second" "$work/output-${second//\//-}"
ls -l "$work/output-${second//\//-}"
