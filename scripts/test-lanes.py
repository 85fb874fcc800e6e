#!/usr/bin/env python3
"""Runs the workspace's test binaries a few at a time, as `cargo test --workspace --no-fail-fast`
would run them one after the other.

Usage: scripts/test-lanes.py ARTIFACTS RUN_LOG [LANES]

- ARTIFACTS: what `cargo test --workspace --no-run --message-format=json` printed: every test
  binary it built, with its package and source;
- RUN_LOG: where the output goes, cargo's way (a `Running SOURCE (BINARY)` line, then libtest's
  output), so scripts/test-summary.py counts it as it counts `cargo test`'s;
- LANES: how many binaries run side by side (default: NEVERWIPED_TEST_LANES, else 3).

Most of the suite's wall time is waiting (on servers, containers, the API server's watches), so
binaries run side by side, each one's output kept whole and printed when it ends. The binaries
are run as cargo runs them (from their package's folder, with cargo's CARGO_* variables), never
through `cargo test -p`: that resolves features for one package alone and would build everything
a second time. The doc tests run last through `cargo test --workspace --doc`. The longest
binaries of the previous run (RUN_LOG before it is overwritten) start first, and one that took
longer than SHARD_SECONDS runs as a few processes, each given its share of the binary's tests by
exact name (`--exact NAME...`), so that no single binary is the suite's long pole.

Exits 0 when every binary passed, 1 otherwise.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# `     Running tests/cli.rs (target/debug/deps/cli-0123abcd)`: the binary is `cli`.
RUNNING = re.compile(r"^\s*Running .*\(.*/(?P<binary>[^/]+)-[0-9a-f]+\)\s*$")
FINISHED = re.compile(r"^test result: .*finished in (?P<seconds>[0-9.]+)s")
# A binary that ran longer than this in the previous run is split into shards of about this long.
SHARD_SECONDS = 150
# Without a previous run: a binary of integration tests holding more than this many is split.
SHARD_TESTS = 40
MAX_SHARDS = 3


@dataclass
class TestBinary:
    package: str
    version: str
    crate: str
    package_dir: Path
    source: str
    executable: Path

    @property
    def name(self):
        """The binary's name without cargo's hash, as RUNNING reads it back."""
        return self.executable.name.rsplit("-", 1)[0]


def built_binaries(artifacts):
    """Every test binary in cargo's JSON messages, once."""
    found = {}
    for line in artifacts.read_text().splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        # `path+file:///…/sidecar#neverwiped-sidecar@0.1.0` or `…/sidecar#0.1.0`.
        package_url = message["package_id"]
        package_dir = Path(package_url.split("file://", 1)[1].split("#", 1)[0])
        name_version = package_url.rsplit("#", 1)[1]
        package, _, version = name_version.rpartition("@")
        target = message["target"]
        source = os.path.relpath(target["src_path"], package_dir)
        executable = Path(message["executable"])
        found[executable] = TestBinary(
            package or package_dir.name,
            version,
            target["name"].replace("-", "_"),
            package_dir,
            source,
            executable,
        )
    return list(found.values())


def previous_durations(log):
    """Seconds per test binary in the previous run's log, when there is one."""
    durations, current = {}, None
    if not log.exists():
        return durations
    for line in log.read_text(errors="replace").splitlines():
        running = RUNNING.match(line)
        if running:
            current = running["binary"]
        finished = FINISHED.match(line)
        if finished and current:
            durations[current] = durations.get(current, 0) + float(finished["seconds"])
    return durations


def cargo_environment(binary):
    """The variables `cargo test` gives a test binary it runs."""
    environment = dict(os.environ)
    environment.update(
        CARGO_MANIFEST_DIR=str(binary.package_dir),
        CARGO_PKG_NAME=binary.package,
        CARGO_PKG_VERSION=binary.version,
        CARGO_CRATE_NAME=binary.crate,
    )
    return environment


def listed_tests(binary):
    """The names of the tests a binary holds, as `BINARY --list` prints them."""
    done = subprocess.run(
        [str(binary.executable), "--list", "--format", "terse"],
        cwd=binary.package_dir,
        env=cargo_environment(binary),
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return sorted(line[: -len(": test")] for line in done.stdout.splitlines() if line.endswith(": test"))


def shards(binary, seconds):
    """The runs of one binary: `[[]]` (all its tests in one process), or lists of exact test
    names, dealt round the shards in name order so that each gets some of every module. An
    integration binary is split when the previous run took it longer than SHARD_SECONDS or, with no
    previous run (a fresh clone), when it holds more than SHARD_TESTS tests."""
    if binary.source.startswith("src"):
        return [[]]
    names = listed_tests(binary)
    count = max(int(seconds // SHARD_SECONDS), len(names) // SHARD_TESTS) + 1
    count = min(count, MAX_SHARDS)
    if count == 1:
        return [[]]
    return [names[index::count] for index in range(count) if names[index::count]]


def run_binary(binary, names):
    """(header and output, exit status) of one test binary, or of the named tests of it."""
    filters = ["--exact", *names] if names else []
    done = subprocess.run(
        [str(binary.executable), *filters],
        cwd=binary.package_dir,
        env=cargo_environment(binary),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    relative = os.path.relpath(binary.executable, Path.cwd())
    return f"     Running {binary.source} ({relative})\n{done.stdout}", done.returncode


def run_doc_tests():
    """(output, exit status) of every crate's doc tests, with the workspace's features."""
    done = subprocess.run(
        ["cargo", "test", "--workspace", "--doc", "--no-fail-fast"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    return done.stdout, done.returncode


def main():
    artifacts = Path(sys.argv[1])
    log = Path(sys.argv[2])
    lanes = int(sys.argv[3] if len(sys.argv) > 3 else os.environ.get("NEVERWIPED_TEST_LANES", 3))
    durations = previous_durations(log)
    binaries = sorted(
        built_binaries(artifacts),
        key=lambda binary: (-durations.get(binary.name, 0), binary.source.startswith("src"), binary.name),
    )
    if not binaries:
        print(f"test-lanes: {artifacts} names no test binary", file=sys.stderr)
        return 1
    log.write_text("")
    lock = threading.Lock()
    failed = []

    def report(what, output, status, started):
        verdict = "ok" if status == 0 else f"FAILED (exit {status})"
        with lock:
            if status != 0:
                failed.append(what)
            with log.open("a") as out:
                out.write(output)
            sys.stdout.write(output)
            print(f"==> {what}: {verdict} in {time.monotonic() - started:.0f}s", flush=True)

    runs = [
        (binary, names, index, len(split))
        for binary in binaries
        for split in [shards(binary, durations.get(binary.name, 0))]
        for index, names in enumerate(split)
    ]
    # The longest shares first: a binary's previous time divided among its shards.
    runs.sort(key=lambda run: (-durations.get(run[0].name, 0) / run[3], -len(run[1])))

    def run(planned):
        binary, names, index, count = planned
        started = time.monotonic()
        output, status = run_binary(binary, names)
        part = f" (shard {index + 1} of {count}: {len(names)} tests)" if count > 1 else ""
        report(f"{binary.package} {binary.source}{part}", output, status, started)

    with ThreadPoolExecutor(max_workers=max(1, lanes)) as pool:
        list(pool.map(run, runs))
    started = time.monotonic()
    report("doc tests", *run_doc_tests(), started)
    if failed:
        print("failed: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
