#!/usr/bin/env bash
# Side-by-side benchmark of neverwiped, restic and borg on the storage vendor's reference workload.
#
#   bench/run.sh [--scale N] [--rest] [--peers restic,borg] [--out DIR] [--runs N] [--work DIR]
#                [--rev REV] [--no-build] [--no-floor] [--rebuild-data] [--restore-dir DIR]
#                [--workload reference|many-files] [--files N]
#
# Builds the deterministic data set (../shared/bench/make-dataset.sh, 1/N of the 5.3 GB reference;
# default 1/5, ~1.07 GB), builds neverwiped in release mode, and for each tool runs the four
# phases into a fresh repository: first backup, second backup with nothing changed, third backup
# after ../shared/bench/change.sh apply, and a full restore into an empty folder, checked file by
# file with SHA-256 against the source. With --rest, neverwiped and restic also run through
# rest-server on loopback. Each repetition (--runs, default 3) starts from an empty repository;
# the tools take turns so that background load spreads over all of them. The report uses medians.
#
# Prints per phase and tool: wall seconds, CPU seconds (user+sys), peak RSS, bytes added,
# repository size, the load average, and neverwiped's ratios to each peer; writes raw.jsonl,
# results.json, results.csv, results.md and chart.png into the out folder. See bench/README.md.
# --workload many-files swaps the data set for bench/many_files.py's source-like tree of --files N
# files (default 200 000, in ~N/20 folders; ~6.6 KB a file) and its change (1 % of the files
# grown, 0.2 % deleted, 0.5 % new); "what the cores allow" is not measured for it.
# --rev REV builds that commit (git archive into the work folder) instead of the work tree as it is.
# --restore-dir DIR puts the restores on another file system (e.g. a journaled ext4 mount).
# Not part of the test suite. Needs: cargo, python3, /usr/bin/time (GNU time), PostgreSQL 15 (for
# the data set), and the peers (installed with ../shared/tools/install-peers.sh --with-borg).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SHARED="${NEVERWIPED_SHARED:-$ROOT/../shared}"
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

scale=5
rest=0
peers="restic,borg"
out=""
runs=3
work="${NEVERWIPED_BENCH_WORK:-/tmp/neverwiped-bench}"
build=1
floor=1
rebuild_data=0
rev=""
restore_dir=""
seed="${SEED:-20240301}"
workload=reference
files=200000

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale="$2"; shift 2 ;;
    --scale=*) scale="${1#*=}"; shift ;;
    --rest) rest=1; shift ;;
    --peers) peers="$2"; shift 2 ;;
    --peers=*) peers="${1#*=}"; shift ;;
    --out) out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --runs) runs="$2"; shift 2 ;;
    --runs=*) runs="${1#*=}"; shift ;;
    --work) work="$2"; shift 2 ;;
    --work=*) work="${1#*=}"; shift ;;
    --rev) rev="$2"; shift 2 ;;
    --rev=*) rev="${1#*=}"; shift ;;
    --no-build) build=0; shift ;;
    --no-floor) floor=0; shift ;;
    --rebuild-data) rebuild_data=1; shift ;;
    --restore-dir) restore_dir="$2"; shift 2 ;;
    --restore-dir=*) restore_dir="${1#*=}"; shift ;;
    --workload) workload="$2"; shift 2 ;;
    --workload=*) workload="${1#*=}"; shift ;;
    --files) files="$2"; shift 2 ;;
    --files=*) files="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# --scale 5 means 1/5 of the reference; 1/5 or 2/5 are taken as they are; 1 is the full 5.3 GB.
SCALE="$(scale_fraction "$scale")" || { echo "run.sh: --scale takes N (for 1/N) or a fraction like 1/5" >&2; exit 2; }
tag="$(printf '%s' "$SCALE" | tr '/' '_')"
case "$workload" in
  reference) ;;
  many-files)
    case "$files" in *[!0-9]*|"") echo "run.sh: --files takes a number of files" >&2; exit 2 ;; esac
    tag="files-$files"; floor=0 ;;
  *) echo "run.sh: unknown workload $workload (reference, many-files)" >&2; exit 2 ;;
esac
[ "$peers" = none ] && peers=""
IFS=, read -r -a peer_list <<< "$peers"
for p in "${peer_list[@]}"; do
  case "$p" in restic|borg) ;; *) echo "run.sh: unknown peer $p (restic, borg)" >&2; exit 2 ;; esac
done
[ -n "$out" ] || out="$HERE/out/$tag"
mkdir -p "$out" "$work"
out="$(cd "$out" && pwd)"; work="$(cd "$work" && pwd)"
DATA="$work/data-$tag"
export SCALE SEED="$seed" DATA LC_ALL=C


