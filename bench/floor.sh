#!/usr/bin/env bash
# "What the cores allow" for the benchmark data: the CPU seconds that the unavoidable work of each
# phase costs on ONE core of this machine, measured with standard tools, and the wall time if that
# work spread perfectly over all cores.
#
#   bench/floor.sh DATA [OUT.json]      # DATA: a data set made by make-dataset.sh (in its original state)
#   FLOOR_TLS_SERVER=127.0.0.1:PORT bench/floor.sh DATA OUT.json   # also asks that TLS server its cipher
#
# Measures (single-threaded, warm page cache):
#   zstd -3 -T1         compression and decompression speed (CPU time) and ratio of each kind of data,
#                       cut into pieces like the engine's chunks (1 MiB; the 20 KB JSON files whole),
#                       each piece its own frame (zstd -b3 is printed too, but it times the wall clock)
#   openssl speed       AES-256-GCM and SHA-256 on 1 MiB buffers, and the TLS 1.3 cipher a gate
#                       negotiates with neverwiped (rustls) on 16 KiB buffers (TLS's largest record):
#                       openssl s_client asks FLOOR_TLS_SERVER, offering rustls's order; without a
#                       server, TLS_AES_128_GCM_SHA256 (what Go's crypto/tls, rest-server's, picks on
#                       a CPU with AES instructions when the client offers AES-GCM first, as rustls does)
#   b3sum --num-threads 1 --no-mmap   read(2) + BLAKE3 of the incompressible files
#   dd                  writing 512 MiB into the page cache (the write side of a restore)
#   find -printf        one stat of every file (the floor of a backup where nothing changed)
# and adds them up per phase (see bench/README.md, "What the cores allow"). Chunking (FastCDC) and
# everything else the engine does are left out: the floor is a lower bound, not a target to equal.
set -euo pipefail
DATA="${1:?usage: floor.sh DATA [OUT.json]}"
OUT="${2:-/dev/stdout}"
SCALE="${SCALE:-1/5}"
export LC_ALL=C
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log() { printf '[floor] %s\n' "$*" >&2; }
command -v zstd >/dev/null || { log "installing zstd"; apt-get install -y -qq zstd >/dev/null; }
command -v b3sum >/dev/null || { log "installing b3sum"; apt-get install -y -qq b3sum >/dev/null || true; }

zcpu() { # FILE...: "ratio compress_MB/s decompress_MB/s" for zstd -3, each file its own frame, in
  # CPU time (user+sys, best of 3) so that other processes on the machine do not slow it down
  local c d best_c="" best_d="" in out
  in=$(cat "$@" | wc -c)
  for _ in 1 2 3; do
    c=$(cpu_of zstd -3 -T1 -q -f -c "$@" -o "$tmp/z.zst"); [ -z "$best_c" ] || awk -v a="$c" -v b="$best_c" 'BEGIN{exit !(a>=b)}' || best_c=$c; [ -n "$best_c" ] || best_c=$c
    d=$(cpu_of zstd -d -q -c "$tmp/z.zst"); [ -z "$best_d" ] || awk -v a="$d" -v b="$best_d" 'BEGIN{exit !(a>=b)}' || best_d=$d; [ -n "$best_d" ] || best_d=$d
  done
  out=$(stat -c %s "$tmp/z.zst")
  awk -v i="$in" -v o="$out" -v c="$best_c" -v d="$best_d" 'BEGIN{if(c<0.01)c=0.01; if(d<0.01)d=0.01; printf "%.3f %.1f %.1f\n", i/o, i/c/1e6, i/d/1e6}'
}
osspeed() { # ALGO [BYTES]: bytes per second on buffers of BYTES (default 1 MiB), one core
  openssl speed -evp "$1" -bytes "${2:-1048576}" -seconds 3 2>/dev/null | tail -1 | awk '{v=$NF; sub(/k$/,"",v); printf "%.0f\n", v*1000}'
}
# rustls's TLS 1.3 suites in its own order of preference (ring and aws-lc-rs providers alike)
RUSTLS_TLS13=TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256
tls_cipher() { # the TLS 1.3 suite FLOOR_TLS_SERVER picks from rustls's offer, or Go's choice
  local c=""
  if [ -n "${FLOOR_TLS_SERVER:-}" ]; then
    c=$(timeout 10 openssl s_client -connect "$FLOOR_TLS_SERVER" -tls1_3 -ciphersuites "$RUSTLS_TLS13" </dev/null 2>/dev/null \
      | awk '/^New, TLSv1.3, Cipher is /{print $NF; exit}') || true
    [ -n "$c" ] || log "no TLS 1.3 answer from $FLOOR_TLS_SERVER: taking TLS_AES_128_GCM_SHA256"
  fi
  echo "${c:-TLS_AES_128_GCM_SHA256}"
}
cpu_of() { # COMMAND...: user+sys seconds
  /usr/bin/time -f '%U %S' -o "$tmp/t" "$@" >/dev/null 2>&1; awk '{print $1+$2}' "$tmp/t"
}

