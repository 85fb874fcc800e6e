# Shared pieces of the benchmark scripts (bench/run.sh, bench/gate.sh): sourced, not run.
#
# Expects HERE, ROOT and SHARED set by the script that sources it; PEERS_BIN may be set too.

PEERS_BIN="${PEERS_BIN:-${NEVERWIPED_PEERS_BIN:-/opt/neverwiped-peers/bin}}"

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# scale_fraction N: --scale N (1/N of the reference), a fraction like 2/5 as it is, 1 for full scale
scale_fraction() {
  case "$1" in
    */*) printf '%s' "$1" ;;
    *[!0-9]*|""|0) return 1 ;;
    1) printf '1' ;;
    *) printf '1/%s' "$1" ;;
  esac
}

need_gnu_time() {
  [ -x /usr/bin/time ] || {
    log "installing GNU time"; apt-get install -y -qq time >/dev/null || die "GNU time (/usr/bin/time) is needed: apt-get install time"
  }
}

# need_peer NAME [INSTALL-ARGS…]: path of a peer binary, installing the peers when missing
need_peer() {
  local name=$1 bin; shift
  bin="$(command -v "$name" 2>/dev/null || true)"
  [ -n "$bin" ] || [ ! -x "$PEERS_BIN/$name" ] || bin="$PEERS_BIN/$name"
  if [ -z "$bin" ]; then
    log "$name is missing: running $SHARED/tools/install-peers.sh $*"
    "$SHARED/tools/install-peers.sh" "$@" >&2 || die "could not install $name ($SHARED/tools/install-peers.sh failed)"
    bin="$PEERS_BIN/$name"
  fi
  [ -x "$bin" ] || die "$name not found (looked in PATH and $PEERS_BIN)"
  printf '%s' "$bin"
}

# build_sidecar BUILD DEST: builds the release sidecar of the work tree (BUILD=1) and copies the
# binary to DEST, so that other builds in the work tree cannot change it half-way through.
build_sidecar() {
  local build=$1 dest=$2 bin
  if [ "$build" = 1 ]; then
    log "building neverwiped (cargo build --release -p neverwiped-sidecar)"
    command -v cargo >/dev/null || die "cargo is needed to build neverwiped (or give --no-build with a built target/release/neverwiped-sidecar)"
    (cd "$ROOT" && cargo build --release -q -p neverwiped-sidecar) || die "the release build failed"
  fi
  bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/neverwiped-sidecar"
  [ -x "$bin" ] || die "no $bin (drop --no-build)"
  mkdir -p "$(dirname "$dest")"
  cp "$bin" "$dest"
}

# hash_tree DIR: "SHA-256  ./path" of every file under DIR, sorted by path (sha256sum's format)
hash_tree() {
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r -P 2 -n 256 sha256sum | sort -k2)
}

# describe_fs DIR: the file system a folder is on, and for ext4 whether it has a journal (ext4
# without one allocates inodes slowly right after many were freed; see settle_after_deletion).
describe_fs() {
  local type source journal=""
  type=$(findmnt -n -o FSTYPE --target "$1" 2>/dev/null | head -1); type=${type:-?}
  source=$(findmnt -n -o SOURCE --target "$1" 2>/dev/null | head -1); source=${source:-?}
  if [ "$type" = ext4 ]; then
    if ls /proc/fs/jbd2 2>/dev/null | grep -q "^${source#/dev/}-"; then journal=", journaled"; else journal=", no journal"; fi
  fi
  echo "$type on $source$journal"
}

ver() { "$@" 2>&1 | head -1 | tr -d '"\\' || true; }
busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
pid_cpu_jiffies() { if [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ]; then awk '{print $14+$15}' "/proc/$1/stat"; else echo 0; fi; }
dir_bytes() { if [ -d "$1" ]; then du -sb "$1" | cut -f1; else echo 0; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# settle_after_deletion: waits until SETTLE_SECONDS have passed since the last restore's files
# were deleted (restore_deleted_at, seconds since 1970). ext4 without a journal skips inodes
# freed in the last 30 s (35 while their inode table block is dirty) when it allocates new ones,
# reading each one's on-disk inode: a restore of 10 038 files right after another tool's restore
# was deleted then spent up to 2 s of extra kernel time in the inode allocator, depending only on
# how soon after the deletion it ran. Waiting gives every tool's restore the same file system.
restore_deleted_at=0
SETTLE_SECONDS=${SETTLE_SECONDS:-36}
settle_after_deletion() {
  local wait=$(( restore_deleted_at + SETTLE_SECONDS - $(date +%s) ))
  if [ "$wait" -gt 0 ]; then
    log "waiting ${wait} s before the restore: the last restore's inodes were freed less than ${SETTLE_SECONDS} s ago"
    sleep "$wait"
  fi
}
