#!/usr/bin/env bash
# Backs up a folder into a local repository, restores it into an empty folder and compares the
# two: the whole data path with no cluster and no server.
#
#   scripts/try-it.sh [FOLDER] [WORKDIR]
#
# FOLDER defaults to this project's docs/; WORKDIR (default: a new temporary folder) receives
# the repository, its password file and the restored copy. NEVERWIPED_SIDECAR_BIN names a
# sidecar binary to use instead of building one.
#
# The comparison covers every kind of entry: type, mode, owner, modification time (not of
# symlinks), a file's size and SHA-256, a symlink's target, a device's numbers. `diff -r` cannot
# compare FIFOs or devices, so each tree is described as a listing and the listings compared.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$(realpath "${1:-docs}")
work=$(realpath -m "${2:-$(mktemp -d -t neverwiped-try.XXXXXX)}")
mkdir -p "$work"

sidecar=${NEVERWIPED_SIDECAR_BIN:-}
if [ -z "$sidecar" ]; then
    cargo build --release --quiet -p neverwiped-sidecar
    sidecar="$PWD/target/release/neverwiped-sidecar"
fi

# One line per entry below $1, sorted by path, with everything the restore must give back.
describe_tree() {
    (
        cd "$1"
        find . -mindepth 1 -print0 | LC_ALL=C sort -z | while IFS= read -r -d '' path; do
            kind=$(stat -c '%F' -- "$path")
            common=$(stat -c '%a %u:%g' -- "$path")
            case "$kind" in
                "regular file" | "regular empty file")
                    detail="$(stat -c '%s %y' -- "$path") $(sha256sum -- "$path" | cut -d' ' -f1)" ;;
                "symbolic link") detail="-> $(readlink -- "$path")" ;;
                "character special file" | "block special file")
                    detail="$(stat -c '%t:%T %y' -- "$path")" ;;
                *) detail="$(stat -c '%y' -- "$path")" ;;
            esac
            printf '%s\t%s %s %s\n' "$path" "$kind" "$common" "$detail"
        done
    )
}

export NEVERWIPED_REPOSITORY="$work/repository"
export NEVERWIPED_PASSWORD_FILE="$work/password"
[ -f "$NEVERWIPED_PASSWORD_FILE" ] || head -c 24 /dev/urandom | base64 > "$NEVERWIPED_PASSWORD_FILE"
[ -f "$NEVERWIPED_REPOSITORY/config" ] || "$sidecar" init

"$sidecar" backup "$source_dir"
"$sidecar" snapshots
rm -rf "$work/restored"
"$sidecar" restore latest --target "$work/restored"
diff <(describe_tree "$source_dir") <(describe_tree "$work/restored$source_dir")
echo "restored copy in $work/restored$source_dir is identical to $source_dir"
