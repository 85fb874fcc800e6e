#!/usr/bin/env python3
"""Checks of the chart's Grafana dashboard (charts/neverwiped/dashboards/neverwiped.json).

- Helm's own engine renders it (off by default) as a ConfigMap with the label Grafana's dashboard
  sidecar selects, holding the file byte for byte;
- every PromQL expression parses (promql-parser, the Rust crate's Python binding), once Grafana's
  variables are replaced as Grafana does before a query, and reads only metrics the operator
  exports: the families operator/src/metrics.rs registers, with the sample names their types give
  (a counter's `_total`, a histogram's `_bucket`, `_sum`, `_count`);
- the JSON has the structure Grafana loads: unique panel ids, panels on its 24-column grid without
  overlaps, a Prometheus data source variable that every panel and query uses, unique refIds;
- it passes Grafana's own dashboard schema: the TypeScript types of npm's @grafana/schema, checked
  by the TypeScript compiler with no unknown field allowed (tests/chart/grafana-schema, installed by
  `npm ci --prefix tests/chart/grafana-schema`; without it the checks end with a SKIPPED line and
  exit status 77, which fails operator/tests/chart.rs under CI and skips it loudly elsewhere).

check_chart.py runs these checks with its own (`python3 tests/chart/check_chart.py`); alone:

    python3 tests/chart/check_dashboard.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import check_chart
from check_chart import (CHART, ROOT, CheckFailed, MissingTool, Rendered, exit_status, expect,
                         metric_names)

DASHBOARD = CHART / "dashboards" / "neverwiped.json"
SCHEMA_CHECK = ROOT / "tests" / "chart" / "grafana-schema"
METRICS_SOURCE = ROOT / "operator" / "src" / "metrics.rs"

# What Grafana puts in place of its variables before it sends a query (any valid value will do
# for parsing): the ranges as durations, the dashboard's own variables as regular expressions.
GRAFANA_VARIABLES = {
    "$__rate_interval": "2m",
    "$__interval": "1m",
    "$__range": "7d",
    "$namespace": ".*",
    "$plan": ".*",
}

# The panels the dashboard promises (issue 17, item 4) and the metric each is built on.
PROMISED_METRICS = {
    "neverwiped_backup_last_success_timestamp_seconds",  # plans by the age of their last success
    "neverwiped_backup_runs_total",  # failures
    "neverwiped_backup_bytes_sent_total",  # bytes sent
    "neverwiped_backup_duration_seconds_bucket",  # durations
    "neverwiped_repository_size_bytes",  # repository sizes
}

CHECKS: list[Callable[[], None]] = []


def check(function: Callable[[], None]) -> Callable[[], None]:
    CHECKS.append(function)
    return function


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def exported_metrics() -> set[str]:
    """The sample names of every family operator/src/metrics.rs registers."""
    source = METRICS_SOURCE.read_text()
    struct = source.split("pub struct Metrics {", 1)[1].split("\n}", 1)[0]
    field_types = dict(re.findall(r"pub (\w+): (?:Family<[^,]+, )?(\w+)", struct))
    names = set()
    for family, field in re.findall(r'\.register\(\s*"(\w+)",\s*"[^"]*",\s*metrics\.(\w+)\.clone\(\)',
                                    source):
        kind = field_types.get(field)
        expect(kind is not None, f"metrics.rs registers {family} from an unknown field {field}")
        name = f"neverwiped_{family}"
        if kind == "Counter":
            names.add(f"{name}_total")
        elif kind == "Histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    expect(len(names) >= 10, f"too few metrics found in {METRICS_SOURCE}: {sorted(names)}")
    return names


def as_grafana_sends_it(expression: str) -> str:
    for variable, value in sorted(GRAFANA_VARIABLES.items(), key=lambda item: -len(item[0])):
        expression = expression.replace(variable, value)
    left = re.findall(r"\$\{?\w+", expression)
    expect(not left, f"the expression uses variables the dashboard does not define: {left}\n"
           f"{expression}")
    return expression


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every variable's label_values() query."""
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"]
        match = re.fullmatch(r"label_values\((.+), *(\w+)\)", query)
        expect(match is not None, f"variable {variable['name']}: not a label_values() query: {query}")
        found.append((f"variable {variable['name']}", match.group(1)))
    return found


