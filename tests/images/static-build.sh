#!/usr/bin/env bash
# tests/images/static-build.sh -- the images' binaries, built here as the Dockerfile builds them.
#
# No container engine is needed: this builds neverwiped-operator and neverwiped-sidecar with the
# same cargo command and RUSTFLAGS as the Dockerfile and scripts/build-images.sh (for this
# machine's architecture; tests/images/check_dockerfiles.py checks that the flags agree), then:
#
#   1. checks that both binaries are statically linked (no ELF interpreter, no needed shared
#      library; `file` and `ldd` agree when they are installed);
#   2. starts both in an empty environment, as in a minimal image: the sidecar prints its version,
#      the operator without NEVERWIPED_SIDECAR_IMAGE fails with the message that names it;
#   3. runs the sidecar: init of a local repository, backup of
#      a folder (nested directories, empty and large files, a symlink, modes), restore, and
#      compares the SHA-256 of every file and the symlink's target.
#
# With NEVERWIPED_STATIC_BINARIES=DIR, the binaries in DIR (those scripts/build-images.sh put in
# the images: .image-binaries/<arch>) are checked instead, and nothing is built.
#
# Usage: tests/images/static-build.sh   (from anywhere; exits non-zero on the first failure)
# Environment: CARGO_TARGET_DIR as cargo reads it; NEVERWIPED_STATIC_BUILD_JOBS (cargo -j);
#              NEVERWIPED_STATIC_BINARIES.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

die() {
  printf 'FAILED: %s\n' "$*" >&2
  exit 1
}
step() { printf '==> %s\n' "$*"; }

TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
[ -n "$TRIPLE" ] || die "cannot tell the host's target triple from rustc -vV"
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
JOBS=()
if [ -n "${NEVERWIPED_STATIC_BUILD_JOBS:-}" ]; then
  JOBS=(-j "$NEVERWIPED_STATIC_BUILD_JOBS")
fi

if [ -n "${NEVERWIPED_STATIC_BINARIES:-}" ]; then
  step "the binaries in $NEVERWIPED_STATIC_BINARIES (NEVERWIPED_STATIC_BINARIES)"
  OPERATOR=$NEVERWIPED_STATIC_BINARIES/neverwiped-operator
  SIDECAR=$NEVERWIPED_STATIC_BINARIES/neverwiped-sidecar
else
  step "cargo build --release --locked --target $TRIPLE (static, as in the Dockerfile)"
  started=$(date +%s)
  # Exactly the Dockerfile's RUSTFLAGS (checked by check_dockerfiles.py).
  RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build "${JOBS[@]}" --release --locked --target "$TRIPLE" \
    -p neverwiped-operator --bin neverwiped-operator \
    -p neverwiped-sidecar --bin neverwiped-sidecar
  printf 'built in %ss\n' "$(($(date +%s) - started))"
  OPERATOR=$TARGET_DIR/$TRIPLE/release/neverwiped-operator
  SIDECAR=$TARGET_DIR/$TRIPLE/release/neverwiped-sidecar
fi

step "statically linked"
for binary in "$OPERATOR" "$SIDECAR"; do
  [ -x "$binary" ] || die "$binary was not built"
  if readelf --program-headers "$binary" | grep -q INTERP; then
    die "$binary has an ELF interpreter: it is dynamically linked"
  fi
  if readelf --dynamic "$binary" | grep -q NEEDED; then
    die "$binary needs shared libraries: $(readelf --dynamic "$binary" | grep NEEDED | tr -s ' ')"
  fi
  if command -v file >/dev/null; then
    description=$(file -b "$binary")
    case "$description" in
      *"statically linked"* | *"static-pie linked"*) ;;
      *) die "file says $binary is: $description" ;;
    esac
  fi
  if command -v ldd >/dev/null; then
    # ldd exits non-zero for a static binary; what it prints is what counts.
    linked=$(ldd "$binary" 2>&1 || true)
    case "$linked" in
      *"not a dynamic executable"* | *"statically linked"*) ;;
      *) die "ldd lists libraries of $binary: $linked" ;;
    esac
  fi
  printf '%s: static, %s bytes\n' "$(basename "$binary")" "$(stat -c %s "$binary")"
done

step "start in an empty environment"
version=$(env -i "$SIDECAR" --version) || die "the sidecar does not start"
printf '%s\n' "$version"
case "$version" in
  neverwiped-sidecar\ *) ;;
  *) die "unexpected version line: $version" ;;
esac
if output=$(env -i "$OPERATOR" 2>&1); then
  die "the operator started without NEVERWIPED_SIDECAR_IMAGE"
fi
case "$output" in
  *NEVERWIPED_SIDECAR_IMAGE*) printf 'operator: %s\n' "$(printf '%s\n' "$output" | head -n 1)" ;;
  *) die "the operator failed otherwise than for its missing image: $output" ;;
esac

step "init, backup, restore with the static sidecar"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/data/app/deep/er" "$work/data/app/empty-dir" "$work/tmp"
printf 'hello, world\n' > "$work/data/app/hello.txt"
: > "$work/data/app/empty.txt"
head -c 3000000 /dev/urandom > "$work/data/app/deep/er/random.bin"
for i in $(seq 1 2000); do printf 'line %s of a log that repeats\n' "$i"; done > "$work/data/app/deep/log.txt"
chmod 600 "$work/data/app/hello.txt"
chmod 755 "$work/data/app/deep"
ln -s deep/log.txt "$work/data/app/link"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/password"

sidecar() {
  env -i TMPDIR="$work/tmp" NEVERWIPED_REPOSITORY="$work/repo" \
    NEVERWIPED_PASSWORD_FILE="$work/password" "$SIDECAR" --log-format text "$@"
}
sidecar init >/dev/null || die "init failed"
sidecar backup "$work/data/app" --tag static-build >/dev/null || die "backup failed"
sidecar snapshots || die "snapshots failed"
sidecar restore latest --target "$work/restored" >/dev/null || die "restore failed"

restored=$work/restored$work/data/app
[ -d "$restored" ] || die "the restore did not create $restored"
(cd "$work/data/app" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/source.sums"
(cd "$restored" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/restored.sums"
diff -u "$work/source.sums" "$work/restored.sums" || die "restored files differ from the source"
[ "$(readlink "$restored/link")" = "deep/log.txt" ] || die "the symlink was not restored"
[ -d "$restored/empty-dir" ] || die "the empty directory was not restored"
[ "$(stat -c %a "$restored/hello.txt")" = 600 ] || die "the mode of hello.txt was not restored"
printf '%s files restored identical\n' "$(wc -l < "$work/source.sums")"

printf 'OK: static binaries build, start and round-trip data\n'