# ------------------------------------------------------------------------------------- tools
need_gnu_time
RESTIC="" BORG="" REST_SERVER=""
for p in "${peer_list[@]}"; do
  case "$p" in restic) RESTIC="$(need_peer restic --with-borg)" ;; borg) BORG="$(need_peer borg --with-borg)" ;; esac
done
[ "$rest" = 1 ] && REST_SERVER="$(need_peer rest-server --with-borg)"

NW="$out/bin/neverwiped-sidecar"
mkdir -p "$out/bin"
git_dirty="$(cd "$ROOT" && git status --porcelain -- sidecar contract Cargo.toml Cargo.lock 2>/dev/null | wc -l)"
if [ -n "$rev" ]; then
  # A clean build of one commit, beside the work tree: what is measured is exactly that commit.
  git_rev="$(cd "$ROOT" && git rev-parse --short "$rev^{commit}")" || die "unknown revision $rev"
  git_dirty=0
  src="$work/src-$git_rev"
  if [ ! -f "$src/Cargo.toml" ]; then
    rm -rf "$src"; mkdir -p "$src"
    (cd "$ROOT" && git archive "$git_rev") | tar -x -C "$src"
    # git archive stamps files with the commit's time: newer stamps make cargo rebuild the
    # workspace's crates instead of trusting artifacts built from another copy of the tree.
    find "$src" -type f -exec touch {} +
  fi
  export CARGO_TARGET_DIR="$work/target"
  if [ ! -d "$CARGO_TARGET_DIR/release" ] && [ -d "$ROOT/target/release/deps" ]; then
    log "seeding $CARGO_TARGET_DIR with the work tree's compiled dependencies"
    mkdir -p "$CARGO_TARGET_DIR"; cp -a "$ROOT/target/release" "$CARGO_TARGET_DIR/"
  fi
  log "building neverwiped $git_rev (git archive into $src; cargo build --release --bin neverwiped-sidecar)"
  (cd "$src" && cargo build --release -q --bin neverwiped-sidecar) || die "the release build failed"
  cp "$CARGO_TARGET_DIR/release/neverwiped-sidecar" "$NW"
else
  git_rev="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [ "$build" = 1 ]; then
    log "building neverwiped (cargo build --release --bin neverwiped-sidecar)"
    (cd "$ROOT" && cargo build --release -q --bin neverwiped-sidecar) || die "the release build failed"
  fi
  bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/neverwiped-sidecar"
  [ -x "$bin" ] || die "no $bin (drop --no-build)"
  # A private copy: other builds in the work tree cannot change the binary half-way through.
  cp "$bin" "$NW"
fi