@check
def the_dashboard_is_off_by_default_and_a_configmap_for_grafanas_sidecar() -> None:
    expect(not [o for o in Rendered(None).all("ConfigMap") if "dashboard" in o["metadata"]["name"]],
           "no dashboard ConfigMap by default")
    rendered = Rendered({"dashboard": {"enabled": True}})
    config_map = rendered.one("ConfigMap", "neverwiped-dashboard")
    expect(config_map["metadata"]["labels"].get("grafana_dashboard") == "1",
           f"the sidecar's label: {config_map['metadata']['labels']}")
    expect(config_map["metadata"]["namespace"] == check_chart.NAMESPACE, "the release's namespace")
    expect(config_map["data"] == {"neverwiped.json": DASHBOARD.read_text()},
           "the ConfigMap holds the dashboard file byte for byte")
    moved = Rendered({"dashboard": {"enabled": True, "namespace": "monitoring",
                                    "labels": {"dashboards": "neverwiped"},
                                    "annotations": {"grafana_folder": "Backups"}}})
    config_map = moved.one("ConfigMap", "neverwiped-dashboard")
    expect(config_map["metadata"]["namespace"] == "monitoring", "dashboard.namespace")
    expect(config_map["metadata"]["labels"].get("dashboards") == "neverwiped"
           and config_map["metadata"]["labels"].get("grafana_dashboard") == "1",
           f"dashboard.labels are added to the default: {config_map['metadata']['labels']}")
    expect(config_map["metadata"]["annotations"] == {"grafana_folder": "Backups"},
           "dashboard.annotations")
    # A sidecar with another label: the default one is switched off with null.
    other = Rendered({"dashboard": {"enabled": True,
                                    "labels": {"grafana_dashboard": None, "dashboards": "x"}}})
    labels = other.one("ConfigMap", "neverwiped-dashboard")["metadata"]["labels"]
    expect("grafana_dashboard" not in labels and labels.get("dashboards") == "x",
           f"a null label removes the default: {labels}")


@check
def every_dashboard_expression_parses_and_reads_only_the_operators_metrics() -> None:
    board = dashboard()
    exported = exported_metrics()
    read = set()
    for where, expression in queries(board):
        names = metric_names(as_grafana_sends_it(expression))
        expect(names, f"{where} reads no metric: {expression}")
        unknown = names - exported
        expect(not unknown, f"{where} reads metrics the operator does not export: "
               f"{sorted(unknown)} (exported: {sorted(exported)})")
        read |= names
    missing = PROMISED_METRICS - read
    expect(not missing, f"the dashboard has no panel on {sorted(missing)}")


