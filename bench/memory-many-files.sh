#!/usr/bin/env bash
# Peak memory of backup, check, prune and restore on a tree of many files (default 1 000 000).
#
#   bench/memory-many-files.sh [--files N] [--work DIR] [--bin PATH]
#
# Makes the tree with bench/many_files.py (reused when its manifest is there; ~6.6 KB a file, so
# ~6.6 GB for a million: put --work on a disk with room), then into a fresh local repository:
# first backup, the changed night (many_files.py apply), a backup of it, `forget --keep-last 1`,
# `prune` (which then has the first snapshot's lost files to remove), `check`, and a restore of the
# changed night into WORK/restored, checked file by file against the tree's SHA-256 manifest; each
# command under GNU time. Prints one line per command (wall s, CPU s, peak RSS MiB) and writes them to
# WORK/memory.jsonl. neverwiped alone; the binary is target/release/neverwiped-sidecar unless
# --bin names another.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
files=1000000
work="${NEVERWIPED_BENCH_WORK:-/tmp/neverwiped-bench}/memory"
bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/neverwiped-sidecar"
seed="${SEED:-20240301}"
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "memory-many-files.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p neverwiped-sidecar" >&2; exit 1; }
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
mkdir -p "$work"
data="$work/data-$files"
if [ ! -f "$data.sha256" ]; then
  log "making $files files in $data (bench/many_files.py make)"
  python3 "$HERE/many_files.py" make "$data" "$files" "$seed"
fi
python3 "$HERE/many_files.py" revert "$data" "$files" "$seed"
repo="$work/repo"
rm -rf "$repo"
secrets="$work/secrets"; mkdir -p "$secrets"; chmod 700 "$secrets"
[ -s "$secrets/password" ] || { head -c 24 /dev/urandom | base64 > "$secrets/password"; chmod 600 "$secrets/password"; }
export NEVERWIPED_PASSWORD_FILE="$secrets/password" NEVERWIPED_REPOSITORY="$repo"
out="$work/memory.jsonl"; : > "$out"

run() { # NAME COMMAND...: one measured command
  local name=$1 tf="$work/time.txt"; shift
  /usr/bin/time -v -o "$tf" "$@" > "$work/$name.log" 2>&1 || { log "$name failed: $(tail -3 "$work/$name.log")"; exit 1; }
  local wall cpu rss
  wall=$(awk -F': ' '/Elapsed/{n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$tf")
  cpu=$(awk -F': ' '/User time/{u=$2} /System time/{s=$2} END{print u+s}' "$tf")
  rss=$(awk -F': ' '/Maximum resident set size/{printf "%.1f", $2/1024}' "$tf")
  printf '{"command":"%s","files":%d,"wall_s":%s,"cpu_s":%s,"max_rss_mib":%s,"load1":"%s"}\n' \
    "$name" "$files" "$wall" "$cpu" "$rss" "$(cut -d' ' -f1 /proc/loadavg)" >> "$out"
  log "$(printf '%-16s %8.2f s wall %8.2f CPU-s %7.1f MiB peak RSS' "$name" "$wall" "$cpu" "$rss")"
}

"$bin" -q init > "$work/init.log" 2>&1
run first-backup "$bin" -q backup "$data"
run quiet-night "$bin" -q backup "$data"
python3 "$HERE/many_files.py" apply "$data" "$files" "$seed"
run changed-night "$bin" -q backup "$data"
"$bin" -q forget --keep-last 1 > "$work/forget.log" 2>&1
run prune "$bin" -q prune
run check "$bin" -q check
restored="$work/restored"
rm -rf "$restored"
run restore "$bin" -q restore latest --target "$restored"
log "checking the restored files against $data.changed.sha256"
(cd "$restored$data" && sha256sum --quiet --strict -c "$data.changed.sha256") ||
  { log "the restore differs from the source"; exit 1; }
[ "$(cd "$restored$data" && find . -type f | wc -l)" = "$(wc -l < "$data.changed.sha256")" ] ||
  { log "the restore holds another number of files than the source"; exit 1; }
rm -rf "$restored"
python3 "$HERE/many_files.py" revert "$data" "$files" "$seed"
log "results in $out"
