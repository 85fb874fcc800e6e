#!/usr/bin/env bash
# A first and a nightly copy to a second gate: neverwiped-sidecar copy beside restic copy.
#
#   bench/copy.sh [--scale N] [--runs N] [--out DIR] [--work DIR] [--no-build] [--rebuild-data]
#
# Makes (or reuses) the deterministic data set (../shared/bench/make-dataset.sh, 1/N of the
# 5.3 GB reference; default 1/5, ~1.07 GB) and starts two rest-servers on loopback: the source
# gate and the second gate, each with its own data folder. Per run and tool: backs the data set
# up into a fresh source repository on the source gate, copies it into an empty repository on the
# second gate (its own password: `restic copy --from-repo`, `neverwiped-sidecar copy
# --from-repo`), applies the "200 MB change" (../shared/bench/change.sh), backs up again and
# copies again (the nightly copy). The two copies run under /usr/bin/time -v (wall time, CPU,
# peak RSS); the bytes sent are the second gate's request bodies for that repository (its
# Prometheus counter rest_server_blob_write_bytes_total), beside the growth of its folder; the
# bytes the night added are the source gate's counter during the second backup, beside its growth.
# The tools take turns (the order swaps every run). Prints medians and issue 40's targets:
#   wall time <= 0.5x restic's (first and nightly copy), bytes sent by the nightly copy <= the
#   bytes the night added x 1.05, peak RSS <= 100 MiB.
# Writes raw.jsonl, results.json and results.md into the out folder (default bench/out/copy-1_N).
# Not part of the test suite. Needs: cargo, python3, curl, /usr/bin/time (GNU time), restic and
# rest-server (../shared/tools/install-peers.sh), PostgreSQL 15 (for the data set only).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SHARED="${NEVERWIPED_SHARED:-$ROOT/../shared}"
PEERS_BIN="${NEVERWIPED_PEERS_BIN:-/opt/neverwiped-peers/bin}"

scale=5
runs=3
out=""
work="${NEVERWIPED_BENCH_WORK:-/tmp/neverwiped-bench}"
build=1
rebuild_data=0
seed="${SEED:-20240301}"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale="$2"; shift 2 ;;
    --scale=*) scale="${1#*=}"; shift ;;
    --runs) runs="$2"; shift 2 ;;
    --runs=*) runs="${1#*=}"; shift ;;
    --out) out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --work) work="$2"; shift 2 ;;
    --work=*) work="${1#*=}"; shift ;;
    --no-build) build=0; shift ;;
    --rebuild-data) rebuild_data=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "copy.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$runs" in *[!0-9]*|""|0) echo "copy.sh: --runs takes a number of runs (1 or more)" >&2; exit 2 ;; esac