@check
def the_dashboard_has_the_structure_grafana_loads() -> None:
    board = dashboard()
    for key, kind in [("uid", str), ("title", str), ("schemaVersion", int), ("panels", list),
                      ("templating", dict), ("time", dict), ("tags", list)]:
        expect(isinstance(board.get(key), kind), f"the dashboard's {key} is not a {kind.__name__}")
    expect(re.fullmatch(r"[A-Za-z0-9_-]{1,40}", board["uid"]) is not None,
           f"uid {board['uid']!r}: Grafana allows at most 40 letters, digits, - and _")
    variables = {v["name"]: v for v in board["templating"]["list"]}
    source = variables.get("datasource")
    expect(source is not None and source["type"] == "datasource"
           and source["query"] == "prometheus", "a Prometheus data source variable `datasource`")
    ids = [panel["id"] for panel in board["panels"]]
    expect(len(ids) == len(set(ids)), f"panel ids repeat: {ids}")
    cells: dict[tuple[int, int], str] = {}
    known_types = {"row", "stat", "timeseries", "bargauge", "table", "gauge"}
    for panel in board["panels"]:
        title = panel.get("title", "")
        expect(panel["type"] in known_types, f"{title!r}: panel type {panel['type']!r}")
        grid = panel["gridPos"]
        expect(grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0,
               f"{title!r} leaves the 24-column grid: {grid}")
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                expect((x, y) not in cells, f"{title!r} overlaps {cells.get((x, y))!r}")
                cells[(x, y)] = title
        if panel["type"] == "row":
            continue
        expect(bool(title) and bool(panel.get("description")), f"panel {panel['id']}: a title "
               "and a description")
        expect(panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"},
               f"{title!r} uses the data source variable")
        targets = panel["targets"]
        expect(targets, f"{title!r} has no query")
        refs = [target["refId"] for target in targets]
        expect(len(refs) == len(set(refs)), f"{title!r}: refIds repeat: {refs}")
        for target in targets:
            expect(target["datasource"] == panel["datasource"], f"{title!r}: a query's data source")
            expect(isinstance(target.get("expr"), str) and target["expr"].strip(),
                   f"{title!r}: an empty query")
    expect(len(board["panels"]) - sum(p["type"] == "row" for p in board["panels"]) >= 10,
           "the dashboard has its panels")


# The dashboard as a TypeScript value of Grafana's Dashboard type. Json<T> turns the schema's
# string enums into their values (JSON holds "absolute", not ThresholdsMode.Absolute); every other
# constraint stays, unknown fields included (TypeScript's excess property check).
SCHEMA_PROGRAM = """import type { Dashboard } from '@grafana/schema';
type Json<T> = T extends string ? `${T}`
  : T extends Array<infer U> ? Array<Json<U>>
  : T extends object ? { [K in keyof T]: Json<T[K]> }
  : T;
const dashboard: Json<Dashboard> = DASHBOARD;
export default dashboard;
"""


@check
def the_dashboard_passes_grafanas_own_schema() -> None:
    compiler = SCHEMA_CHECK / "node_modules" / "typescript" / "bin" / "tsc"
    if not (compiler.is_file() and (SCHEMA_CHECK / "node_modules" / "@grafana" / "schema").is_dir()):
        raise MissingTool("Grafana's schema is not installed: "
                          f"npm ci --prefix {SCHEMA_CHECK.relative_to(ROOT)}")
    if shutil.which("node") is None:
        raise MissingTool("node is not on PATH: install Debian's nodejs (npm brings it)")
    with tempfile.NamedTemporaryFile("w", suffix=".ts", dir=SCHEMA_CHECK, delete=False) as source:
        source.write(SCHEMA_PROGRAM.replace("DASHBOARD", DASHBOARD.read_text().strip()))
    try:
        checked = subprocess.run(
            ["node", str(compiler), "--noEmit", "--strict", "--skipLibCheck", "--module", "esnext",
             "--moduleResolution", "bundler", "--target", "es2022", source.name],
            cwd=SCHEMA_CHECK, capture_output=True, text=True, timeout=300)
    finally:
        os.unlink(source.name)
    expect(checked.returncode == 0, "the dashboard does not match Grafana's schema "
           f"(@grafana/schema; lines of the dashboard file + 5):\n{checked.stdout}{checked.stderr}")


def run_checks() -> int:
    failed = 0
    missing = []
    for function in CHECKS:
        try:
            function()
            print(f"ok      {function.__name__}")
        except CheckFailed as error:
            failed += 1
            print(f"FAILED  {function.__name__}: {error}")
        except MissingTool as error:
            missing.append(f"{function.__name__}: {error}")
            print(f"SKIPPED {function.__name__}: {error}")
    print(f"dashboard checks: {len(CHECKS) - failed - len(missing)} of {len(CHECKS)} passed")
    return exit_status(failed, missing)


if __name__ == "__main__":
    sys.exit(run_checks())
