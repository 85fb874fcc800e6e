#!/usr/bin/env bash
# Builds every fuzz target with libFuzzer and AddressSanitizer, then runs each one for
# SECONDS_PER_TARGET seconds, one after the other, from its committed corpus. Fails on the first
# crash, leak, timeout or out-of-memory; the input that caused it is left in fuzz/artifacts/.
#
#   fuzz/run.sh SECONDS_PER_TARGET [TARGET...]
#   fuzz/run.sh --build-only [TARGET...]     (build, run nothing: CI builds while the tests run)
#
# New inputs the fuzzer finds go to a scratch folder, not to the committed corpus. See README.md
# for the toolchain this needs and how to run one target longer. FUZZ_PROFILE names the Cargo
# profile (default `release`; CI's short run uses `smoke`, which takes 30 % less CPU to build).
set -euo pipefail

seconds=${1:?usage: fuzz/run.sh SECONDS_PER_TARGET|--build-only [TARGET...]}
shift
cd "$(dirname "$0")"

all_targets=(config key pack_header index tree snapshot lock blob rest_listing)
targets=("${@:-${all_targets[@]}}")

# libFuzzer's instrumentation needs unstable compiler flags: a nightly toolchain when one is
# installed, else the stable one told to accept them.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    cargo=(cargo +nightly)
else
    cargo=(cargo)
    export RUSTC_BOOTSTRAP=1
fi
host=$(rustc -vV | sed -n 's/^host: //p')
# The flags cargo-fuzz passes: coverage counters, comparison tracing, AddressSanitizer, and the
# checks a debug build has. An explicit --target keeps build scripts uninstrumented.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Zsanitizer=address \
-Cdebug-assertions -Coverflow-checks"
# A target dir of its own (fuzz/target, or FUZZ_TARGET_DIR), whatever CARGO_TARGET_DIR says: the
# instrumented build must never mix with the workspace's.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target}"
profile=${FUZZ_PROFILE:-release}
bins=()
for target in "${targets[@]}"; do bins+=(--bin "$target"); done
"${cargo[@]}" build --profile "$profile" --target "$host" "${bins[@]}"

[ "$seconds" = --build-only ] && exit 0

mkdir -p artifacts
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in "${targets[@]}"; do
    echo "== $target: ${seconds} s"
    mkdir -p "$scratch/$target"
    "$CARGO_TARGET_DIR/$host/$profile/$target" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="artifacts/$target-" \
        "$scratch/$target" "corpus/$target"
done
echo "every target ran ${seconds} s without a crash"