# ------------------------------------------------------------------------------------- data set
# change apply|revert: the workload's "changed night" (writes $DATA.changed.sha256 on apply)
change() {
  case "$workload" in
    reference) "$SHARED/bench/change.sh" "$1" ;;
    many-files) python3 "$HERE/many_files.py" "$1" "$DATA" "$files" "$seed" ;;
  esac
}
stamp="scale=$SCALE seed=$seed"
[ "$workload" = reference ] || stamp="workload=$workload files=$files seed=$seed generator=$(sha256sum < "$HERE/many_files.py" | cut -c1-16)"
if [ "$rebuild_data" = 1 ] || [ ! -f "$DATA.sha256" ] || [ "$(cat "$DATA.bench-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$DATA.bench-stamp" "$DATA.change-saved.bin"
  if [ "$workload" = reference ]; then
    log "building the data set: SCALE=$SCALE into $DATA (make-dataset.sh; needs PostgreSQL 15)"
    "$SHARED/bench/make-dataset.sh" >&2 || die "make-dataset.sh failed"
  else
    log "building the many-files tree: $files files into $DATA (bench/many_files.py make)"
    python3 "$HERE/many_files.py" make "$DATA" "$files" "$seed" || die "many_files.py failed"
  fi
  echo "$stamp" > "$DATA.bench-stamp"
else
  log "reusing the data set in $DATA ($stamp)"
fi
change revert >/dev/null   # a run killed after 'apply' left the change in place
(cd "$DATA" && find . -type f -print0 | sort -z | xargs -0 -P 2 -n 256 sha256sum | sort -k2) > "$work/source-$tag.sha256"
sort -k2 "$DATA.sha256" | cmp -s - "$work/source-$tag.sha256" || die "$DATA differs from its manifest $DATA.sha256: use --rebuild-data"
data_files=$(find "$DATA" -type f | wc -l)
data_bytes=$(du -sb "$DATA" | cut -f1)
log "data set: $data_files files, $data_bytes bytes (all in the page cache now: runs are warm-cache)"

# ------------------------------------------------------------------------------------- secrets
secrets="$work/secrets"
mkdir -p "$secrets"; chmod 700 "$secrets"
[ -s "$secrets/password" ] || { head -c 24 /dev/urandom | base64 > "$secrets/password"; chmod 600 "$secrets/password"; }
export NEVERWIPED_PASSWORD_FILE="$secrets/password" RESTIC_PASSWORD_FILE="$secrets/password"
BORG_PASSPHRASE="$(cat "$secrets/password")"
export BORG_PASSPHRASE BORG_DISPLAY_PASSPHRASE=n BORG_RELOCATED_REPO_ACCESS_IS_OK=yes
unset NEVERWIPED_PASSWORD RESTIC_PASSWORD NEVERWIPED_GATE_USERNAME NEVERWIPED_GATE_PASSWORD NEVERWIPED_GATE_PASSWORD_FILE

# ------------------------------------------------------------------------------------- rest-server
rest_pid="" rest_port="" rest_data="$work/rest-data"
stop_rest() { if [ -n "$rest_pid" ]; then kill "$rest_pid" 2>/dev/null || true; wait "$rest_pid" 2>/dev/null || true; rest_pid=""; fi; }
trap 'stop_rest; change revert >/dev/null 2>&1 || true' EXIT
if [ "$rest" = 1 ]; then
  rm -rf "$rest_data"; mkdir -p "$rest_data"
  rest_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$REST_SERVER" --no-auth --path "$rest_data" --listen "127.0.0.1:$rest_port" --prometheus --prometheus-no-auth \
    > "$work/rest-server.log" 2>&1 &
  rest_pid=$!
  for _ in $(seq 50); do curl -fs "http://127.0.0.1:$rest_port/metrics" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fs "http://127.0.0.1:$rest_port/metrics" >/dev/null || die "rest-server did not start (see $work/rest-server.log)"
  log "rest-server on 127.0.0.1:$rest_port (pid $rest_pid), data in $rest_data"
fi

# ------------------------------------------------------------------------------------- meta
hz=$(getconf CLK_TCK)
python3 - "$out/meta.json" <<PY
import json, os, platform, sys
mem = open("/proc/meminfo").read().split("\n")[0].split()[1]
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
json.dump({
  "started": "$(date -u +%FT%TZ)", "workload": "$workload", "scale": "$SCALE", "seed": "$seed", "runs": $runs,
  "rest": $rest, "peers": "$peers", "data_files": $data_files, "data_bytes": $data_bytes,
  "manifest_sha256": "$(sha256sum < "$DATA.sha256" | cut -c1-16)",
  "machine": {"cpus": os.cpu_count(), "cpu_model": cpu[0] if cpu else "?", "mem_kib": int(mem),
              "kernel": platform.release()},
  "versions": {
    "neverwiped": "$(ver "$NW" --version) (git $git_rev" + (", work tree with $git_dirty modified engine files" if $git_dirty else "") + ")",
    "restic": "$( [ -n "$RESTIC" ] && ver "$RESTIC" version )",
    "borg": "$( [ -n "$BORG" ] && ver "$BORG" --version )",
    "rest-server": "$( [ -n "$REST_SERVER" ] && ver "$REST_SERVER" --version )",
  },
  "settings": {
    "neverwiped": "defaults: FastCDC 256K/1M/4M, zstd 3 (raw when a 16 KiB probe does not compress), AES-256-GCM, keyed BLAKE3 ids, 8 MiB packs",
    "restic": "defaults: repository v2, --compression auto, AES-256-CTR + Poly1305-AES, SHA-256 ids",
    "borg": "borg init --encryption=repokey-blake2; borg create --compression zstd,3 (AES-256-CTR + keyed BLAKE2b)",
  },
  "cache": "warm: the data set is in the page cache (dropping it needs root and is not done)",
  "restore_file_system": "$(describe_fs "${restore_dir:-$work}")",
}, open(sys.argv[1], "w"), indent=1)
PY

# ------------------------------------------------------------------------------------- measuring
raw="$out/raw.jsonl"
: > "$raw"
rest_bytes() { # REPO: "written read requests" from rest-server's counters for one repository
  if [ -z "$rest_pid" ]; then echo "0 0 0"; return; fi
  curl -fs "http://127.0.0.1:$rest_port/metrics" | awk -v r="repo=\"$1\"" '
    index($0, r) && /^rest_server_blob_write_bytes_total/ {w += $NF}
    index($0, r) && /^rest_server_blob_read_bytes_total/  {rd += $NF}
    index($0, r) && /^rest_server_blob_(write|read|delete)_total/ {n += $NF}
    END {printf "%d %d %d\n", w, rd, n}'
}

# measure TOOL MODE RUN PHASE REPO_DIR REST_REPO REPORT_FILE -- COMMAND...
# Runs COMMAND under GNU time and appends one JSON line to raw.jsonl.
measure() {
  local tool=$1 mode=$2 run=$3 phase=$4 repo_dir=$5 rest_repo=$6 report=$7; shift 8
  local tf="$work/time.txt" cmdlog="$out/logs/$tool-$mode-run$run-$phase.log"
  mkdir -p "$out/logs"
  sync   # earlier phases' dirty pages are written back before the clock starts
  local size0 rb0 l0 b0 s0 t0 t1 rc=0
  size0=$(dir_bytes "$repo_dir"); rb0=$(rest_bytes "$rest_repo"); read -r l0 _ < /proc/loadavg
  b0=$(busy_jiffies); s0=$(pid_cpu_jiffies "$rest_pid"); t0=$(date +%s.%N)
  /usr/bin/time -v -o "$tf" "$@" > "$cmdlog" 2> "$cmdlog.err" || rc=$?
  t1=$(date +%s.%N)
  local b1 s1 l1 size1 rb1
  b1=$(busy_jiffies); s1=$(pid_cpu_jiffies "$rest_pid"); read -r l1 _ < /proc/loadavg
  size1=$(dir_bytes "$repo_dir"); rb1=$(rest_bytes "$rest_repo")
  local user sys rss
  user=$(awk -F': ' '/User time/{print $2}' "$tf"); sys=$(awk -F': ' '/System time/{print $2}' "$tf")
  rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$tf")
  local reported=""
  case "$tool" in
    neverwiped) reported=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("bytesAdded",0) if sys.argv[2]!="restore" else d.get("bytesTransferred",0))' "$report" "$phase" 2>/dev/null || true) ;;
    restic) [ "$phase" = restore ] || reported=$(grep '"message_type":"summary"' "$cmdlog" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["data_added_packed"])' 2>/dev/null || true) ;;
    borg) [ "$phase" = restore ] || reported=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["archive"]["stats"]["deduplicated_size"])' "$cmdlog" 2>/dev/null || true) ;;
  esac
  printf '{"tool":"%s","mode":"%s","run":%d,"phase":"%s","rc":%d,"wall_s":%.3f,"user_s":%s,"sys_s":%s,"max_rss_kib":%s,"repo_bytes_before":%s,"repo_bytes_after":%s,"reported_bytes":%s,"rest_up_before":%s,"rest_down_before":%s,"rest_requests_before":%s,"rest_up_after":%s,"rest_down_after":%s,"rest_requests_after":%s,"server_cpu_s":%.2f,"busy_cpu_s":%.2f,"load1_before":%s,"load1_after":%s,"started":"%s"}\n' \
    "$tool" "$mode" "$run" "$phase" "$rc" "$(awk -v a="$t1" -v b="$t0" 'BEGIN{print a-b}')" "${user:-0}" "${sys:-0}" "${rss:-0}" \
    "$size0" "$size1" "${reported:-null}" $rb0 $rb1 \
    "$(awk -v a="$s1" -v b="$s0" -v h="$hz" 'BEGIN{print (a-b)/h}')" "$(awk -v a="$b1" -v b="$b0" -v h="$hz" 'BEGIN{print (a-b)/h}')" "$l0" "$l1" "$(date -u -d @"${t0%.*}" +%FT%TZ)" >> "$raw"
  local line; line=$(tail -1 "$raw")
  log "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%-10s %-5s run %d %-9s rc %d  %7.2f s wall  %7.2f CPU-s  %5.0f MB RSS  repo %7.1f MB  load %s" % (d["tool"], d["mode"], d["run"], d["phase"], d["rc"], d["wall_s"], d["user_s"]+d["sys_s"], d["max_rss_kib"]/1024, d["repo_bytes_after"]/1e6, d["load1_before"]))' "$line")"
  [ "$rc" = 0 ] || log "  $tool $phase failed (exit $rc): $(tail -3 "$cmdlog.err" | tr '\n' ' ')"
  return "$rc"
}

