#!/usr/bin/env bash
# Backs up a folder into a local repository, restores it into an empty folder and compares the
# two: the whole data path with no cluster and no server.
#
#   scripts/try-it.sh [FOLDER] [WORKDIR]
#
# FOLDER defaults to this project's docs/; WORKDIR (default: a new temporary folder) receives
# the repository, its password file and the restored copy.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$(realpath "${1:-docs}")
work=$(realpath -m "${2:-$(mktemp -d -t neverwiped-try.XXXXXX)}")
mkdir -p "$work"

cargo build --release --quiet -p neverwiped-sidecar
sidecar="$PWD/target/release/neverwiped-sidecar"

export NEVERWIPED_REPOSITORY="$work/repository"
export NEVERWIPED_PASSWORD_FILE="$work/password"
[ -f "$NEVERWIPED_PASSWORD_FILE" ] || head -c 24 /dev/urandom | base64 > "$NEVERWIPED_PASSWORD_FILE"
[ -f "$NEVERWIPED_REPOSITORY/config" ] || "$sidecar" init

"$sidecar" backup "$source_dir"
"$sidecar" snapshots
rm -rf "$work/restored"
"$sidecar" restore latest --target "$work/restored"
diff -r --no-dereference "$source_dir" "$work/restored$source_dir"
echo "restored copy in $work/restored$source_dir is identical to $source_dir"