case "$scale" in
  */*) SCALE="$scale" ;;
  *[!0-9]*|"") echo "copy.sh: --scale takes N (for 1/N) or a fraction like 1/5" >&2; exit 2 ;;
  1) SCALE=1 ;;
  *) SCALE="1/$scale" ;;
esac
tag="$(printf '%s' "$SCALE" | tr '/' '_')"
[ -n "$out" ] || out="$HERE/out/copy-$tag"
mkdir -p "$out" "$work"
out="$(cd "$out" && pwd)"; work="$(cd "$work" && pwd)"
DATA="$work/data-$tag"   # the same folder and stamp as bench/run.sh: either script reuses the other's
export SCALE SEED="$seed" DATA LC_ALL=C

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ------------------------------------------------------------------------------------- tools
[ -x /usr/bin/time ] || die "GNU time (/usr/bin/time) is needed: apt-get install time"
command -v curl >/dev/null || die "curl is needed"
need_peer() { # NAME: path of a peer binary
  local bin
  bin="$(command -v "$1" 2>/dev/null || true)"
  [ -n "$bin" ] || [ ! -x "$PEERS_BIN/$1" ] || bin="$PEERS_BIN/$1"
  [ -n "$bin" ] && [ -x "$bin" ] || die "$1 not found: run $SHARED/tools/install-peers.sh and put its bin folder on PATH"
  printf '%s' "$bin"
}
RESTIC="$(need_peer restic)"
REST_SERVER="$(need_peer rest-server)"

NW="$out/bin/neverwiped-sidecar"
mkdir -p "$out/bin"
git_rev="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git_dirty="$(cd "$ROOT" && git status --porcelain -- sidecar contract Cargo.toml Cargo.lock 2>/dev/null | wc -l)"
if [ "$build" = 1 ]; then
  log "building neverwiped (nice cargo build --release --bin neverwiped-sidecar)"
  (cd "$ROOT" && nice -n 10 cargo build --release -q --bin neverwiped-sidecar) || die "the release build failed"
fi
bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/neverwiped-sidecar"
[ -x "$bin" ] || die "no $bin (drop --no-build)"
cp "$bin" "$NW"   # a private copy: another build in the work tree cannot swap it half-way

# ------------------------------------------------------------------------------------- data set
stamp="scale=$SCALE seed=$seed"
if [ "$rebuild_data" = 1 ] || [ ! -f "$DATA.sha256" ] || [ "$(cat "$DATA.bench-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$DATA.bench-stamp" "$DATA.change-saved.bin"
  log "building the data set: SCALE=$SCALE into $DATA (make-dataset.sh; needs PostgreSQL 15)"
  "$SHARED/bench/make-dataset.sh" >&2 || die "make-dataset.sh failed"
  echo "$stamp" > "$DATA.bench-stamp"
else
  log "reusing the data set in $DATA ($stamp)"
fi
"$SHARED/bench/change.sh" revert >/dev/null   # a run killed after 'apply' left the change in place
(cd "$DATA" && find . -type f -print0 | sort -z | xargs -0 -P 2 -n 256 sha256sum | sort -k2) > "$work/source-$tag.sha256"
sort -k2 "$DATA.sha256" | cmp -s - "$work/source-$tag.sha256" || die "$DATA differs from its manifest $DATA.sha256: use --rebuild-data"
data_files=$(find "$DATA" -type f | wc -l)
data_bytes=$(du -sb "$DATA" | cut -f1)
log "data set: $data_files files, $data_bytes bytes (in the page cache now: warm-cache runs)"

# ------------------------------------------------------------------------------------- secrets
# The source repositories use run.sh's password; the copies have their own.
secrets="$work/secrets"
mkdir -p "$secrets"; chmod 700 "$secrets"
for f in password password-second-gate; do
  [ -s "$secrets/$f" ] || { head -c 24 /dev/urandom | base64 > "$secrets/$f"; chmod 600 "$secrets/$f"; }
done
SRC_PW="$secrets/password" DST_PW="$secrets/password-second-gate"
unset NEVERWIPED_PASSWORD RESTIC_PASSWORD NEVERWIPED_FROM_PASSWORD RESTIC_FROM_PASSWORD \
  NEVERWIPED_REPOSITORY RESTIC_REPOSITORY NEVERWIPED_FROM_REPOSITORY RESTIC_FROM_REPOSITORY \
  NEVERWIPED_GATE_USERNAME NEVERWIPED_GATE_PASSWORD NEVERWIPED_GATE_PASSWORD_FILE \
  NEVERWIPED_FROM_GATE_USERNAME NEVERWIPED_FROM_GATE_PASSWORD NEVERWIPED_FROM_GATE_PASSWORD_FILE

# ------------------------------------------------------------------------------------- rest-servers
declare -A gate_pid gate_port
gate_dir() { printf '%s' "$work/copy-gate-$1"; }
stop_gates() {
  local g
  for g in "${!gate_pid[@]}"; do
    kill "${gate_pid[$g]}" 2>/dev/null || true; wait "${gate_pid[$g]}" 2>/dev/null || true
    unset "gate_pid[$g]"
  done
}
cleanup() {
  stop_gates
  "$SHARED/bench/change.sh" revert >/dev/null 2>&1 || true
  rm -rf "$work/copy-runs" "$(gate_dir source)" "$(gate_dir second)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start_gate() { # NAME
  local dir; dir="$(gate_dir "$1")"
  rm -rf "$dir"; mkdir -p "$dir"
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$REST_SERVER" --no-auth --path "$dir" --listen "127.0.0.1:$port" --prometheus --prometheus-no-auth \
    > "$work/copy-gate-$1.log" 2>&1 &
  gate_pid[$1]=$!; gate_port[$1]=$port
  for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/metrics" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fs "http://127.0.0.1:$port/metrics" >/dev/null || die "rest-server ($1) did not start (see $work/copy-gate-$1.log)"
  log "rest-server '$1' on 127.0.0.1:$port (pid ${gate_pid[$1]}), data in $dir"
}
start_gate source
start_gate second

# ------------------------------------------------------------------------------------- meta
ver() { "$@" 2>&1 | head -1 | tr -d '"\\' || true; }
python3 - "$out/meta.json" <<PY
import json, os, platform, sys
mem = open("/proc/meminfo").read().split("\n")[0].split()[1]
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
json.dump({
  "started": "$(date -u +%FT%TZ)", "scale": "$SCALE", "seed": "$seed", "runs": $runs,
  "data_files": $data_files, "data_bytes": $data_bytes,
  "manifest_sha256": "$(sha256sum < "$DATA.sha256" | cut -c1-16)",
  "machine": {"cpus": os.cpu_count(), "cpu_model": cpu[0] if cpu else "?", "mem_kib": int(mem),
              "kernel": platform.release()},
  "versions": {
    "neverwiped": "$(ver "$NW" --version) (git $git_rev" + (", work tree with $git_dirty modified engine files" if $git_dirty else "") + ")",
    "restic": "$(ver "$RESTIC" version)",
    "rest-server": "$(ver "$REST_SERVER" --version)",
  },
  "command": "bench/copy.sh --scale $scale --runs $runs",
}, open(sys.argv[1], "w"), indent=1)
PY

# ------------------------------------------------------------------------------------- measuring
raw="$out/raw.jsonl"
: > "$raw"
hz=$(getconf CLK_TCK)
busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
pid_cpu_jiffies() { if [ -r "/proc/$1/stat" ]; then awk '{print $14+$15}' "/proc/$1/stat"; else echo 0; fi; }
dir_bytes() { if [ -d "$1" ]; then du -sb "$1" | cut -f1; else echo 0; fi; }
gate_written() { # GATE REPO: bytes of request bodies the gate stored for one repository, and requests
  curl -fs "http://127.0.0.1:${gate_port[$1]}/metrics" | awk -v r="repo=\"$2\"" '
    index($0, r) && /^rest_server_blob_write_bytes_total/ {w += $NF}
    index($0, r) && /^rest_server_blob_(write|read|delete)_total/ {n += $NF}
    END {printf "%d %d\n", w, n}'
}
gate_read() { # GATE REPO: bytes the gate answered with for one repository, and read requests
  curl -fs "http://127.0.0.1:${gate_port[$1]}/metrics" | awk -v r="repo=\"$2\"" '
    index($0, r) && /^rest_server_blob_read_bytes_total/ {b += $NF}
    index($0, r) && /^rest_server_blob_read_total/ {n += $NF}
    END {printf "%d %d\n", b, n}'
}

# measure TOOL RUN PHASE GATE REPO -- COMMAND...: runs COMMAND under GNU time, appends a JSON line
measure() {
  local tool=$1 run=$2 phase=$3 gate=$4 repo=$5; shift 6
  local tf="$work/copy-time.txt" cmdlog="$out/logs/$tool-run$run-$phase.log"
  mkdir -p "$out/logs"
  sync   # earlier writes are flushed before the clock starts
  local size0 w0 n0 r0 rn0 l0 b0 s0 d0 t0 t1 rc=0
  size0=$(dir_bytes "$(gate_dir "$gate")/$repo"); read -r w0 n0 <<< "$(gate_written "$gate" "$repo")"
  read -r r0 rn0 <<< "$(gate_read source "$repo")"
  read -r l0 _ < /proc/loadavg
  b0=$(busy_jiffies); s0=$(pid_cpu_jiffies "${gate_pid[source]}"); d0=$(pid_cpu_jiffies "${gate_pid[second]}")
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$tf" "$@" > "$cmdlog" 2> "$cmdlog.err" || rc=$?
  t1=$(date +%s.%N)
  local b1 s1 d1 size1 w1 n1 r1 rn1
  b1=$(busy_jiffies); s1=$(pid_cpu_jiffies "${gate_pid[source]}"); d1=$(pid_cpu_jiffies "${gate_pid[second]}")
  size1=$(dir_bytes "$(gate_dir "$gate")/$repo"); read -r w1 n1 <<< "$(gate_written "$gate" "$repo")"
  read -r r1 rn1 <<< "$(gate_read source "$repo")"
  local user sys rss
  user=$(awk -F': ' '/User time/{print $2}' "$tf"); sys=$(awk -F': ' '/System time/{print $2}' "$tf")
  rss=$(awk -F': ' '/Maximum resident set size/{print $2}' "$tf")
  printf '{"tool":"%s","run":%d,"phase":"%s","rc":%d,"wall_s":%.3f,"user_s":%s,"sys_s":%s,"max_rss_kib":%s,"repo_bytes_before":%s,"repo_bytes_after":%s,"written_bytes":%s,"requests":%s,"source_read_bytes":%s,"source_reads":%s,"servers_cpu_s":%.2f,"busy_cpu_s":%.2f,"load1_before":%s,"started":"%s"}\n' \
    "$tool" "$run" "$phase" "$rc" "$(awk -v a="$t1" -v b="$t0" 'BEGIN{print a-b}')" "${user:-0}" "${sys:-0}" "${rss:-0}" \
    "$size0" "$size1" "$((w1 - w0))" "$((n1 - n0))" "$((r1 - r0))" "$((rn1 - rn0))" \
    "$(awk -v a="$((s1 + d1))" -v b="$((s0 + d0))" -v h="$hz" 'BEGIN{print (a-b)/h}')" \
    "$(awk -v a="$b1" -v b="$b0" -v h="$hz" 'BEGIN{print (a-b)/h}')" "$l0" "$(date -u -d @"${t0%.*}" +%FT%TZ)" >> "$raw"
  log "$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%-10s run %d %-13s rc %d %7.2f s wall %7.2f CPU-s %5.0f MiB RSS  %8.1f MB written  load %s" % (d["tool"], d["run"], d["phase"], d["rc"], d["wall_s"], d["user_s"]+d["sys_s"], d["max_rss_kib"]/1024, d["written_bytes"]/1e6, d["load1_before"]))' "$(tail -1 "$raw")")"
  [ "$rc" = 0 ] || log "  $tool $phase failed (exit $rc): $(tail -3 "$cmdlog.err" | tr '\n' ' ')"
  return "$rc"
}

# one_run TOOL RUN: backup, first copy, change, backup, nightly copy; fresh repositories
one_run() {
  local tool=$1 run=$2 name="$1-run$2"
  local dir="$work/copy-runs/$name" src="rest:http://127.0.0.1:${gate_port[source]}/$name/"
  local dst="rest:http://127.0.0.1:${gate_port[second]}/$name/"
  rm -rf "$dir" "$(gate_dir source)/$name" "$(gate_dir second)/$name"; mkdir -p "$dir"
  "$SHARED/bench/change.sh" revert >/dev/null
  local -a init_src init_dst backup copy check
  case "$tool" in
    neverwiped)
      init_src=(env NEVERWIPED_REPOSITORY="$src" NEVERWIPED_PASSWORD_FILE="$SRC_PW" "$NW" -q init)
      init_dst=(env NEVERWIPED_REPOSITORY="$dst" NEVERWIPED_PASSWORD_FILE="$DST_PW" "$NW" -q init)
      backup=(env NEVERWIPED_REPOSITORY="$src" NEVERWIPED_PASSWORD_FILE="$SRC_PW" "$NW" -q backup "$DATA")
      copy=(env NEVERWIPED_REPOSITORY="$dst" NEVERWIPED_PASSWORD_FILE="$DST_PW" "$NW" --json copy
            --from-repo "$src" --from-password-file "$SRC_PW")
      check=(env NEVERWIPED_REPOSITORY="$dst" NEVERWIPED_PASSWORD_FILE="$DST_PW" "$NW" check) ;;
    restic)
      # restic's cache lives in the run's folder and is kept between the run's commands, as a
      # restic user's would be: the copy finds what the backup cached of the source.
      local cache=(env RESTIC_CACHE_DIR="$dir/restic-cache")
      init_src=("${cache[@]}" RESTIC_REPOSITORY="$src" RESTIC_PASSWORD_FILE="$SRC_PW" "$RESTIC" -q init)
      init_dst=("${cache[@]}" RESTIC_REPOSITORY="$dst" RESTIC_PASSWORD_FILE="$DST_PW" "$RESTIC" -q init)
      backup=("${cache[@]}" RESTIC_REPOSITORY="$src" RESTIC_PASSWORD_FILE="$SRC_PW" "$RESTIC" -q backup "$DATA")
      copy=("${cache[@]}" RESTIC_REPOSITORY="$dst" RESTIC_PASSWORD_FILE="$DST_PW" "$RESTIC" copy
            --from-repo "$src" --from-password-file "$SRC_PW")
      check=("${cache[@]}" RESTIC_REPOSITORY="$dst" RESTIC_PASSWORD_FILE="$DST_PW" "$RESTIC" check) ;;
  esac
  mkdir -p "$out/logs"
  "${init_src[@]}" > "$out/logs/$name-init-source.log" 2>&1 || { log "$name: init of the source failed: $(tail -3 "$out/logs/$name-init-source.log")"; return 1; }
  "${init_dst[@]}" > "$out/logs/$name-init-second.log" 2>&1 || { log "$name: init of the destination failed: $(tail -3 "$out/logs/$name-init-second.log")"; return 1; }
  measure "$tool" "$run" backup-first source "$name" -- "${backup[@]}" || return 1
  measure "$tool" "$run" copy-first second "$name" -- "${copy[@]}" || return 1
  "$SHARED/bench/change.sh" apply > /dev/null
  measure "$tool" "$run" backup-night source "$name" -- "${backup[@]}" || return 1
  measure "$tool" "$run" copy-night second "$name" -- "${copy[@]}" || return 1
  "$SHARED/bench/change.sh" revert > /dev/null
  # Not timed: the destination holds two whole snapshots.
  local ok=true
  "${check[@]}" > "$out/logs/$name-check-second.log" 2>&1 || ok=false
  $ok || log "  CHECK FAILED on $tool's destination, run $run (see $out/logs/$name-check-second.log)"
  printf '{"tool":"%s","run":%d,"phase":"check","checked":%s}\n' "$tool" "$run" "$ok" >> "$raw"
  rm -rf "$dir" "${work:?}/copy-gate-source/$name" "${work:?}/copy-gate-second/$name"
  $ok
}

tools=(neverwiped restic)
log "runs: $runs x {${tools[*]}}, scale $SCALE, out $out"
failed=0
for run in $(seq 1 "$runs"); do
  for i in 0 1; do
    tool="${tools[$(( (i + run - 1) % 2 ))]}"   # the order swaps every run
    one_run "$tool" "$run" || { log "$tool run $run stopped early"; failed=1; }
  done
done
stop_gates

log "report"
python3 "$HERE/copy-report.py" "$out"
[ "$failed" = 0 ] || die "a run failed or a destination did not pass check (see above)"