log "zstd -3 per kind of data (1 MiB pieces like the engine's chunks; JSON files whole; 16 KiB probes of random data)"
mkdir -p "$tmp/p"
biggest_log=$(ls -S "$DATA"/logs/*.log | head -1)
split -b 1048576 "$biggest_log" "$tmp/p/log."
read -r logs_ratio logs_c logs_d <<< "$(zcpu "$tmp"/p/log.*)"
rm -f "$tmp"/p/*
split -b 1048576 "$DATA/db/pg_dumpall.sql" "$tmp/p/db."
read -r db_ratio db_c db_d <<< "$(zcpu "$tmp"/p/db.*)"
rm -f "$tmp"/p/*
mapfile -t json_files < <(find "$DATA/json" -type f | sort | head -1000)
read -r json_ratio json_c json_d <<< "$(zcpu "${json_files[@]}")"
head -c 8M "$(ls "$DATA"/random/*.bin | head -1)" | split -b 16384 - "$tmp/p/rnd."
read -r random_ratio random_c random_d <<< "$(zcpu "$tmp"/p/rnd.*)"
rm -rf "$tmp/p" "$tmp/z.zst"
zstd_b3_logs=$(zstd -b3 -i2 -B1048576 "$biggest_log" 2>&1 | tr '\r' '\n' | grep 'MB/s,' | tail -1 | sed 's/^ *[^ ]* *//')

log "openssl speed (AES-256-GCM, SHA-256)"
aes=$(osspeed aes-256-gcm)
sha=$(osspeed sha256)
tls_suite=$(tls_cipher)
if [ -n "${FLOOR_TLS_SERVER:-}" ]; then
  tls_from="negotiated with $FLOOR_TLS_SERVER (openssl s_client offering the suites in rustls's order)"
else
  tls_from="assumed: what Go's crypto/tls picks for a client offering AES-GCM first, on a CPU with AES instructions"
fi
case "$tls_suite" in
  TLS_AES_128_GCM_SHA256) tls_evp=aes-128-gcm ;;
  TLS_AES_256_GCM_SHA384) tls_evp=aes-256-gcm ;;
  TLS_CHACHA20_POLY1305_SHA256) tls_evp=chacha20-poly1305 ;;
  *) log "unknown TLS suite $tls_suite: timing aes-128-gcm"; tls_evp=aes-128-gcm ;;
esac
log "openssl speed ($tls_evp on 16 KiB records: $tls_suite, $tls_from)"
tls=$(osspeed "$tls_evp" 16384)

