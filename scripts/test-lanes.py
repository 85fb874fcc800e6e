#!/usr/bin/env python3
"""Runs the workspace's test binaries a few at a time, as `cargo test --workspace --no-fail-fast`
would run them one after the other.

Usage: scripts/test-lanes.py RUN_LOG [LANES]

Most of the suite's wall time is waiting (on servers, containers, the API server's watches), so
binaries run side by side in LANES lanes (default: NEVERWIPED_TEST_LANES, else 3). Each binary is
run by `cargo test -p PACKAGE --lib|--bin NAME|--test NAME|--doc`, its output kept whole and
printed (and appended to RUN_LOG) when it ends, so RUN_LOG reads as cargo's own output does and
scripts/test-summary.py counts it the same way. The longest binaries of the previous run (RUN_LOG
before it is overwritten) start first; without one, integration tests start before unit tests.

Exits 0 when every binary passed, 1 otherwise. Build first (`cargo test --workspace --no-run`):
cargo then only runs what is built.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# `     Running tests/cli.rs (target/debug/deps/cli-0123abcd)`: the binary is `cli`.
RUNNING = re.compile(r"^\s*Running .*\(.*/(?P<binary>[^/]+)-[0-9a-f]+\)\s*$")
FINISHED = re.compile(r"^test result: .*finished in (?P<seconds>[0-9.]+)s")


def jobs():
    """(package, selector, binary) for every test binary `cargo test --workspace` runs."""
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    found = []
    for package in metadata["packages"]:
        if package["id"] not in metadata["workspace_members"]:
            continue
        for target in package["targets"]:
            kinds = set(target["kind"])
            binary = target["name"].replace("-", "_")
            if not target.get("test", True):
                continue
            if kinds & {"lib", "rlib", "proc-macro"}:
                found.append((package["name"], ["--lib"], binary))
                if target.get("doctest", False):
                    found.append((package["name"], ["--doc"], "doc " + binary))
            elif "bin" in kinds:
                found.append((package["name"], ["--bin", target["name"]], binary))
            elif "test" in kinds:
                found.append((package["name"], ["--test", target["name"]], binary))
    return found


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


def main():
    log = Path(sys.argv[1])
    lanes = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("NEVERWIPED_TEST_LANES", 3))
    durations = previous_durations(log)
    order = sorted(
        jobs(),
        key=lambda job: (-durations.get(job[2], 0), job[1][0] != "--test", job[0], job[2]),
    )
    log.write_text("")
    lock = threading.Lock()
    failed = []

    def run(job):
        package, selector, _ = job
        started = time.monotonic()
        done = subprocess.run(
            ["cargo", "test", "-p", package, *selector, "--no-fail-fast"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        seconds = time.monotonic() - started
        verdict = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
        with lock:
            if done.returncode != 0:
                failed.append(f"{package} {' '.join(selector)}")
            with log.open("a") as out:
                out.write(done.stdout)
            sys.stdout.write(done.stdout)
            print(f"==> {package} {' '.join(selector)}: {verdict} in {seconds:.0f}s", flush=True)

    with ThreadPoolExecutor(max_workers=max(1, lanes)) as pool:
        list(pool.map(run, order))
    if failed:
        print("failed: " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
