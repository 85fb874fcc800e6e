#!/usr/bin/env bash
# Restore of a tree of many small files: neverwiped against restic, same tree, same machine.
#
#   bench/restore-many-files.sh [--files N] [--runs N] [--work DIR] [--no-build]
#
# Generates the tree with bench/many-files-tree.py (default 200 000 files in about 10 000
# folders), backs it up once with each tool into a local repository, then restores it with each,
# in turns (--runs, default 2), under GNU time. Each restore goes into an empty folder and is
# checked file by file (SHA-256) against the source. Prints per tool and run the wall seconds,
# CPU seconds and peak RSS, and neverwiped's ratios to restic per run and of the medians.
# Not part of the test suite. Needs: cargo, python3, /usr/bin/time (GNU time), restic.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PEERS_BIN="${NEVERWIPED_PEERS_BIN:-/opt/neverwiped-peers/bin}"
files=200000
runs=2
work="${NEVERWIPED_BENCH_WORK:-/tmp/neverwiped-bench-many}"
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "restore-many-files.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
RESTIC="$(command -v restic || echo "$PEERS_BIN/restic")"
log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

if [ "$build" = 1 ]; then
  log "building neverwiped (cargo build --release -p neverwiped-sidecar)"
  (cd "$ROOT" && cargo build --release -q -p neverwiped-sidecar)
fi
NW="${CARGO_TARGET_DIR:-$ROOT/target}/release/neverwiped-sidecar"

mkdir -p "$work"
tree="$work/tree-$files"
if [ ! -f "$tree.sha256" ]; then
  rm -rf "$tree"
  log "generating $files files in $tree"
  python3 "$HERE/many-files-tree.py" "$tree" --files "$files" >&2
  (cd "$tree" && find . -type f -print0 | sort -z | xargs -0 -P 2 -n 512 sha256sum | sort -k2) > "$tree.sha256"
fi

printf 'bench password for the many-files restore\n' > "$work/password"
export NEVERWIPED_PASSWORD_FILE="$work/password" RESTIC_PASSWORD_FILE="$work/password"
export NEVERWIPED_REPOSITORY="$work/repo-neverwiped" RESTIC_REPOSITORY="$work/repo-restic"
export RESTIC_CACHE_DIR="$work/restic-cache"
if [ ! -f "$work/backed-up-$files" ]; then
  rm -rf "$NEVERWIPED_REPOSITORY" "$RESTIC_REPOSITORY" "$RESTIC_CACHE_DIR"
  "$NW" -q init && "$RESTIC" -q init
  log "backing up with neverwiped"; "$NW" -q backup "$tree"
  log "backing up with restic"; "$RESTIC" -q backup "$tree" > /dev/null
  touch "$work/backed-up-$files"
fi

# ext4 skips inodes freed in the last ~35 s when it allocates new ones (see bench/run.sh):
# each restore starts at least that long after the last one was deleted.
deleted_at=0
settle() {
  local wait=$(( deleted_at + 36 - $(date +%s) ))
  [ "$wait" -gt 0 ] && sleep "$wait"
  return 0
}

results="$work/results.txt"
: > "$results"
for run in $(seq "$runs"); do
  for tool in neverwiped restic; do
    target="$work/restore"
    rm -rf "$target"; mkdir -p "$target"; settle; sync
    case "$tool" in
      neverwiped) cmd=("$NW" -q restore latest --target "$target") ;;
      restic) cmd=("$RESTIC" -q restore latest --target "$target") ;;
    esac
    start=$(date +%s.%N)
    /usr/bin/time -v -o "$work/time.txt" "${cmd[@]}" > "$work/$tool.log" 2>&1 \
      || { log "$tool restore failed: $(tail -3 "$work/$tool.log")"; exit 1; }
    end=$(date +%s.%N)
    wall=$(awk -v a="$end" -v b="$start" 'BEGIN{printf "%.2f", a-b}')
    cpu=$(awk -F': ' '/User time|System time/{s+=$2} END{printf "%.2f", s}' "$work/time.txt")
    rss=$(awk -F': ' '/Maximum resident set size/{printf "%.0f", $2/1024}' "$work/time.txt")
    restored="$target$tree"
    (cd "$restored" && find . -type f -print0 | sort -z | xargs -0 -P 2 -n 512 sha256sum | sort -k2) > "$work/restored.sha256"
    cmp -s "$tree.sha256" "$work/restored.sha256" && verified=ok || verified=MISMATCH
    log "run $run $tool: $wall s wall, $cpu CPU-s, $rss MiB peak RSS, content $verified"
    echo "$run $tool $wall $cpu $rss $verified" >> "$results"
    rm -rf "$target"; deleted_at=$(date +%s)
  done
done
python3 - "$results" "$files" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
by = {}
for run, tool, wall, cpu, rss, verified in rows:
    by.setdefault(tool, []).append((float(wall), float(cpu), int(rss), verified))
for run in sorted({r[0] for r in rows}):
    w = {tool: float(wall) for r, tool, wall, *_ in rows if r == run}
    print("run %s: neverwiped %.2f s, restic %.2f s, ratio %.2f" % (run, w["neverwiped"], w["restic"], w["neverwiped"] / w["restic"]))
med = {tool: statistics.median(v[0] for v in vals) for tool, vals in by.items()}
rss = {tool: max(v[2] for v in vals) for tool, vals in by.items()}
print("%s files: median wall neverwiped %.2f s, restic %.2f s, ratio %.2f; peak RSS neverwiped %d MiB, restic %d MiB"
      % (sys.argv[2], med["neverwiped"], med["restic"], med["neverwiped"] / med["restic"], rss["neverwiped"], rss["restic"]))
EOF