log "b3sum (one thread) over the incompressible files"
random_bytes=$(du -sb "$DATA/random" | cut -f1)
b3_cpu=""
if command -v b3sum >/dev/null; then
  b3_cpu=$(cpu_of b3sum --num-threads 1 --no-mmap "$DATA"/random/*.bin)
fi

log "writing 512 MiB into the page cache"
sync
write_cpu=$(cpu_of dd if=/dev/zero of="$tmp/w" bs=1M count=512)
rm -f "$tmp/w"

log "one stat of every file"
best_walk=""
for _ in 1 2 3; do
  w=$(cpu_of find "$DATA" -printf '%s %T@ %C@ %i\n')
  if [ -z "$best_walk" ] || awk -v a="$w" -v b="$best_walk" 'BEGIN{exit !(a<b)}'; then best_walk=$w; fi
done

python3 - "$DATA" "$SCALE" "$OUT" <<PY
import json, os, sys
from fractions import Fraction
data, scale, out = sys.argv[1], Fraction(sys.argv[2]), sys.argv[3]
def size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(os.path.join(data, d)) for f in fs)
cats = {"logs": size("logs"), "json": size("json"), "db": size("db"), "random": size("random")}
total = sum(cats.values())
z = {"logs": ($logs_ratio, $logs_c, $logs_d), "json": ($json_ratio, $json_c, $json_d),
     "db": ($db_ratio, $db_c, $db_d), "random": ($random_ratio, $random_c, $random_d)}
MB = 1e6
aes, sha, tls = $aes, $sha, $tls
b3 = $random_bytes / float("${b3_cpu:-0}" or "nan") if "${b3_cpu}" else 3.0e9
write = 512 * 1048576 / max(float("$write_cpu"), 1e-3)
walk = float("$best_walk")
PROBE = 16384 / 1048576  # the engine probes 16 KiB of every ~1 MiB chunk before storing it raw
stored = {k: (v if k == "random" else v / z[k][0]) for k, v in cats.items()}
st = sum(stored.values())
compress = sum(cats[k] / (z[k][1] * MB) for k in ("logs", "json", "db")) + cats["random"] * PROBE / (z["random"][1] * MB)
first = {"read+blake3": total / b3, "zstd -3": compress, "aes-256-gcm": st / aes, "sha-256 (pack ids)": st / sha}
# after the change: the changed random file and the new log are read and hashed whole; what is new is
# compressed (the log), encrypted and hashed as packs; every other file costs a stat.
change_bytes = int(150_000_000 * scale) // 16 * 16
new_log = int(50_000_000 * scale)
blob2 = os.path.getsize(os.path.join(data, "random", "blob-2.bin"))
changed = {"stat of every file (wall)": walk, "read+blake3": (blob2 + new_log) / b3,
           "zstd -3": new_log / (z["logs"][1] * MB) + blob2 * PROBE / (z["random"][1] * MB),
           "aes-256-gcm": (change_bytes + new_log / z["logs"][0]) / aes,
           "sha-256 (pack ids)": (change_bytes + new_log / z["logs"][0]) / sha}
decompress = sum(stored[k] * z[k][0] / (z[k][2] * MB) for k in ("logs", "json", "db"))
restore = {"aes-256-gcm": st / aes, "zstd -d": decompress, "blake3 (id check)": total / b3,
           "write to page cache": total / write}
# the part of each phase that the file db/pg_dumpall.sql costs (bench/gate.sh dumps the database live
# instead of backing up that file, and takes it out)
db_cpu = {"first": cats["db"] / b3 + cats["db"] / (z["db"][1] * MB) + stored["db"] / aes + stored["db"] / sha,
          "unchanged": 0.0, "changed": 0.0,
          "restore": stored["db"] / aes + cats["db"] / (z["db"][2] * MB) + cats["db"] / b3 + cats["db"] / write}
def phase(parts, cores):
    cpu = sum(parts.values())
    return {"parts_cpu_s": {k: round(v, 3) for k, v in parts.items()}, "cpu_s": round(cpu, 3), "wall_s": round(cpu / cores, 3)}
cores = os.cpu_count() or 1
res = {
    "cores": cores,
    "bytes": cats, "stored_bytes_estimate": {k: round(v) for k, v in stored.items()},
    "speeds_one_core": {
        "zstd3_compress_MBps": {k: z[k][1] for k in z}, "zstd_decompress_MBps": {k: z[k][2] for k in z},
        "zstd3_ratio": {k: z[k][0] for k in z},
        "aes256gcm_MBps": round(aes / MB, 1), "sha256_MBps": round(sha / MB, 1),
        "read_blake3_MBps": round(b3 / MB, 1), "page_cache_write_MBps": round(write / MB, 1),
        "stat_walk_s": walk,
        "tls_record_MBps": round(tls / MB, 1),
    },
    # what a gate adds to the client: the TLS records it encrypts (bytes sent) and decrypts (bytes
    # received), at this speed; the server's side of TLS is the server's own share
    "tls": {"suite": "$tls_suite", "openssl_evp": "$tls_evp", "record_bytes": 16384, "MBps": round(tls / MB, 1),
            "suite_from": "$tls_from"},
    "zstd_b3_wall_clock_logs": "$zstd_b3_logs",
    "phases": {
        "first": phase(first, cores),
        "unchanged": {"parts_cpu_s": {"stat of every file": walk}, "cpu_s": walk, "wall_s": walk},
        "changed": phase(changed, 1) | {"wall_s": round(walk + sum(v for k, v in changed.items() if "stat" not in k) / cores, 3)},
        "restore": phase(restore, cores),
    },
}
for k, v in res["phases"].items():
    v["db_cpu_s"] = round(db_cpu[k], 3)
with open(out, "w") as f:
    json.dump(res, f, indent=1)
    f.write("\n")
s = res["speeds_one_core"]
print("[floor] one core: zstd -3 logs %.0f / json %.0f / dump %.0f MB/s (x%.2f / x%.2f / x%.2f); AES-256-GCM %.0f MB/s; SHA-256 %.0f MB/s; read+BLAKE3 %.0f MB/s; page-cache writes %.0f MB/s; stat walk %.3f s; TLS %s %.0f MB/s" % (
    z["logs"][1], z["json"][1], z["db"][1], z["logs"][0], z["json"][0], z["db"][0], s["aes256gcm_MBps"], s["sha256_MBps"], s["read_blake3_MBps"], s["page_cache_write_MBps"], walk,
    res["tls"]["suite"], s["tls_record_MBps"]), file=sys.stderr)
for k, v in res["phases"].items():
    print("[floor] %-9s %6.2f CPU-s -> %6.2f s on %d cores   %s" % (k, v["cpu_s"], v["wall_s"], cores, v["parts_cpu_s"]), file=sys.stderr)
PY
