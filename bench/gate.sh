#!/usr/bin/env bash
# Issue 43's scenario: the reference sample backed up through an HTTPS gate (rest-server with TLS
# and a login), the nightly PostgreSQL dump included, neverwiped beside restic.
#
#   bench/gate.sh [--scale N] [--runs N] [--work DIR] [--out DIR] [--no-build] [--no-floor] [--publish]
#
#   --scale N    1/N of the 5.3 GB reference (default 1: full scale, 50 037 files + a 577 MB
#                database); 5 is 1/5, 2/5 works too
#   --runs N     repetitions, each into fresh repositories, the tools' order swapped each run (default 3)
#   --work DIR   data set, PostgreSQL clusters, gate, restores (default /tmp/neverwiped-bench)
#   --out DIR    results (default bench/out/gate-1_N/)
#   --no-build   use target/release/neverwiped-sidecar as it is
#   --no-floor   skip measuring what the cores allow (bench/floor.sh, once per invocation)
#   --publish    also copy the chart to docs/images/speed-gate.png
#
# The data set comes from ../shared/bench/make-dataset.sh (shared with run.sh). Its database
# `shop` is loaded from db/pg_dumpall.sql into a PostgreSQL 15 cluster of the benchmark's own,
# listening on 127.0.0.1 with a password; the file db/pg_dumpall.sql itself is not backed up:
# every backup dumps the live database. For each run and tool, into a fresh repository on the gate:
#   first backup      neverwiped: backup DATA --database gate=postgresql://postgres@127.0.0.1:PORT
#                     restic: backup DATA, then pg_dumpall | restic backup --stdin
#   nothing changed   the same again (the dump redone)
#   after the change  change.sh apply, then the same
#   full restore      into an empty folder and a fresh PostgreSQL cluster; neverwiped: restore
#                     latest --target T --database …; restic: restore latest --target T, then
#                     restic dump latest pg_dumpall.sql | psql
# then checks the files (SHA-256 against the changed data set's manifest) and the database (rows
# and a digest of every table) outside the timing. Before the runs, bench/floor.sh measures what
# the cores allow (floor.json; its TLS cipher asked of the gate); the report sets each phase of
# neverwiped against it. See bench/README.md, "Through an HTTPS gate".
# Not part of the test suite. Needs: cargo, python3, GNU time, openssl, curl, htpasswd
# (apache2-utils), PostgreSQL 15 (Debian), restic and rest-server (../shared/tools/install-peers.sh).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SHARED="${NEVERWIPED_SHARED:-$ROOT/../shared}"
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

scale=1
runs=3
work="${NEVERWIPED_BENCH_WORK:-/tmp/neverwiped-bench}"
out=""
build=1
floor=1
publish=0
seed="${SEED:-20240301}"
PGVER=15

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale="$2"; shift 2 ;;
    --scale=*) scale="${1#*=}"; shift ;;
    --runs) runs="$2"; shift 2 ;;
    --runs=*) runs="${1#*=}"; shift ;;
    --work) work="$2"; shift 2 ;;
    --work=*) work="${1#*=}"; shift ;;
    --out) out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --no-build) build=0; shift ;;
    --no-floor) floor=0; shift ;;
    --publish) publish=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
SCALE="$(scale_fraction "$scale")" || { echo "gate.sh: --scale takes N (for 1/N) or a fraction like 2/5" >&2; exit 2; }
case "$runs" in *[!0-9]*|""|0) echo "gate.sh: --runs takes a number >= 1" >&2; exit 2 ;; esac
tag="$(printf '%s' "$SCALE" | tr '/' '_')"
[ -n "$out" ] || out="$HERE/out/gate-$tag"
mkdir -p "$out" "$work"
out="$(cd "$out" && pwd)"; work="$(cd "$work" && pwd)"
DATA="$work/data-$tag"
export SCALE SEED="$seed" DATA LC_ALL=C

