#!/usr/bin/env python3
"""Counts what a `cargo test` run tested, per test binary, and closes with one line.

Usage: scripts/test-summary.py RUN_LOG LIST_LOG [SKIP_LOG]

- RUN_LOG: the output (standard output and error) of `cargo test --workspace --no-fail-fast`;
- LIST_LOG: the output of `cargo test --workspace -- --list`, which says how many tests each
  binary holds;
- SKIP_LOG: the file the tests appended their skips to (NEVERWIPED_SKIP_LOG, see
  testkit/src/require.rs); a missing file means no test skipped.

Prints, per binary, how many tests it holds, how many ran (and were not skipped at run time), how
many skipped at run time and how many are #[ignore]d, then `N passed, F failed, S skipped`, where
S counts run-time skips and ignored tests. Exits 1 when a test failed or skipped, a test is
ignored, or a binary ran fewer tests than it holds (it crashed or never ran); 0 otherwise.
"""

import re
import sys
from collections import Counter
from pathlib import Path

# `     Running tests/cli.rs (target/debug/deps/cli-0123abcd)` and `   Doc-tests neverwiped`.
RUNNING = re.compile(r"^\s*Running (?P<source>\S+(?: \S+)*) \((?P<path>[^)]+)\)\s*$")
DOC_TESTS = re.compile(r"^\s*Doc-tests (?P<crate>\S+)\s*$")
RESULT = re.compile(
    r"^test result: \w+\. (?P<passed>\d+) passed; (?P<failed>\d+) failed; "
    r"(?P<ignored>\d+) ignored; \d+ measured; (?P<filtered>\d+) filtered out"
)
LISTED_TOTAL = re.compile(r"^(?P<tests>\d+) tests?, \d+ benchmarks?$")
LISTED_TEST = re.compile(r"^.+: test$")


def binaries(lines):
    """Yields (binary, line) for every line under a `Running`/`Doc-tests` header."""
    current = None
    for line in lines:
        line = line.rstrip("\n")
        running = RUNNING.match(line)
        doc_tests = DOC_TESTS.match(line)
        if running:
            current = Path(running["path"]).name
        elif doc_tests:
            current = f"doc-tests {doc_tests['crate']}"
        elif current is not None:
            yield current, line


def held(list_log):
    """How many tests each binary holds, from `cargo test -- --list`."""
    counted = Counter()
    totals = {}
    for binary, line in binaries(list_log):
        counted[binary] += 0
        if LISTED_TEST.match(line):
            counted[binary] += 1
        total = LISTED_TOTAL.match(line)
        if total:
            totals[binary] = int(total["tests"])
    return {binary: totals.get(binary, count) for binary, count in counted.items()}


def results(run_log):
    """libtest's closing counts of each binary that finished, summed over its runs (a binary
    split into shards by scripts/test-lanes.py closes once per shard)."""
    found = {}
    for binary, line in binaries(run_log):
        result = RESULT.match(line)
        if result:
            counts = found.setdefault(binary, Counter())
            counts.update({key: int(value) for key, value in result.groupdict().items()})
    return found


def skips(skip_log):
    """Run-time skips per binary, from the lines `binary<TAB>SKIPPED test: why`."""
    counted = Counter()
    lines = []
    if skip_log is not None and skip_log.exists():
        for line in skip_log.read_text().splitlines():
            if line.strip():
                binary, _, said = line.partition("\t")
                counted[binary] += 1
                lines.append(said)
    return counted, lines


def summarize(run_log, list_log, skip_log):
    """Prints the table and the closing line; returns the exit status."""
    holds = held(list_log)
    finished = results(run_log)
    skipped, skip_lines = skips(skip_log)
    problems = []
    totals = Counter()
    width = max((len(name) for name in holds | finished), default=10)
    print(f"{'test binary':<{width}}  held   ran  skipped  ignored")
    for binary in sorted(holds.keys() | finished.keys() | skipped.keys()):
        result = finished.get(binary)
        holding = holds.get(binary, 0)
        if result is None:
            problems.append(f"{binary}: holds {holding} tests but did not finish a run")
            result = {"passed": 0, "failed": 0, "ignored": 0, "filtered": 0}
        ran = result["passed"] + result["failed"] - skipped[binary]
        print(f"{binary:<{width}}  {holding:4}  {ran:4}  {skipped[binary]:7}  {result['ignored']:7}")
        accounted = result["passed"] + result["failed"] + result["ignored"]
        if accounted < holding:
            problems.append(f"{binary}: ran {accounted} of the {holding} tests it holds")
        if result["failed"]:
            problems.append(f"{binary}: {result['failed']} failed")
        if skipped[binary]:
            problems.append(f"{binary}: {skipped[binary]} skipped at run time")
        if result["ignored"]:
            problems.append(f"{binary}: {result['ignored']} ignored (#[ignore])")
        totals["passed"] += result["passed"] - skipped[binary]
        totals["failed"] += result["failed"]
        totals["skipped"] += skipped[binary] + result["ignored"]
    if not finished:
        problems.append("no test binary finished a run")
    for line in skip_lines:
        print(line)
    for problem in problems:
        print(f"FAILED: {problem}")
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if problems else 0


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    run_log = Path(argv[1]).read_text(errors="replace").splitlines()
    list_log = Path(argv[2]).read_text(errors="replace").splitlines()
    skip_log = Path(argv[3]) if len(argv) == 4 else None
    return summarize(run_log, list_log, skip_log)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
