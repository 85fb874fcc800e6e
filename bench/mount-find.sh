#!/usr/bin/env bash
# Memory of the FUSE mount while `find` walks every snapshot (issue 35): the mount's peak RSS
# should not grow with the number of snapshots walked.
#
#   bench/mount-find.sh [--files N] [--snapshots S] [--bin PATH] [--work DIR]
#
# Makes N empty files (default 100 000) in folders of 1 000, backs them up S times (default 50)
# into a fresh local repository (the snapshots share every tree: the repository stays small),
# mounts it, runs `find MOUNT/snapshots` (which lists every folder of every snapshot and looks up
# the folders, not the files), and prints the entries found, the time taken and the mount
# process's peak and current RSS (VmHWM and VmRSS, after the find), also appended to
# WORK/mount-find.jsonl. Needs root (or fusermount3) and /dev/fuse. The binary is
# target/release/neverwiped-sidecar unless --bin names another (a debug build works too).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
files=100000
snapshots=50
work="${NEVERWIPED_BENCH_WORK:-/tmp/neverwiped-bench}/mount-find"
bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/neverwiped-sidecar"
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files="$2"; shift 2 ;;
    --snapshots) snapshots="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "mount-find.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p neverwiped-sidecar" >&2; exit 1; }
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
mkdir -p "$work"
data="$work/data-$files"
if [ ! -f "$data.done" ]; then
  log "making $files empty files in $data"
  rm -rf "$data"
  python3 - "$data" "$files" <<'PY'
import os, sys
root, files = sys.argv[1], int(sys.argv[2])
for index in range(files):
    folder = os.path.join(root, f"folder-{index // 1000:04d}")
    if index % 1000 == 0:
        os.makedirs(folder)
    open(os.path.join(folder, f"file-{index:07d}"), "w").close()
PY
  touch "$data.done"
fi
repo="$work/repo-$files-$snapshots"
secrets="$work/secrets"; mkdir -p "$secrets"; chmod 700 "$secrets"
[ -s "$secrets/password" ] || { head -c 24 /dev/urandom | base64 > "$secrets/password"; chmod 600 "$secrets/password"; }
export NEVERWIPED_PASSWORD_FILE="$secrets/password" NEVERWIPED_REPOSITORY="$repo"
if [ ! -f "$repo.done" ]; then
  rm -rf "$repo"
  "$bin" -q init > /dev/null
  for night in $(seq 1 "$snapshots"); do
    "$bin" -q backup --host "night-$night" "$data" > /dev/null
  done
  touch "$repo.done"
  log "$snapshots snapshots of $files files in $repo"
fi
mnt="$work/mnt"
mkdir -p "$mnt"
mountpoint -q "$mnt" && umount "$mnt"
"$bin" -q mount "$mnt" 2> "$work/mount.log" &
pid=$!
for _ in $(seq 600); do [ -e "$mnt/snapshots/latest" ] && break; sleep 0.1; done
[ -e "$mnt/snapshots/latest" ] || { log "no mount: $(cat "$work/mount.log")"; kill "$pid"; exit 1; }
start=$(date +%s.%N)
found=$(find "$mnt/snapshots" -mindepth 1 | wc -l)
seconds=$(echo "$(date +%s.%N) - $start" | bc)
peak=$(awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$pid/status")
now=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pid/status")
umount "$mnt"
wait "$pid"
printf '{"files":%d,"snapshots":%d,"found":%d,"find_s":%.1f,"peak_rss_mib":%s,"rss_after_find_mib":%s,"bin":"%s"}\n' \
  "$files" "$snapshots" "$found" "$seconds" "$peak" "$now" "$bin" | tee -a "$work/mount-find.jsonl"