# ------------------------------------------------------------------------------------- tools
need_gnu_time
for t in python3 openssl curl sha256sum runuser findmnt; do
  command -v "$t" >/dev/null || die "$t is needed and missing"
done
if ! command -v htpasswd >/dev/null; then
  log "htpasswd is missing: apt-get install apache2-utils"
  apt-get install -y -qq apache2-utils >/dev/null 2>&1 || die "htpasswd (apache2-utils) is needed for the gate's bcrypt login: apt-get install apache2-utils"
fi
PGBIN="/usr/lib/postgresql/$PGVER/bin"
for t in initdb pg_ctl postgres psql pg_dumpall pg_dump; do
  [ -x "$PGBIN/$t" ] || die "PostgreSQL $PGVER is needed ($PGBIN/$t is missing): apt-get install postgresql-$PGVER"
done
id postgres >/dev/null 2>&1 || die "the system user postgres is missing (PostgreSQL $PGVER from Debian creates it)"
[ "$(id -u)" = 0 ] || die "gate.sh runs as root: it starts PostgreSQL clusters as the user postgres (runuser)"
RESTIC="$(need_peer restic)"
REST_SERVER="$(need_peer rest-server)"

NW="$out/bin/neverwiped-sidecar"
git_rev="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git_dirty="$(cd "$ROOT" && git status --porcelain -- sidecar contract Cargo.toml Cargo.lock 2>/dev/null | wc -l)"
build_sidecar "$build" "$NW"

# The PostgreSQL client tools both tools run, each under GNU time: the dump's and the load's
# CPU is counted apart (BENCH_DBTIMES names the phase's file; not NEVERWIPED_…: the sidecar keeps
# its own variables from the tools). neverwiped finds them in PATH; restic's pipelines call them by
# this path.
PGTOOLS="$out/bin/pgtools"
mkdir -p "$PGTOOLS"
for t in pg_dumpall pg_dump psql; do
  cat > "$PGTOOLS/$t" <<EOF
#!/bin/sh
exec /usr/bin/time -a -o "\${BENCH_DBTIMES:-/dev/null}" -f "$t %e %U %S %M %x" "$PGBIN/$t" "\$@"
EOF
  chmod 755 "$PGTOOLS/$t"
done
export PATH="$PGTOOLS:$PATH"