verify_restore() { # TARGET TOOL MODE RUN: compares every restored file's SHA-256 with the changed source
  local root="$1$DATA" sums="$work/restored.sha256" ok=true
  if [ -d "$root" ]; then
    (cd "$root" && find . -type f -print0 | sort -z | xargs -0 -P 2 -n 256 sha256sum | sort -k2) > "$sums"
  else : > "$sums"; fi
  if ! sort -k2 "$DATA.changed.sha256" | cmp -s - "$sums"; then
    ok=false
    log "  RESTORE MISMATCH for $2 $3 run $4: $(sort -k2 "$DATA.changed.sha256" | diff - "$sums" | grep -c '^[<>]') differing lines"
  fi
  printf '{"tool":"%s","mode":"%s","run":%d,"phase":"verify","verified":%s,"files":%d}\n' "$2" "$3" "$4" "$ok" "$(wc -l < "$sums")" >> "$raw"
  $ok
}

# one_run TOOL MODE RUN: the four phases into a fresh repository
one_run() {
  local tool=$1 mode=$2 run=$3
  local name="$tool-$mode-run$run" dir="$work/runs/$tool-$mode-run$run" repo_dir rest_repo="" url
  rm -rf "$dir"; mkdir -p "$dir"
  change revert >/dev/null
  if [ "$mode" = rest ]; then
    repo_dir="$rest_data/$name"; rest_repo="$name"; url="rest:http://127.0.0.1:$rest_port/$name/"
  else
    repo_dir="$dir/repo"; url="$repo_dir"
  fi
  local target="${restore_dir:-$dir}/restore" r="$dir/result"
  local -a init backup restore
  case "$tool" in
    neverwiped)
      export NEVERWIPED_REPOSITORY="$url"
      init=("$NW" -q init)
      backup=("$NW" -q --result-file "$r.json" backup "$DATA")
      restore=("$NW" -q --result-file "$r.json" restore latest --target "$target") ;;
    restic)
      export RESTIC_REPOSITORY="$url" RESTIC_CACHE_DIR="$dir/restic-cache"
      init=("$RESTIC" -q init)
      backup=("$RESTIC" -q --json backup "$DATA")
      restore=("$RESTIC" -q restore latest --target "$target") ;;
    borg)
      export BORG_BASE_DIR="$dir/borg-base"
      init=("$BORG" init --encryption=repokey-blake2 "$repo_dir")
      backup=("$BORG" create --compression "zstd,3" --json "$repo_dir::PHASE" "$DATA")
      restore=(env -C "$target" "$BORG" extract "$repo_dir::changed") ;;
  esac
  mkdir -p "$out/logs"
  "${init[@]}" > "$out/logs/$name-init.log" 2>&1 || { log "$name: init failed: $(tail -3 "$out/logs/$name-init.log")"; return 1; }
  local phase
  for phase in first unchanged changed; do
    [ "$phase" = changed ] && change apply > /dev/null
    local -a cmd=("${backup[@]}")
    cmd=("${cmd[@]/PHASE/$phase}")
    measure "$tool" "$mode" "$run" "$phase" "$repo_dir" "$rest_repo" "$r.json" -- "${cmd[@]}" || return 1
  done
  rm -rf "$target"; mkdir -p "$target"
  settle_after_deletion
  measure "$tool" "$mode" "$run" restore "$repo_dir" "$rest_repo" "$r.json" -- "${restore[@]}" || return 1
  verify_restore "$target" "$tool" "$mode" "$run" || true
  rm -rf "$target"
  restore_deleted_at=$(date +%s)
  change revert >/dev/null
  rm -rf "$dir"   # the repository (local) goes; its sizes are recorded
  [ "$mode" = rest ] && rm -rf "${rest_data:?}/$name"
  return 0
}

configs=("neverwiped local")
for p in "${peer_list[@]}"; do configs+=("$p local"); done
if [ "$rest" = 1 ]; then
  configs+=("neverwiped rest")
  for p in "${peer_list[@]}"; do [ "$p" = restic ] && configs+=("restic rest"); done
fi

if [ "$floor" = 1 ]; then
  log "measuring what the cores allow (bench/floor.sh)"
  "$HERE/floor.sh" "$DATA" "$out/floor.json" >&2 || log "floor.sh failed; the report goes without it"
fi

log "runs: $runs x {${configs[*]}}, scale $SCALE, out $out"
n=${#configs[@]}
for run in $(seq 1 "$runs"); do
  for i in $(seq 0 $((n - 1))); do
    # The order turns each run so that no tool always goes first (or right after another's writes).
    read -r tool mode <<< "${configs[$(( (i + run - 1) % n ))]}"
    one_run "$tool" "$mode" "$run" || log "$tool $mode run $run stopped early"
  done
done
stop_rest

log "report"
"$HERE/report.py" "$out"
if grep -q '"verified":false' "$raw"; then
  log "ERROR: a restore did not match its source (see the MISMATCH lines above)"; exit 1
fi