# ------------------------------------------------------------------------------------- data set
stamp="scale=$SCALE seed=$seed"
if [ ! -f "$DATA.sha256" ] || [ "$(cat "$DATA.bench-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -f "$DATA.bench-stamp" "$DATA.change-saved.bin"
  log "building the data set: SCALE=$SCALE into $DATA (make-dataset.sh; needs PostgreSQL $PGVER)"
  "$SHARED/bench/make-dataset.sh" >&2 || die "make-dataset.sh failed"
  echo "$stamp" > "$DATA.bench-stamp"
else
  log "reusing the data set in $DATA ($stamp)"
fi
"$SHARED/bench/change.sh" revert >/dev/null   # a run killed after 'apply' left the change in place
hash_tree "$DATA" > "$work/source-$tag.sha256"
sort -k2 "$DATA.sha256" | cmp -s - "$work/source-$tag.sha256" || die "$DATA differs from its manifest $DATA.sha256: delete $DATA.bench-stamp to make it again"
# What is backed up as files: everything but db/ (the database is dumped live instead).
mapfile -t SRC < <(find "$DATA" -mindepth 1 -maxdepth 1 ! -name db | sort)
[ "${#SRC[@]}" -gt 0 ] || die "nothing to back up in $DATA"
data_files=$(find "${SRC[@]}" -type f | wc -l)
data_bytes=$(du -scb "${SRC[@]}" | tail -1 | cut -f1)
log "files backed up: $data_files, $data_bytes bytes in ${SRC[*]##*/} (warm cache)"

# ------------------------------------------------------------------------------------- secrets
secrets="$work/secrets"
mkdir -p "$secrets"; chmod 700 "$secrets"
for f in password gate-password pg-password; do
  [ -s "$secrets/$f" ] || { head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$secrets/$f"; chmod 600 "$secrets/$f"; }
done
GATE_USER=bench
printf '*:*:*:*:%s\n' "$(cat "$secrets/pg-password")" > "$secrets/pgpass"; chmod 600 "$secrets/pgpass"
unset NEVERWIPED_PASSWORD RESTIC_PASSWORD NEVERWIPED_GATE_PASSWORD PGPASSWORD PGHOST PGPORT PGUSER PGDATABASE
export NEVERWIPED_PASSWORD_FILE="$secrets/password" RESTIC_PASSWORD_FILE="$secrets/password"
export NEVERWIPED_GATE_USERNAME="$GATE_USER" NEVERWIPED_GATE_PASSWORD_FILE="$secrets/gate-password"
# restic takes the gate's login from the environment (it has no file for it), never the URL here
RESTIC_REST_USERNAME="$GATE_USER"; RESTIC_REST_PASSWORD="$(cat "$secrets/gate-password")"
export RESTIC_REST_USERNAME RESTIC_REST_PASSWORD
export PGPASSFILE="$secrets/pgpass"

# ------------------------------------------------------------------------------------- PostgreSQL
pgdir="$work/pg-gate"
mkdir -p "$pgdir"; chown postgres: "$pgdir"; chmod 700 "$pgdir"
declare -A pg_port=()
pg_pid() { head -1 "$pgdir/$1/postmaster.pid" 2>/dev/null || true; }
pg_stop() { # NAME
  if [ -f "$pgdir/$1/postmaster.pid" ]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pgdir/$1" -m fast -w stop >/dev/null 2>&1 || true
  fi
}
pg_start() { # NAME PORT
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pgdir/$1" -w -t 60 -l "$pgdir/$1.log" \
    -o "-c listen_addresses=127.0.0.1 -p $2 -k $pgdir" start >/dev/null \
    || die "PostgreSQL cluster $1 did not start (see $pgdir/$1.log)"
  pg_port[$1]=$2
}
pg_init() { # NAME: a new cluster, superuser postgres with the bench's password over TCP, peer on the socket
  rm -rf "${pgdir:?}/$1"
  install -o postgres -m 600 "$secrets/pg-password" "$pgdir/pwfile"
  runuser -u postgres -- "$PGBIN/initdb" -D "$pgdir/$1" -U postgres -E UTF8 --locale=C \
    --auth-local=peer --auth-host=scram-sha-256 --pwfile="$pgdir/pwfile" >"$pgdir/$1.initdb.log" 2>&1 \
    || die "initdb of $1 failed (see $pgdir/$1.initdb.log)"
  rm -f "$pgdir/pwfile"
}
pg_sql() { # NAME DB SQL: as the superuser over TCP, as the tools connect
  "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${pg_port[$1]}" -U postgres -d "$2" -c "$3"
}
pg_cpu_jiffies() { # NAME: CPU of the cluster's postmaster, its ended children (cutime) and the living ones
  python3 - "$(pg_pid "$1")" <<'PY'
import os, sys
def stat(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
p, total = sys.argv[1], 0
s = stat(p) if p else None
if s:  # fields after the name: [1] ppid, [11] utime, [12] stime, [13] cutime, [14] cstime
    total = sum(int(x) for x in s[11:15])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        c = stat(pid)
        if c and c[1] == p:
            total += int(c[11]) + int(c[12])
print(total)
PY
}
# db_digest NAME: rows and a digest of every table of shop (order-independent), for comparing a restore
db_digest() {
  local t q=""
  for t in $(pg_sql "$1" shop "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"); do
    q+="${q:+ UNION ALL }SELECT '$t', count(*), coalesce(sum(('x' || substr(md5(x::text), 1, 15))::bit(60)::bigint), 0) FROM public.\"$t\" x"
  done
  [ -n "$q" ] || { echo "no tables"; return; }
  pg_sql "$1" shop "$q ORDER BY 1"
}

gate_pid=""
stop_gate() { if [ -n "$gate_pid" ]; then kill "$gate_pid" 2>/dev/null || true; wait "$gate_pid" 2>/dev/null || true; gate_pid=""; fi; }
trap 'stop_gate; pg_stop restore; pg_stop live; "$SHARED/bench/change.sh" revert >/dev/null 2>&1 || true' EXIT

dump_sum=$(awk '$2 == "./db/pg_dumpall.sql" {print $1}' "$DATA.sha256")
[ -n "$dump_sum" ] || die "$DATA.sha256 lists no ./db/pg_dumpall.sql"
pg_stop live; pg_stop restore
live_port=$(free_port)
if [ -f "$pgdir/live/PG_VERSION" ] && [ "$(cat "$pgdir/live.stamp" 2>/dev/null)" = "$dump_sum" ]; then
  pg_start live "$live_port"
  log "PostgreSQL $PGVER cluster 'live' on 127.0.0.1:$live_port, database shop already loaded from this data set's dump"
else
  rm -f "$pgdir/live.stamp"
  pg_init live
  pg_start live "$live_port"
  log "loading $DATA/db/pg_dumpall.sql into the cluster 'live' on 127.0.0.1:$live_port"
  # As the dump was made: psql without ON_ERROR_STOP (CREATE ROLE postgres fails, the role exists),
  # over the socket as the user postgres: the dump may set another password for postgres, so the
  # benchmark's is set again afterwards
  runuser -u postgres -- "$PGBIN/psql" -X -q -h "$pgdir" -p "$live_port" -d postgres < "$DATA/db/pg_dumpall.sql" \
    > "$pgdir/live.load.log" 2>&1 || die "loading the dump into the cluster 'live' failed (see $pgdir/live.load.log)"
  printf "ALTER ROLE postgres PASSWORD '%s';\n" "$(cat "$secrets/pg-password")" \
    | runuser -u postgres -- "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$pgdir" -p "$live_port" -d postgres \
    || die "setting the password of postgres in the cluster 'live' failed"
  pg_sql live shop "VACUUM ANALYZE" || die "VACUUM ANALYZE of shop failed"
  echo "$dump_sum" > "$pgdir/live.stamp"
fi
live_digest="$(db_digest live)"
live_db_bytes=$(pg_sql live postgres "SELECT pg_database_size('shop')")
log "database shop: $live_db_bytes bytes; $(echo "$live_digest" | awk -F'|' '{printf "%s%s %s rows", (NR>1?", ":""), $1, $2}')"

# ------------------------------------------------------------------------------------- the gate
gate="$work/gate-tls"
rm -rf "$gate"; mkdir -p "$gate/data"; chmod 700 "$gate"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
  -subj "/CN=neverwiped-bench gate" -addext "subjectAltName=IP:127.0.0.1" \
  -addext "basicConstraints=critical,CA:FALSE" -addext "keyUsage=critical,digitalSignature" \
  -addext "extendedKeyUsage=serverAuth" \
  -keyout "$gate/key.pem" -out "$gate/cert.pem" >/dev/null 2>&1 || die "openssl could not make the gate's certificate"
htpasswd -B -i -c "$gate/htpasswd" "$GATE_USER" < "$secrets/gate-password" 2>/dev/null || die "htpasswd failed"
export NEVERWIPED_GATE_CA_FILE="$gate/cert.pem"
gate_port=$(free_port)
"$REST_SERVER" --path "$gate/data" --listen "127.0.0.1:$gate_port" --tls --tls-cert "$gate/cert.pem" \
  --tls-key "$gate/key.pem" --htpasswd-file "$gate/htpasswd" --prometheus --prometheus-no-auth \
  > "$gate/rest-server.log" 2>&1 &
gate_pid=$!
metrics() { curl -fs --cacert "$gate/cert.pem" "https://127.0.0.1:$gate_port/metrics"; }
for _ in $(seq 50); do metrics >/dev/null 2>&1 && break; sleep 0.1; done
metrics >/dev/null || die "rest-server did not start with TLS (see $gate/rest-server.log)"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$gate/cert.pem" "https://127.0.0.1:$gate_port/nothing/config")
[ "$code" = 401 ] || die "the gate answered $code without a login (expected 401)"
log "gate: rest-server with TLS and a bcrypt login on https://127.0.0.1:$gate_port (pid $gate_pid)"
gate_bytes() { # REPO: "written read requests" from rest-server's counters for one repository
  metrics | awk -v r="repo=\"$1\"" '
    index($0, r) && /^rest_server_blob_write_bytes_total/ {w += $NF}
    index($0, r) && /^rest_server_blob_read_bytes_total/  {rd += $NF}
    index($0, r) && /^rest_server_blob_(write|read|delete)_total/ {n += $NF}
    END {printf "%d %d %d\n", w, rd, n}'
}

# ------------------------------------------------------------------------------------- floor
# What the cores allow, on this data set in its original state, with the cipher the gate picks
rm -f "$out/floor.json"
if [ "$floor" = 1 ]; then
  log "measuring what the cores allow (bench/floor.sh, TLS cipher asked of the gate)"
  FLOOR_TLS_SERVER="127.0.0.1:$gate_port" "$HERE/floor.sh" "$DATA" "$out/floor.json" >&2 \
    || { rm -f "$out/floor.json"; log "floor.sh failed; the report goes without the floor"; }
fi

# ------------------------------------------------------------------------------------- meta
hz=$(getconf CLK_TCK)
python3 - "$out/meta.json" <<PY
import json, os, platform, sys
mem = open("/proc/meminfo").read().split("\n")[0].split()[1]
cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
json.dump({
  "started": "$(date -u +%FT%TZ)", "scenario": "issue 43: HTTPS gate with login, nightly pg_dumpall",
  "scale": "$SCALE", "seed": "$seed", "runs": $runs,
  "data_files": $data_files, "data_bytes": $data_bytes, "database_bytes": $live_db_bytes,
  "dump_bytes": os.path.getsize("$DATA/db/pg_dumpall.sql"),
  "manifest_sha256": "$(sha256sum < "$DATA.sha256" | cut -c1-16)",
  "machine": {"cpus": os.cpu_count(), "cpu_model": cpu[0] if cpu else "?", "mem_kib": int(mem),
              "kernel": platform.release()},
  "versions": {
    "neverwiped": "$(ver "$NW" --version) (git $git_rev" + (", work tree with $git_dirty modified engine files" if $git_dirty else "") + ")",
    "restic": "$(ver "$RESTIC" version)",
    "rest-server": "$(ver "$REST_SERVER" --version)",
    "postgresql": "$(ver "$PGBIN/postgres" --version)",
  },
  "gate": "rest-server on 127.0.0.1 with --tls (self-signed ECDSA P-256 server certificate, not a CA, SAN IP:127.0.0.1) and --htpasswd-file (bcrypt)",
  "cache": "warm: the data set and the database are in the page cache (dropping it needs root and is not done)",
  "restore_file_system": "$(describe_fs "$work")",
}, open(sys.argv[1], "w"), indent=1)
PY

# ------------------------------------------------------------------------------------- measuring
raw="$out/raw.jsonl"
: > "$raw"
mkdir -p "$out/logs"
pdir="$work/gate-phase"
ph_begin() { # starts a phase's clock (after a sync) and its counters; PG cluster NAME whose server CPU counts
  rm -rf "$pdir"; mkdir -p "$pdir"
  export BENCH_DBTIMES="$pdir/db.times"
  : > "$BENCH_DBTIMES"
  ph_pg=$1
  sync
  ph_size0=$(dir_bytes "$gate/data/$ph_repo"); ph_net0=$(gate_bytes "$ph_repo"); read -r ph_l0 _ < /proc/loadavg
  ph_b0=$(busy_jiffies); ph_s0=$(pid_cpu_jiffies "$gate_pid"); ph_p0=$(pg_cpu_jiffies "$ph_pg"); ph_t0=$(date +%s.%N)
}
timed() { # LABEL COMMAND…: one client command under GNU time
  local label=$1; shift
  /usr/bin/time -v -o "$pdir/$label.time" "$@" > "$ph_log.$label.out" 2> "$ph_log.$label.err"
}
ph_end() { # TOOL RUN PHASE RC DB_NESTED: stops the clock and appends the phase's line to raw.jsonl
  local t1 b1 s1 p1 l1 size1 net1
  t1=$(date +%s.%N); b1=$(busy_jiffies); s1=$(pid_cpu_jiffies "$gate_pid"); p1=$(pg_cpu_jiffies "$ph_pg")
  read -r l1 _ < /proc/loadavg
  size1=$(dir_bytes "$gate/data/$ph_repo"); net1=$(gate_bytes "$ph_repo")
  unset BENCH_DBTIMES
  python3 - "$pdir" "$raw" "$1" "$2" "$3" "$4" "$5" <<PY
import glob, json, os, sys
pdir, raw, tool, run, phase, rc, nested = sys.argv[1:8]
hz = $hz
def gnu_time(path):
    d = {}
    for line in open(path):
        if ":" in line:
            k, v = line.rsplit(":", 1)
            d[k.strip()] = v.strip()
    return {"user_s": float(d.get("User time (seconds)", 0)), "sys_s": float(d.get("System time (seconds)", 0)),
            "max_rss_kib": int(d.get("Maximum resident set size (kbytes)", 0)), "exit": int(d.get("Exit status", 0))}
commands = {os.path.basename(p)[:-5]: gnu_time(p) for p in sorted(glob.glob(os.path.join(pdir, "*.time")))}
db = []
for line in open(os.path.join(pdir, "db.times")):
    f = line.split()
    if len(f) >= 6 and f[0] in ("pg_dumpall", "pg_dump", "psql"):
        db.append({"tool": f[0], "wall_s": float(f[1]), "user_s": float(f[2]), "sys_s": float(f[3]),
                   "max_rss_kib": int(f[4]), "exit": int(f[5])})
cmd_cpu = sum(c["user_s"] + c["sys_s"] for c in commands.values())
db_cpu = sum(d["user_s"] + d["sys_s"] for d in db)
dump = [d for d in db if d["tool"] in ("pg_dumpall", "pg_dump")]
w0, r0, n0 = map(int, "$ph_net0".split()); w1, r1, n1 = map(int, "$net1".split())
row = {
    "tool": tool, "run": int(run), "phase": phase, "rc": int(rc), "wall_s": round($t1 - $ph_t0, 3),
    # client CPU: the engine's commands plus the PostgreSQL client tools; for neverwiped the tools
    # are its own children, already inside its GNU time figures (db_nested)
    "commands": commands, "db_tools": db, "db_nested": nested == "1",
    "client_cpu_s": round(cmd_cpu + (0 if nested == "1" else db_cpu), 3),
    "db_cpu_s": round(db_cpu, 3),
    "engine_cpu_s": round(cmd_cpu - (db_cpu if nested == "1" else 0), 3),
    "engine_rss_kib": max((c["max_rss_kib"] for c in commands.values()), default=0),
    "db_rss_kib": max((d["max_rss_kib"] for d in db), default=0),
    "db_dump_wall_s": round(sum(d["wall_s"] for d in dump), 3),
    "db_exit_max": max((d["exit"] for d in db), default=0),
    "gate_cpu_s": round(($s1 - $ph_s0) / hz, 3), "pg_server_cpu_s": round(($p1 - $ph_p0) / hz, 3),
    "busy_cpu_s": round(($b1 - $ph_b0) / hz, 3),
    "up_bytes": w1 - w0, "down_bytes": r1 - r0, "requests": n1 - n0,
    "repo_bytes_before": $ph_size0, "repo_bytes_after": $size1,
    "load1_before": $ph_l0, "load1_after": $l1,
}
open(raw, "a").write(json.dumps(row) + "\n")
print("%-10s run %s %-9s rc %s %8.2f s wall %8.2f CPU-s (db tools %6.2f) %5.0f MiB RSS  up %7.1f MB down %7.1f MB  gate %5.2f CPU-s  load %s" % (
    tool, run, phase, rc, row["wall_s"], row["client_cpu_s"], row["db_cpu_s"], row["engine_rss_kib"] / 1024,
    row["up_bytes"] / 1e6, row["down_bytes"] / 1e6, row["gate_cpu_s"], row["load1_before"]), file=sys.stderr)
PY
}

# verify TOOL RUN TARGET: the restored files against the changed data set's manifest (db/ left
# out: it is not backed up as a file) and the restored database against the live one
verify() {
  local tool=$1 run=$2 root="$3$DATA" files_ok=true db_ok=true digest
  if [ -d "$root" ]; then hash_tree "$root" > "$pdir/restored.sha256"; else : > "$pdir/restored.sha256"; fi
  if ! grep -v ' \./db/' "$DATA.changed.sha256" | sort -k2 | cmp -s - "$pdir/restored.sha256"; then
    files_ok=false
    log "  RESTORE MISMATCH (files) for $tool run $run: $(grep -v ' \./db/' "$DATA.changed.sha256" | sort -k2 | diff - "$pdir/restored.sha256" | grep -c '^[<>]') differing lines"
  fi
  digest="$(db_digest restore 2>&1 || true)"
  if [ "$digest" != "$live_digest" ]; then
    db_ok=false
    log "  RESTORE MISMATCH (database) for $tool run $run: $(printf '%s' "$digest" | head -3 | tr '\n' ' ')"
  fi
  printf '{"tool":"%s","run":%d,"phase":"verify","files_ok":%s,"database_ok":%s,"files":%d}\n' \
    "$tool" "$run" "$files_ok" "$db_ok" "$(wc -l < "$pdir/restored.sha256")" >> "$raw"
  log "  verified $tool run $run: files $files_ok, database $db_ok"
}

# one_run TOOL RUN: the four phases into a fresh repository on the gate
one_run() {
  local tool=$1 run=$2 phase rc
  local name="$tool-run$run" dir="$work/gate-runs/$tool-run$run"
  rm -rf "$dir" "${gate:?}/data/$name"; mkdir -p "$dir"
  "$SHARED/bench/change.sh" revert >/dev/null
  local url="rest:https://127.0.0.1:$gate_port/$name/" target="$dir/restore" r="$dir/result.json"
  local live_uri="postgresql://postgres@127.0.0.1:$live_port"
  ph_repo="$name"
  case "$tool" in
    neverwiped)
      export NEVERWIPED_REPOSITORY="$url"
      "$NW" -q init > "$out/logs/$name-init.log" 2>&1 || { log "$name: init failed: $(tail -3 "$out/logs/$name-init.log")"; return 1; } ;;
    restic)
      export RESTIC_REPOSITORY="$url" RESTIC_CACHE_DIR="$dir/restic-cache"
      "$RESTIC" -q --cacert "$gate/cert.pem" init > "$out/logs/$name-init.log" 2>&1 || { log "$name: init failed: $(tail -3 "$out/logs/$name-init.log")"; return 1; } ;;
  esac
  for phase in first unchanged changed; do
    [ "$phase" = changed ] && "$SHARED/bench/change.sh" apply > /dev/null
    ph_log="$out/logs/$name-$phase"
    ph_begin live
    rc=0
    case "$tool" in
      neverwiped)
        timed neverwiped "$NW" -q --result-file "$r" backup "${SRC[@]}" \
          --database "gate=$live_uri" --database-password-file "gate=$secrets/pg-password" || rc=$?
        ph_end "$tool" "$run" "$phase" "$rc" 1 ;;
      restic)
        timed restic-files "$RESTIC" -q --json --cacert "$gate/cert.pem" backup --tag files "${SRC[@]}" || rc=$?
        if [ "$rc" = 0 ]; then
          "$PGTOOLS/pg_dumpall" --host=127.0.0.1 --port="$live_port" --username=postgres --no-password 2> "$ph_log.pg_dumpall.err" \
            | /usr/bin/time -v -o "$pdir/restic-db.time" "$RESTIC" -q --json --cacert "$gate/cert.pem" backup --tag db \
                --stdin --stdin-filename pg_dumpall.sql > "$ph_log.restic-db.out" 2> "$ph_log.restic-db.err" || rc=$?
        fi
        ph_end "$tool" "$run" "$phase" "$rc" 0 ;;
    esac
    [ "$rc" = 0 ] || { log "  $tool $phase failed (exit $rc): $(cat "$ph_log".*.err 2>/dev/null | tail -3 | tr '\n' ' ')"; return 1; }
  done
  # The restore: an empty folder and a fresh PostgreSQL cluster (made and started off the clock)
  rm -rf "$target"; mkdir -p "$target"
  pg_stop restore; pg_init restore; pg_start restore "$(free_port)"
  local restore_uri="postgresql://postgres@127.0.0.1:${pg_port[restore]}"
  settle_after_deletion
  ph_log="$out/logs/$name-restore"
  ph_begin restore
  rc=0
  case "$tool" in
    neverwiped)
      # --exclude /databases: the dump goes into the server, not also among the files (as restic's
      # restore of the files snapshot); docs/reference.md, "restore".
      timed neverwiped "$NW" -q --result-file "$r" restore latest --target "$target" --exclude /databases \
        --database "gate=$restore_uri" --database-password-file "gate=$secrets/pg-password" || rc=$?
      ph_end "$tool" "$run" restore "$rc" 1 ;;
    restic)
      timed restic-files "$RESTIC" -q --cacert "$gate/cert.pem" restore latest --tag files --target "$target" || rc=$?
      if [ "$rc" = 0 ]; then
        # As a restic user loads a pg_dumpall dump: plain psql (CREATE ROLE postgres fails: it exists)
        /usr/bin/time -v -o "$pdir/restic-dump.time" "$RESTIC" -q --cacert "$gate/cert.pem" dump --tag db latest /pg_dumpall.sql \
            2> "$ph_log.restic-dump.err" \
          | "$PGTOOLS/psql" -X -q -h 127.0.0.1 -p "${pg_port[restore]}" -U postgres -d postgres \
            > "$ph_log.psql.out" 2> "$ph_log.psql.err" || rc=$?
      fi
      ph_end "$tool" "$run" restore "$rc" 0 ;;
  esac
  [ "$rc" = 0 ] || log "  $tool restore failed (exit $rc): $(cat "$ph_log".*.err 2>/dev/null | tail -3 | tr '\n' ' ')"
  verify "$tool" "$run" "$target"
  pg_stop restore
  rm -rf "$target"
  restore_deleted_at=$(date +%s)
  "$SHARED/bench/change.sh" revert >/dev/null
  rm -rf "$dir" "${gate:?}/data/$name"
  return 0
}

log "runs: $runs x {neverwiped, restic} through the gate, scale $SCALE, out $out"
for run in $(seq 1 "$runs"); do
  if [ $((run % 2)) = 1 ]; then order=(neverwiped restic); else order=(restic neverwiped); fi
  for tool in "${order[@]}"; do
    one_run "$tool" "$run" || log "$tool run $run stopped early"
  done
done
stop_gate
pg_stop live

log "report"
report_args=("$out")
[ "$publish" = 1 ] && report_args+=(--publish "$ROOT/docs/images/speed-gate.png")
python3 "$HERE/gate-report.py" "${report_args[@]}"
if grep -q '"files_ok":false\|"database_ok":false' "$raw"; then
  log "ERROR: a restore did not match its source (see the MISMATCH lines above)"; exit 1
fi
