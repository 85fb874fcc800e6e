#!/usr/bin/env python3
"""Checks of the Helm chart charts/neverwiped with the real Helm engine.

Helm's own Go SDK renders and lints the chart (PyPI helm-python-sdk); every rendered manifest is
validated against the Kubernetes schemas (kubernetes-validate), the Prometheus Operator's kinds
against models generated from its CRDs (cloudcoil), and the alerts' PromQL is parsed
(promql-parser). operator/tests/chart.rs runs this, so `cargo test --workspace` does.

    python3 tests/chart/check_chart.py                 every check; exit status 0 when all pass
    python3 tests/chart/check_chart.py render [--namespace NS] [--name RELEASE] [--values JSON]
        prints {"manifests": [...], "crds_yaml": "...", "notes": "..."} as JSON

A missing module or program prints "SKIPPED: ..." (what is missing and how to get it) as its last
line and exits with status 77; the caller decides whether that fails (operator/tests/chart.rs: it
does under CI, through neverwiped_testkit::missing). Install the modules with
    python3 -m pip install -r tests/chart/requirements.txt
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

MISSING_TOOL_EXIT = 77

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "neverwiped"
KUBERNETES_VERSION = "1.35.0"  # the API version the operator is built against (k8s-openapi)
RELEASE = "neverwiped"
NAMESPACE = "neverwiped-system"

try:
    import tomllib  # Python 3.11

    import bcrypt
    import cel
    import helm_python as helm
    import kubernetes_validate
    import promql_parser
    import yaml
    from cloudcoil.models.prometheus_operator import v1 as monitoring_v1
except ImportError as error:  # pragma: no cover - depends on the machine
    print(
        f"SKIPPED: the chart checks need the Python module {error.name!r}; "
        "install them with: python3 -m pip install -r tests/chart/requirements.txt"
    )
    sys.exit(MISSING_TOOL_EXIT)

# libyaml's loader when PyYAML has it: the CRDs are large.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DIGEST_OPERATOR = "sha256:" + "a1" * 32
DIGEST_SIDECAR = "sha256:" + "b2" * 32

# Every optional part switched on, and every value moved from its default.
EVERYTHING_ON: dict[str, Any] = {
    "image": {"repository": "registry.example.com:5000/neverwiped/operator", "tag": "1.2.3",
              "digest": DIGEST_OPERATOR, "pullPolicy": "Always"},
    "sidecar": {"image": {"repository": "registry.example.com:5000/neverwiped/sidecar",
                          "tag": "1.2.3", "digest": DIGEST_SIDECAR, "pullPolicy": "Always"}},
    "imagePullSecrets": [{"name": "regcred"}],
    "replicaCount": 2,
    "leaderElection": {"enabled": True, "leaseDuration": "30s"},
    "catchUpWindow": "6h",
    "logLevel": "info,neverwiped_operator=debug",
    "logFormat": "text",
    "serviceAccount": {"annotations": {"example.com/role": "backup"}},
    "podAnnotations": {"example.com/owner": "storage-team"},
    "podLabels": {"team": "storage"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "backup",
                     "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}},
        },
    }]}},
    "topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}},
    }],
    "priorityClassName": "system-cluster-critical",
    "terminationGracePeriodSeconds": 45,
    "extraEnv": [{"name": "TZ", "value": "UTC"}],
    "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
    "metrics": {
        "port": 9090,
        "service": {"port": 9091, "annotations": {"example.com/scrape": "true"}},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                           "interval": "1m", "scrapeTimeout": "15s"},
        "prometheusRule": {
            "enabled": True,
            "labels": {"release": "kube-prometheus-stack"},
            "additionalAlertLabels": {"team": "storage"},
            "backupOverdue": {"marginSeconds": 5400, "for": "5m", "severity": "page"},
            "backupFailed": {"window": "2h", "for": "1m", "severity": "ticket"},
            "repositoryCheckFailed": {"for": "10m", "severity": "page"},
            "suspiciousChange": {"for": "1m", "severity": "page"},
            "restoreDrillStale": {"thresholdSeconds": 1209600, "for": "1h", "severity": "ticket"},
        },
    },
    "restServer": {"enabled": True, "appendOnly": True, "htpasswdSecretName": "rest-server-users",
                   "persistence": {"enabled": True, "size": "20Gi",
                                   "storageClassName": "standard"}},
    "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Backups"}},
}

# The same, watching one namespace.
NAMESPACED = {**copy.deepcopy(EVERYTHING_ON), "watchNamespace": "shop"}

# Kubernetes resources that are not namespaced, among those the operator uses.
CLUSTER_SCOPED = {("storage.k8s.io", "storageclasses"),
                  ("snapshot.storage.k8s.io", "volumesnapshotclasses"),
                  ("authorization.k8s.io", "subjectaccessreviews")}

# The alerts and the metrics they read (operator/src/metrics.rs).
ALERT_METRICS = {
    "NeverwipedBackupOverdue": {"neverwiped_backup_last_success_timestamp_seconds",
                                "neverwiped_backup_schedule_interval_seconds"},
    "NeverwipedBackupFailed": {"neverwiped_backup_runs_total"},
    "NeverwipedRepositoryCheckFailed": {"neverwiped_repository_check_ok"},
    "NeverwipedSuspiciousChange": {"neverwiped_suspicious_change"},
    "NeverwipedCopyLagging": {"neverwiped_copy_lag_seconds"},
    "NeverwipedRestoreDrillFailed": {"neverwiped_restore_drill_last_result"},
    "NeverwipedRestoreDrillStale": {"neverwiped_restore_drill_last_success_timestamp_seconds"},
    "NeverwipedRestoreDrillOverObjective": {"neverwiped_restore_drill_duration_seconds",
                                            "neverwiped_restore_drill_objective_seconds"},
}


class CheckFailed(AssertionError):
    pass


class MissingTool(Exception):
    """What a check needs is not installed; the message says what and how to get it."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# --- rendering ------------------------------------------------------------------------------


class Rendered:
    """The manifests of one `helm install` (rendered offline), NOTES.txt, and the chart's CRDs."""

    def __init__(self, values: dict[str, Any] | None, namespace: str = NAMESPACE,
                 name: str = RELEASE) -> None:
        with helm.Chart.load(CHART) as chart:
            files = chart.render(values, name=name, namespace=namespace, is_install=True)
            self.crd_files = chart.crds
        self.notes = ""
        self.objects: list[dict[str, Any]] = []
        for path, text in sorted(files.items()):
            if path.endswith("NOTES.txt"):
                self.notes = text
                continue
            for document in yaml.load_all(text, Loader=YAML_LOADER):
                if document:
                    document["__template"] = path
                    self.objects.append(document)

    @property
    def crds(self) -> list[dict[str, Any]]:
        return [document for crd in self.crd_files
                for document in yaml.load_all(crd["data"], Loader=YAML_LOADER) if document]

    def manifests(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in o.items() if k != "__template"} for o in self.objects]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.all(kind) if name is None or o["metadata"]["name"] == name]
        expect(len(found) == 1, f"expected one {kind} {name or ''}, found "
               f"{[o['metadata']['name'] for o in found]}")
        return found[0]

    def kinds_and_names(self) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in self.objects}

    def operator(self) -> dict[str, Any]:
        return self.one("Deployment", f"{RELEASE}-operator")

    def operator_container(self) -> dict[str, Any]:
        return self.operator()["spec"]["template"]["spec"]["containers"][0]

    def operator_env(self) -> dict[str, Any]:
        return {e["name"]: e.get("value", e.get("valueFrom"))
                for e in self.operator_container()["env"]}


def render_error(values: dict[str, Any]) -> helm.HelmError | None:
    try:
        Rendered(values)
    except helm.HelmError as error:
        return error
    return None


def chart_values() -> dict[str, Any]:
    with helm.Chart.load(CHART) as chart:
        return chart.values


def chart_metadata() -> dict[str, Any]:
    with helm.Chart.load(CHART) as chart:
        return chart.metadata


# --- the checks -----------------------------------------------------------------------------

CHECKS: list[Callable[[], None]] = []


def check(function: Callable[[], None]) -> Callable[[], None]:
    CHECKS.append(function)
    return function


@check
def chart_metadata_names_the_workspace_version() -> None:
    metadata = chart_metadata()
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]
    expect(metadata["name"] == "neverwiped", f"chart name {metadata['name']}")
    expect(metadata["version"] == "0.1.0", f"chart version {metadata['version']}")
    expect(metadata.get("appVersion") == workspace["version"],
           f"appVersion {metadata.get('appVersion')!r} is not the workspace version "
           f"{workspace['version']!r} of Cargo.toml")
    expect(metadata.get("icon") and metadata.get("maintainers"), "icon and maintainers are set")


@check
def chart_crds_are_the_generated_crds() -> None:
    with helm.Chart.load(CHART) as chart:
        loaded = {Path(crd["name"]).name: crd["data"] for crd in chart.crds}
    committed = {path.name: path.read_text() for path in sorted((ROOT / "crds").glob("*.yaml"))}
    expect(loaded == committed,
           "the CRDs Helm loads from charts/neverwiped/crds differ from crds/; regenerate both with "
           "`cargo run -p neverwiped-operator --bin crdgen -- crds charts/neverwiped/crds`")


@check
def helm_lint_is_clean_with_default_and_optional_values() -> None:
    for label, values in [("default values", None), ("everything on", EVERYTHING_ON),
                          ("one namespace", NAMESPACED)]:
        report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE,
                           kube_version=f"v{KUBERNETES_VERSION}")
        expect(report["total_charts_linted"] == 1, f"{label}: lint saw no chart")
        expect(not report["messages"] and not report["errors"],
               f"helm lint ({label}) is not clean: {json.dumps(report['messages'], indent=1)}")


@check
def default_values_render_the_operator_and_nothing_optional() -> None:
    rendered = Rendered(None)
    expect(rendered.kinds_and_names() == {
        ("ServiceAccount", "neverwiped-operator"),
        ("ClusterRole", "neverwiped-operator"),
        ("ClusterRoleBinding", "neverwiped-operator"),
        ("Role", "neverwiped-operator-leader"),
        ("RoleBinding", "neverwiped-operator-leader"),
        ("Role", "neverwiped-operator-maintenance"),
        ("RoleBinding", "neverwiped-operator-maintenance"),
        ("Deployment", "neverwiped-operator"),
        ("Service", "neverwiped-operator-metrics"),
        ("ValidatingAdmissionPolicy", "neverwiped-read-access"),
        ("ValidatingAdmissionPolicyBinding", "neverwiped-read-access"),
        ("ValidatingAdmissionPolicy", "neverwiped-restore-requester"),
        ("ValidatingAdmissionPolicyBinding", "neverwiped-restore-requester"),
        ("ValidatingAdmissionPolicy", "neverwiped-suspicious-change"),
        ("ValidatingAdmissionPolicyBinding", "neverwiped-suspicious-change"),
    }, f"default objects: {sorted(rendered.kinds_and_names())}")
    expect(rendered.operator()["spec"]["replicas"] == 1, "one replica by default")
    everything = Rendered(EVERYTHING_ON)
    for kind in ["ServiceMonitor", "PrometheusRule", "PodDisruptionBudget",
                 "PersistentVolumeClaim"]:
        expect(len(everything.all(kind)) == 1, f"everything on renders one {kind}")
    expect(len(everything.all("Deployment")) == 2, "everything on: the REST server's Deployment")


def validate_monitoring(obj: dict[str, Any]) -> None:
    """The Prometheus Operator's kinds against models generated from its CRDs; a field the
    model does not know would be dropped on the way back, so the round trip must be exact."""
    model = getattr(monitoring_v1, obj["kind"])
    parsed = model.model_validate(obj)
    again = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    expect(again == obj, f"{obj['kind']} has fields its CRD does not define: "
           f"{json.dumps(obj)} != {json.dumps(again)}")


@check
def every_rendered_manifest_validates_against_its_schema() -> None:
    for label, values in [("default values", None), ("everything on", EVERYTHING_ON),
                          ("one namespace", NAMESPACED),
                          ("no leader election", {"leaderElection": {"enabled": False}})]:
        rendered = Rendered(values)
        for obj in rendered.manifests() + rendered.crds:
            where = f"{label}: {obj['kind']} {obj['metadata']['name']}"
            if obj["apiVersion"].startswith("monitoring.coreos.com/"):
                validate_monitoring(obj)
                continue
            try:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(part) for part in error.path)
                raise CheckFailed(f"{where}: {path}: {error.message}") from None
            except kubernetes_validate.SchemaNotFoundError as error:
                raise CheckFailed(f"{where}: {error.message}") from None


@check
def the_schema_validation_itself_rejects_what_kubernetes_would() -> None:
    # The validators above are not vacuous: a misspelt field fails each of them.
    rendered = Rendered(EVERYTHING_ON)
    deployment = {k: v for k, v in copy.deepcopy(rendered.operator()).items() if k != "__template"}
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    try:
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
        raise CheckFailed("kubernetes-validate accepted a misspelt field")
    except kubernetes_validate.ValidationError:
        pass
    rule = {k: v for k, v in copy.deepcopy(rendered.one("PrometheusRule")).items()
            if k != "__template"}
    rule["spec"]["groups"][0]["rules"][0]["fore"] = "5m"
    try:
        validate_monitoring(rule)
        raise AssertionError("unreachable")
    except CheckFailed as error:
        expect("fields its CRD does not define" in str(error), str(error))


# A wrong value, and what the error must say.
BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"replicaCount": "two"}, "/replicaCount"),
    ({"logFormat": "yaml"}, "/logFormat"),
    ({"logLevel": "verbose"}, "/logLevel"),
    ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
    ({"sidecar": {"image": {"pullPolicy": "Sometimes"}}}, "/sidecar/image/pullPolicy"),
    ({"imagePullSecret": [{"name": "regcred"}]}, "'imagePullSecret' not allowed"),
    ({"catchUpWindow": "1d"}, "/catchUpWindow"),
    ({"leaderElection": {"leaseDuration": "15"}}, "/leaderElection/leaseDuration"),
    ({"watchNamespace": "Shop_Prod"}, "/watchNamespace"),
    ({"metrics": {"port": 70000}}, "/metrics/port"),
    ({"metrics": {"prometheusRule": {"backupOverdue": {"marginSeconds": -60}}}},
     "/metrics/prometheusRule/backupOverdue/marginSeconds"),
    ({"metrics": {"prometheusRule": {"backupFailed": {"window": "one hour"}}}},
     "/metrics/prometheusRule/backupFailed/window"),
    ({"metrics": {"prometheusRule": {"restoreDrillStale": {"thresholdSeconds": 0}}}},
     "/metrics/prometheusRule/restoreDrillStale/thresholdSeconds"),
    ({"nodeSelector": {"disktype": 1}}, "/nodeSelector/disktype"),
    ({"restServer": {"enabled": "yes"}}, "/restServer/enabled"),
    ({"policy": {"allowedTolerations": [{"key": "x", "operator": "Maybe"}]}},
     "/policy/allowedTolerations/0/operator"),
    ({"policy": {"allowedRepositoryPrefixes": ["https://user@gate.example.com/"]}},
     "/policy/allowedRepositoryPrefixes/0"),
]


@check
def a_wrong_value_fails_the_install_with_a_message_naming_it() -> None:
    for values, names in BAD_VALUES:
        error = render_error(values)
        expect(isinstance(error, helm.HelmValuesError),
               f"{json.dumps(values)} was not rejected by values.schema.json (got {error!r})")
        message = str(error)
        expect(names in message, f"the error for {json.dumps(values)} does not name {names!r}: "
               f"{message}")
        print(f"    rejected {json.dumps(values)}: {message.strip().splitlines()[-1].strip()}")
    # A combination the schema cannot express: the template says what to do.
    error = render_error({"replicaCount": 2, "leaderElection": {"enabled": False}})
    expect(error is not None and "leaderElection.enabled" in str(error)
           and "replicaCount" in str(error), f"replicas without leader election: {error!r}")
    error = render_error({"metrics": {"service": {"enabled": False},
                                      "serviceMonitor": {"enabled": True}}})
    expect(error is not None and "metrics.service.enabled" in str(error),
           f"a ServiceMonitor without its Service: {error!r}")


@check
def every_value_has_a_schema_and_the_schema_allows_no_unknown_keys() -> None:
    with helm.Chart.load(CHART) as chart:
        schema = chart.schema
        chart.validate_schema(chart.values)
    expect(schema is not None, "values.schema.json exists")

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            expect(node.get("additionalProperties") is False,
                   f"{path or '(root)'} accepts unknown keys: a typo would pass silently")
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}".lstrip("."))

    walk(schema, "")


def rbac_table() -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of every row of docs/reference.md's RBAC table."""
    text = (ROOT / "docs" / "reference.md").read_text()
    section = text.split("\n## RBAC", 1)[1].split("\n## ", 1)[0]
    rows: set[tuple[str, str, str]] = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[1].startswith("`"):
            continue
        group = cells[0].strip("`").strip('"')
        resource = cells[1].strip("`")
        for verb in re.findall(r"`([a-z]+)`", cells[2]):
            rows.add((group, resource, verb))
    expect(len(rows) > 20, f"docs/reference.md's RBAC table was not found ({len(rows)} rows)")
    return rows


def rules_of(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    found = set()
    for rule in role["rules"]:
        expect(set(rule) <= {"apiGroups", "resources", "verbs"},
               f"{role['kind']} {role['metadata']['name']}: unexpected rule fields {rule}")
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    expect("*" not in (group, resource, verb),
                           f"{role['kind']} {role['metadata']['name']} has a wildcard")
                    found.add((group, resource, verb))
    return found


def binds(rendered: Rendered, binding: dict[str, Any], role: dict[str, Any]) -> None:
    expect(binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": role["kind"], "name": role["metadata"]["name"]},
           f"{binding['kind']} {binding['metadata']['name']} refers to {binding['roleRef']}")
    account = rendered.one("ServiceAccount")["metadata"]
    expect(binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                    "namespace": account["namespace"]}],
           f"{binding['kind']} {binding['metadata']['name']} binds {binding['subjects']}")
    expect(binding["metadata"].get("namespace") == role["metadata"].get("namespace"),
           f"{binding['kind']} {binding['metadata']['name']} is not beside its role")


@check
def rbac_is_exactly_the_documented_minimum() -> None:
    documented = rbac_table()
    leases = {row for row in documented if row[1] == "leases"}
    expect(leases == {("coordination.k8s.io", "leases", verb)
                      for verb in ["get", "create", "update"]}, f"documented leases: {leases}")
    rest = documented - leases

    rendered = Rendered(None)
    cluster_role = rendered.one("ClusterRole")
    expect(rules_of(cluster_role) == rest,
           f"ClusterRole vs docs/reference.md: extra {sorted(rules_of(cluster_role) - rest)}, "
           f"missing {sorted(rest - rules_of(cluster_role))}")
    binds(rendered, rendered.one("ClusterRoleBinding"), cluster_role)
    leader = rendered.one("Role", "neverwiped-operator-leader")
    expect(leader["metadata"]["namespace"] == NAMESPACE, "the leader Role is in the release's")
    expect(rules_of(leader) == leases, f"leader Role: {rules_of(leader)}")
    binds(rendered, rendered.one("RoleBinding", "neverwiped-operator-leader"), leader)
    copies = {("", "secrets", "create"), ("", "secrets", "delete")}
    maintenance = rendered.one("Role", "neverwiped-operator-maintenance")
    expect(maintenance["metadata"]["namespace"] == NAMESPACE,
           "the maintenance Role is in the release's namespace")
    expect(rules_of(maintenance) == copies, f"maintenance Role: {rules_of(maintenance)}")
    binds(rendered, rendered.one("RoleBinding", "neverwiped-operator-maintenance"), maintenance)

    # One namespace: a Role there, and a ClusterRole for the cluster-scoped lists only.
    rendered = Rendered(NAMESPACED)
    role = rendered.one("Role", "neverwiped-operator")
    expect(role["metadata"]["namespace"] == "shop", "the Role is in the watched namespace")
    cluster_role = rendered.one("ClusterRole")
    namespaced_rules, cluster_rules = rules_of(role), rules_of(cluster_role)
    expect(all((g, r) in CLUSTER_SCOPED for g, r, _ in cluster_rules)
           and not any((g, r) in CLUSTER_SCOPED for g, r, _ in namespaced_rules),
           "cluster-scoped resources go in the ClusterRole, the others in the Role")
    expect(namespaced_rules | cluster_rules == rest and not namespaced_rules & cluster_rules,
           f"Role + ClusterRole vs docs: {sorted((namespaced_rules | cluster_rules) ^ rest)}")
    binds(rendered, rendered.one("RoleBinding", "neverwiped-operator"), role)
    binds(rendered, rendered.one("ClusterRoleBinding"), cluster_role)
    # The protected prunes run in the release's namespace, outside the watched one.
    maintenance = rendered.one("Role", "neverwiped-operator-maintenance")
    expect(rules_of(maintenance) == copies | {
        ("batch", "jobs", verb) for verb in ["get", "list", "watch", "create", "delete"]
    } | {("", "pods", "list"), ("", "secrets", "get")},
           f"maintenance Role, one namespace: {sorted(rules_of(maintenance))}")

    # No leader election: no Lease rights; no RBAC at all when rbac.create is false.
    rendered = Rendered({"leaderElection": {"enabled": False}})
    expect(not any(o["metadata"]["name"].endswith("-leader")
                   for o in rendered.all("Role") + rendered.all("RoleBinding")),
           "without leader election there is no leader Role")
    rendered = Rendered({"rbac": {"create": False}})
    expect(not any(o["apiVersion"].startswith("rbac.") for o in rendered.objects),
           "rbac.create=false renders no RBAC")


def pod_specs(rendered: Rendered) -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"])
            for d in rendered.all("Deployment")]


@check
def pods_are_hardened() -> None:
    for values in [None, EVERYTHING_ON]:
        rendered = Rendered(values)
        for name, pod in pod_specs(rendered):
            security = pod.get("securityContext", {})
            expect(security.get("runAsNonRoot") is True, f"{name}: runAsNonRoot")
            expect(security.get("seccompProfile") == {"type": "RuntimeDefault"},
                   f"{name}: seccomp RuntimeDefault")
            for field in ["hostNetwork", "hostPID", "hostIPC"]:
                expect(not pod.get(field), f"{name}: {field}")
            expect(not any("hostPath" in volume for volume in pod.get("volumes", [])),
                   f"{name}: no hostPath")
            expect(pod.get("automountServiceAccountToken") is (name == "neverwiped-operator"),
                   f"{name}: automountServiceAccountToken only on the operator")
            for container in pod["containers"] + pod.get("initContainers", []):
                context = container.get("securityContext", {})
                where = f"{name}/{container['name']}"
                expect(context.get("readOnlyRootFilesystem") is True,
                       f"{where}: readOnlyRootFilesystem")
                expect(context.get("allowPrivilegeEscalation") is False,
                       f"{where}: allowPrivilegeEscalation false")
                expect(context.get("capabilities") == {"drop": ["ALL"]},
                       f"{where}: capabilities drop ALL, add none")
                expect(not context.get("privileged"), f"{where}: not privileged")
                resources = container.get("resources", {})
                expect({"cpu", "memory"} <= set(resources.get("requests", {}))
                       and "memory" in resources.get("limits", {}),
                       f"{where}: CPU and memory requests and a memory limit")
        account = rendered.one("ServiceAccount")
        expect(account.get("automountServiceAccountToken") is False,
               "the ServiceAccount mounts no token unless a pod asks")


@check
def the_operator_has_probes_on_its_http_port() -> None:
    for values, port in [(None, 8080), (EVERYTHING_ON, 9090)]:
        container = Rendered(values).operator_container()
        expect(container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}],
               f"ports {container['ports']}")
        expect(container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"},
               "liveness probe on /healthz")
        expect(container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"},
               "readiness probe on /readyz")
        expect(Rendered(values).operator_env()["NEVERWIPED_HTTP_ADDR"] == f"0.0.0.0:{port}",
               "the operator listens on the probed port")


@check
def images_are_referenced_by_tag_and_optional_digest() -> None:
    app_version = chart_metadata()["appVersion"]
    rendered = Rendered(None)
    container = rendered.operator_container()
    expect(container["image"] == f"ghcr.io/neverwiped/operator:{app_version}",
           f"default operator image {container['image']}")
    env = rendered.operator_env()
    expect(env["NEVERWIPED_SIDECAR_IMAGE"] == f"ghcr.io/neverwiped/sidecar:{app_version}",
           f"default sidecar image {env['NEVERWIPED_SIDECAR_IMAGE']}")
    expect("imagePullSecrets" not in rendered.operator()["spec"]["template"]["spec"],
           "no pull secrets by default")

    rendered = Rendered(EVERYTHING_ON)
    container = rendered.operator_container()
    expect(container["image"] ==
           f"registry.example.com:5000/neverwiped/operator:1.2.3@{DIGEST_OPERATOR}",
           f"operator image {container['image']}")
    expect(container["imagePullPolicy"] == "Always", "operator pull policy")
    env = rendered.operator_env()
    expect(env["NEVERWIPED_SIDECAR_IMAGE"] ==
           f"registry.example.com:5000/neverwiped/sidecar:1.2.3@{DIGEST_SIDECAR}",
           f"sidecar image {env['NEVERWIPED_SIDECAR_IMAGE']}")
    expect(env["NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY"] == "Always", "sidecar pull policy")
    for name, pod in pod_specs(rendered):
        expect(pod.get("imagePullSecrets") == [{"name": "regcred"}], f"{name}: pull secrets")
    # tests/e2e/kind.sh's `helm install --set-string` of its locally built images.
    values = helm.parse_set_string_values(
        "image.repository=neverwiped/operator,image.tag=e2e,"
        "sidecar.image.repository=neverwiped/sidecar,sidecar.image.tag=e2e")
    rendered = Rendered(values)
    expect(rendered.operator_container()["image"] == "neverwiped/operator:e2e"
           and rendered.operator_env()["NEVERWIPED_SIDECAR_IMAGE"] == "neverwiped/sidecar:e2e",
           "the values tests/e2e/kind.sh sets")
    env = Rendered({"sidecar": {"image": {"pullPolicy": ""}}}).operator_env()
    expect("NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY" not in env,
           "an empty sidecar pull policy leaves Kubernetes' default")


@check
def the_operator_environment_follows_the_values() -> None:
    settings_rs = (ROOT / "operator" / "src" / "environment.rs").read_text()
    field = lambda path: {"fieldRef": {"fieldPath": path}}  # noqa: E731
    env = Rendered(None).operator_env()
    expect(env == {
        "NEVERWIPED_SIDECAR_IMAGE": env["NEVERWIPED_SIDECAR_IMAGE"],
        "NEVERWIPED_SIDECAR_IMAGE_PULL_POLICY": "IfNotPresent",
        "NEVERWIPED_DRILL_IMAGE": env["NEVERWIPED_DRILL_IMAGE"],
        "NEVERWIPED_DRILL_IMAGE_PULL_POLICY": "IfNotPresent",
        "NEVERWIPED_HTTP_ADDR": "0.0.0.0:8080",
        "NEVERWIPED_CATCH_UP_WINDOW": "24h",
        "NEVERWIPED_MAX_RUNNING_BACKUPS": "25",
        "NEVERWIPED_MAX_RUNNING_MAINTENANCE": "5",
        "NEVERWIPED_MAX_RUNNING_PER_NODE": "3",
        "NEVERWIPED_MAX_RUNNING_PER_REPOSITORY_HOST": "10",
        "NEVERWIPED_RECONCILE_CONCURRENCY": "32",
        "NEVERWIPED_SUSPICIOUS_MIN_HISTORY": "3",
        "NEVERWIPED_SUSPICIOUS_FACTOR": "5",
        "NEVERWIPED_SUSPICIOUS_REWRITTEN_SHARE": "0.5",
        "NEVERWIPED_SUSPICIOUS_REMOVED_SHARE": "0.3",
        "NEVERWIPED_SUSPICIOUS_INCOMPRESSIBLE_SHARE": "0.9",
        "NEVERWIPED_SUSPICIOUS_USUAL_COMPRESSED_SHARE": "0.75",
        "NEVERWIPED_SUSPICIOUS_MIN_NEW_BYTES": "16777216",
        # Multi-tenant by default: no repository is allowed until the admin lists the gate.
        "NEVERWIPED_TENANT_POLICY": '{"allowedRepositoryPrefixes":[]}',
        "NEVERWIPED_LEADER_ELECTION": "true",
        "NEVERWIPED_LEASE_NAME": "neverwiped-operator",
        "NEVERWIPED_LEASE_DURATION": "15s",
        "POD_NAME": field("metadata.name"),
        "POD_NAMESPACE": field("metadata.namespace"),
        "NEVERWIPED_LOG_FORMAT": "json",
        "RUST_LOG": "info",
    }, f"default environment: {json.dumps(env, indent=1)}")
    for name in env:
        expect(f"`{name}`" in settings_rs or f'"{name}"' in settings_rs,
               f"{name} is not a setting of operator/src/environment.rs")

    env = Rendered(NAMESPACED).operator_env()
    for name, value in {"NEVERWIPED_WATCH_NAMESPACE": "shop", "NEVERWIPED_CATCH_UP_WINDOW": "6h",
                        "NEVERWIPED_LEASE_DURATION": "30s", "NEVERWIPED_LOG_FORMAT": "text",
                        "RUST_LOG": "info,neverwiped_operator=debug", "TZ": "UTC"}.items():
        expect(env.get(name) == value, f"{name} = {env.get(name)!r}, not {value!r}")
    expect(Rendered(NAMESPACED).operator()["spec"]["replicas"] == 2, "replicaCount")

    env = Rendered({"concurrency": {"backups": 0, "perNode": 1}}).operator_env()
    expect(env["NEVERWIPED_MAX_RUNNING_BACKUPS"] == "0"
           and env["NEVERWIPED_MAX_RUNNING_PER_NODE"] == "1", "concurrency values")

    expect(env["NEVERWIPED_DRILL_IMAGE"].startswith("ghcr.io/neverwiped/drill:"),
           f"drill image {env['NEVERWIPED_DRILL_IMAGE']}")
    env = Rendered({"drill": {"image": {"repository": ""}}}).operator_env()
    expect("NEVERWIPED_DRILL_IMAGE" not in env and "NEVERWIPED_DRILL_IMAGE_PULL_POLICY" not in env,
           "an empty drill repository leaves drills to the sidecar image")

    env = Rendered({"leaderElection": {"enabled": False}}).operator_env()
    expect(env["NEVERWIPED_LEADER_ELECTION"] == "false"
           and "NEVERWIPED_LEASE_NAME" not in env, "leader election off")


@check
def scheduling_values_reach_the_operator_pod() -> None:
    pod = Rendered(EVERYTHING_ON).operator()["spec"]["template"]
    spec = pod["spec"]
    for key in ["nodeSelector", "tolerations", "affinity", "topologySpreadConstraints",
                "priorityClassName", "terminationGracePeriodSeconds"]:
        expect(spec.get(key) == EVERYTHING_ON[key], f"{key}: {spec.get(key)}")
    expect(pod["metadata"]["annotations"] == EVERYTHING_ON["podAnnotations"], "podAnnotations")
    expect(pod["metadata"]["labels"]["team"] == "storage", "podLabels")


def bcrypt_matches(password: str, hashed: str) -> bool:
    return bcrypt.checkpw(password.encode(), hashed.encode())


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@check
def the_metrics_service_and_service_monitor_reach_the_operator() -> None:
    rendered = Rendered(EVERYTHING_ON)
    service = rendered.one("Service", "neverwiped-operator-metrics")
    operator = rendered.operator()
    expect(selects(service["spec"]["selector"], operator["spec"]["template"]["metadata"]["labels"]),
           "the metrics Service selects the operator's pods")
    rest_server = rendered.one("Deployment", "neverwiped-rest-server")
    expect(not selects(service["spec"]["selector"],
                       rest_server["spec"]["template"]["metadata"]["labels"]),
           "the metrics Service does not select the REST server")
    expect(selects(operator["spec"]["selector"]["matchLabels"],
                   operator["spec"]["template"]["metadata"]["labels"]),
           "the Deployment selects its pods")
    expect(service["spec"]["ports"] == [{"name": "http", "port": 9091, "targetPort": "http",
                                         "protocol": "TCP"}], f"ports {service['spec']['ports']}")
    monitor = rendered.one("ServiceMonitor")
    expect(monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack",
           "ServiceMonitor labels")
    expect(selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]),
           "the ServiceMonitor selects the metrics Service")
    expect(not selects(monitor["spec"]["selector"]["matchLabels"],
                       rendered.one("Service", "neverwiped-rest-server")["metadata"]["labels"]),
           "the ServiceMonitor does not select the REST server's Service")
    expect(monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics",
                                             "interval": "1m", "scrapeTimeout": "15s"}],
           f"endpoints {monitor['spec']['endpoints']}")
    expect(monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]},
           "the ServiceMonitor looks in the release's namespace")


def metric_names(expression: str) -> set[str]:
    names = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(node.name)
        for attribute in ["expr", "lhs", "rhs", "vector_selector"]:
            child = getattr(node, attribute, None)
            if child is not None:
                visit(child)
        for child in getattr(node, "args", None) or []:
            visit(child)

    try:
        parsed = promql_parser.parse(expression)
    except ValueError as error:
        raise CheckFailed(f"the PromQL does not parse ({error}):\n{expression}") from None
    visit(parsed)
    return names


@check
def the_alerts_parse_and_read_the_operators_metrics() -> None:
    rendered = Rendered(EVERYTHING_ON)
    rule = rendered.one("PrometheusRule")
    expect(rule["metadata"]["labels"]["release"] == "kube-prometheus-stack", "rule labels")
    rules = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    expect(set(rules) == set(ALERT_METRICS), f"alerts {sorted(rules)}")
    for name, alert in rules.items():
        expect(metric_names(alert["expr"]) == ALERT_METRICS[name],
               f"{name} reads {metric_names(alert['expr'])}")
        promql_parser.parse_duration(alert["for"])
        expect(alert["labels"]["team"] == "storage", f"{name}: additional labels")
        expect(set(alert["annotations"]) == {"summary", "description"}, f"{name}: annotations")
        # The annotations name labels the expression keeps.
        kept = {"namespace", "plan"} | ({"reason"} if name == "NeverwipedBackupFailed" else set()) \
            | ({"copy"} if name == "NeverwipedCopyLagging" else set())
        used = set(re.findall(r"\$labels\.([a-z_]+)", json.dumps(alert["annotations"])))
        expect(used <= kept, f"{name}'s annotations use labels its expression drops: {used}")
    thresholds = EVERYTHING_ON["metrics"]["prometheusRule"]
    overdue = rules["NeverwipedBackupOverdue"]
    expect(overdue["expr"].rstrip().endswith("+ 5400") and overdue["for"] == "5m"
           and overdue["labels"]["severity"] == "page", "the overdue alert's thresholds")
    failed = rules["NeverwipedBackupFailed"]
    expect("[2h]" in failed["expr"] and "offset 2h" in failed["expr"]
           and failed["labels"]["severity"] == thresholds["backupFailed"]["severity"],
           "the failed-run alert's window and severity")
    expect(rules["NeverwipedRepositoryCheckFailed"]["for"] == "10m", "the check alert's for")
    expect(rules["NeverwipedSuspiciousChange"]["for"] == "1m"
           and rules["NeverwipedSuspiciousChange"]["labels"]["severity"] == "page",
           "the suspicious-change alert's for and severity")
    stale = rules["NeverwipedRestoreDrillStale"]
    expect(stale["expr"].rstrip().endswith("> 1209600") and stale["for"] == "1h"
           and stale["labels"]["severity"] == "ticket", "the stale-drill alert's thresholds")

    # Each alert can be switched off.
    values = copy.deepcopy(EVERYTHING_ON)
    values["metrics"]["prometheusRule"]["backupFailed"]["enabled"] = False
    rule = Rendered(values).one("PrometheusRule")
    expect({r["alert"] for r in rule["spec"]["groups"][0]["rules"]} ==
           set(ALERT_METRICS) - {"NeverwipedBackupFailed"}, "backupFailed off")


@check
def the_rest_server_is_off_by_default_and_marked_not_for_production() -> None:
    expect(not any("rest-server" in o["metadata"]["name"] for o in Rendered(None).objects),
           "no REST server by default")
    rendered = Rendered(EVERYTHING_ON)
    deployment = rendered.one("Deployment", "neverwiped-rest-server")
    expect(deployment["metadata"]["annotations"]["neverwiped.io/not-for-production"] == "true",
           "the REST server is annotated as not for production")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    expect(container["image"] == "docker.io/restic/rest-server:0.13.0",
           f"the stock image: {container['image']}")
    env = {e["name"]: e["value"] for e in container["env"]}
    expect(env == {"DATA_DIRECTORY": "/data", "PASSWORD_FILE": "/etc/rest-server/.htpasswd",
                   "OPTIONS": "--listen :8000 --append-only --private-repos"}, f"environment {env}")
    expect(not rendered.all("Secret"), "a Secret of one's own: none generated")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    expect(volumes["data"]["persistentVolumeClaim"]["claimName"] == "neverwiped-rest-server",
           "data on the PVC")
    expect(volumes["htpasswd"]["secret"]["secretName"] == "rest-server-users", "htpasswd")
    expect(rendered.one("PersistentVolumeClaim")["spec"]["storageClassName"] == "standard",
           "the PVC's class")
    service = rendered.one("Service", "neverwiped-rest-server")
    expect(selects(service["spec"]["selector"],
                   deployment["spec"]["template"]["metadata"]["labels"]), "its Service")

    bare = Rendered({"restServer": {"enabled": True}})
    container = bare.one("Deployment", "neverwiped-rest-server")["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in container["containers"][0]["env"]}
    expect(env == {"DATA_DIRECTORY": "/data", "PASSWORD_FILE": "/etc/rest-server/.htpasswd",
                   "OPTIONS": "--listen :8000 --private-repos"},
           f"by default: a login and private repositories ({env})")
    volumes = {v["name"]: v for v in container["volumes"]}
    expect(volumes["data"] == {"name": "data", "emptyDir": {}}, "an emptyDir")
    expect(volumes["htpasswd"]["secret"]["secretName"] == "neverwiped-rest-server-login",
           f"the generated login: {volumes['htpasswd']}")
    expect(not bare.all("PersistentVolumeClaim"), "no PVC without persistence")
    login = bare.one("Secret", "neverwiped-rest-server-login")
    expect(login["type"] == "kubernetes.io/basic-auth"
           and login["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep",
           "the login is a basic-auth Secret kept on uninstall")
    data = {key: base64.b64decode(value).decode() for key, value in login["data"].items()}
    expect(data["username"] == "neverwiped" and len(data["password"]) == 32,
           "a user and a random password of 32 characters")
    user, hashed = data[".htpasswd"].split(":", 1)
    expect(user == "neverwiped" and hashed.startswith("$2a$"),
           f"an htpasswd line with a bcrypt hash: {data['.htpasswd']}")
    expect(bcrypt_matches(data["password"], hashed), "the htpasswd hash is of the password")
    again = Rendered({"restServer": {"enabled": True}}).one("Secret", "neverwiped-rest-server-login")
    expect(base64.b64decode(again["data"]["password"]).decode() != data["password"],
           "each install draws its own password")

    open_server = Rendered({"restServer": {"enabled": True, "authentication": False,
                                           "privateRepos": False}})
    container = open_server.one("Deployment", "neverwiped-rest-server")["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in container["containers"][0]["env"]}
    expect(env.get("DISABLE_AUTHENTICATION") == "1" and env["OPTIONS"] == "--listen :8000",
           f"authentication off: no login ({env})")
    expect(not open_server.all("Secret"), "authentication off: no login Secret")


SAMPLE_PLAN = {"apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
               "metadata": {"name": "nightly", "namespace": "shop"},
               "spec": {"schedule": "@daily",
                        "repository": {"url": "https://gate.example.com/shop",
                                       "passwordSecretRef": {"name": "repo", "key": "password"},
                                       "credentialsSecretRef": {"name": "gate"},
                                       "caSecretRef": {"name": "gate-ca", "key": "ca.crt"}},
                        "volumes": [{"claimName": "data"}, {"selector": {"matchLabels": {"a": "b"}}}],
                        "databases": [{"name": "orders", "type": "postgresql", "host": "pg",
                                       "credentialsSecretRef": {"name": "orders-db"}}]}}
SAMPLE_RESTORE = {"apiVersion": "neverwiped.io/v1alpha1", "kind": "Restore",
                  "metadata": {"name": "back", "namespace": "shop"},
                  "spec": {"backupPlanName": "nightly",
                           "volumes": [{"sourceClaimName": "data", "targetClaimName": "data-new"}],
                           "databases": [{"name": "orders", "host": "pg2",
                                          "credentialsSecretRef": {"name": "pg2-admin"}}]}}


def policy_variables(policy: dict[str, Any], obj: dict[str, Any], resource: str) -> dict[str, Any]:
    """The policy's variables evaluated (with the cel crate) for a request that creates `obj`."""
    request = {"operation": "CREATE", "namespace": "shop", "kind": {"kind": obj["kind"]},
               "resource": {"group": "neverwiped.io", "version": "v1alpha1", "resource": resource}}
    variables: dict[str, Any] = {}
    for variable in policy["spec"]["variables"]:
        context = {"object": obj, "oldObject": None, "request": request, "variables": variables}
        variables[variable["name"]] = cel.evaluate(variable["expression"], context)
    return variables


@check
def the_admission_policy_requires_read_access_to_what_a_plan_or_restore_names() -> None:
    rendered = Rendered(None)
    policy = rendered.one("ValidatingAdmissionPolicy", "neverwiped-read-access")
    binding = rendered.one("ValidatingAdmissionPolicyBinding", "neverwiped-read-access")
    expect(binding["spec"]["policyName"] == policy["metadata"]["name"]
           and binding["spec"]["validationActions"] == ["Deny"]
           and "matchResources" not in binding["spec"], f"the binding: {binding['spec']}")
    spec = policy["spec"]
    expect(spec["failurePolicy"] == "Fail", "a policy that cannot be evaluated refuses")
    rules = spec["matchConstraints"]["resourceRules"]
    expect(rules == [{"apiGroups": ["neverwiped.io"], "apiVersions": ["*"],
                      "operations": ["CREATE", "UPDATE"],
                      "resources": ["backupplans", "restores"]}], f"what it matches: {rules}")
    # Every expression parses as CEL (the cel crate's parser; the API server's type checks, with
    # the authorizer library, run only on a cluster).
    expressions = [c["expression"] for c in spec["matchConditions"]]
    expressions += [v["expression"] for v in spec["variables"]]
    for validation in spec["validations"]:
        expressions.append(validation["expression"])
        expressions.extend(v for k, v in validation.items() if k == "messageExpression")
    for expression in expressions:
        try:
            cel.compile(expression)
        except ValueError as error:
            raise CheckFailed(f"a CEL expression of the admission policy does not parse: {error}")
    checks = " ".join(v["expression"] for v in spec["validations"])
    for part in ["resource('secrets')", "resource('persistentvolumeclaims')", "check('get')",
                 "check('list')", "resource('backupplans')", "namespace(request.namespace)"]:
        expect(part in checks, f"the validations lack {part}")
    # What each kind names, as the policy's variables find it.
    plan = policy_variables(policy, SAMPLE_PLAN, "backupplans")
    expect(plan["secretNames"] == ["repo", "gate", "gate-ca", "orders-db"]
           and plan["claimNames"] == ["data"] and plan["selectsClaims"] is True,
           f"a plan's names: {plan}")
    minimal = copy.deepcopy(SAMPLE_PLAN)
    del minimal["spec"]["repository"]["credentialsSecretRef"]
    del minimal["spec"]["repository"]["caSecretRef"]
    del minimal["spec"]["databases"]
    minimal["spec"]["volumes"] = [{"claimName": "data"}]
    plan = policy_variables(policy, minimal, "backupplans")
    expect(plan["secretNames"] == ["repo"] and plan["selectsClaims"] is False,
           f"a minimal plan's names: {plan}")
    restore = policy_variables(policy, SAMPLE_RESTORE, "restores")
    expect(restore["secretNames"] == ["pg2-admin"] and restore["claimNames"] == ["data-new"]
           and restore["selectsClaims"] is False, f"a Restore's names: {restore}")
    alone = copy.deepcopy(SAMPLE_RESTORE)
    del alone["spec"]["backupPlanName"]
    alone["spec"]["repository"] = {"url": "https://gate.example.com/shop",
                                   "passwordSecretRef": {"name": "old-repo", "key": "password"},
                                   "credentialsSecretRef": {"name": "old-gate"}}
    alone["spec"]["origin"] = "shop/nightly"
    restore = policy_variables(policy, alone, "restores")
    expect(restore["secretNames"] == ["old-repo", "old-gate", "pg2-admin"],
           f"a Restore from a repository alone names its repository's Secrets: {restore}")

    policies = Rendered({"policy": {"requireReadAccess": False}}).all("ValidatingAdmissionPolicy")
    expect([p["metadata"]["name"] for p in policies]
           == ["neverwiped-restore-requester", "neverwiped-suspicious-change"],
           "policy.requireReadAccess: false installs no read-access policy (the others stay)")
    scoped = Rendered(NAMESPACED).one("ValidatingAdmissionPolicyBinding", "neverwiped-read-access")
    expect(scoped["spec"]["matchResources"] == {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "shop"}}}, "with watchNamespace: that namespace only")


def requester_policy_allows(policy: dict[str, Any], operation: str, user: str,
                            annotations: dict[str, str] | None,
                            old_annotations: dict[str, str] | None = None) -> bool:
    """Whether the restore-requester policy's validations (evaluated with the cel crate) let
    `user` CREATE or UPDATE a Restore with `annotations`. The groups rule uses the Kubernetes
    strings library (split, trim), which the cel crate lacks: it is evaluated only where it stops
    before them (no groups annotation)."""
    def restore(notes: dict[str, str] | None) -> dict[str, Any]:
        obj = copy.deepcopy(SAMPLE_RESTORE)
        if notes is not None:
            obj["metadata"]["annotations"] = notes
        return obj
    obj, old = restore(annotations), restore(old_annotations) if operation == "UPDATE" else None
    request = {"operation": operation, "namespace": "shop", "kind": {"kind": "Restore"},
               "userInfo": {"username": user, "groups": ["team-a", "system:authenticated"]}}
    variables: dict[str, Any] = {}
    for variable in policy["spec"]["variables"]:
        context = {"object": obj, "oldObject": old, "request": request, "variables": variables}
        variables[variable["name"]] = cel.evaluate(variable["expression"], context)
    context = {"object": obj, "oldObject": old, "request": request, "variables": variables}
    has_groups = "neverwiped.io/requested-by-groups" in (annotations or {})
    results = [cel.evaluate(v["expression"], context) for v in policy["spec"]["validations"]
               if not (has_groups and "split(" in v["expression"])]
    return all(results)


@check
def the_restore_requester_policy_lets_only_the_creator_name_themself() -> None:
    rendered = Rendered(None)
    policy = rendered.one("ValidatingAdmissionPolicy", "neverwiped-restore-requester")
    binding = rendered.one("ValidatingAdmissionPolicyBinding", "neverwiped-restore-requester")
    expect(binding["spec"]["policyName"] == policy["metadata"]["name"]
           and binding["spec"]["validationActions"] == ["Deny"], f"the binding: {binding['spec']}")
    spec = policy["spec"]
    expect(spec["failurePolicy"] == "Fail" and "matchConditions" not in spec,
           "it refuses when it cannot decide, and sees metadata-only updates too")
    expect(spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["neverwiped.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
         "resources": ["restores"]}], f"what it matches: {spec['matchConstraints']}")
    for validation in spec["validations"]:
        for key in ["expression", "messageExpression"]:
            if key in validation:
                cel.compile(validation[key])
    user = "neverwiped.io/requested-by"
    groups = "neverwiped.io/requested-by-groups"
    for operation, who, notes, old, allowed in [
        ("CREATE", "alice", {user: "alice"}, None, True),
        ("CREATE", "alice", {user: "admin"}, None, False),
        ("CREATE", "alice", None, None, False),
        ("CREATE", "alice", {user: ""}, None, False),
        ("UPDATE", "bob", {user: "alice"}, {user: "alice"}, True),
        ("UPDATE", "alice", {user: "bob"}, {user: "alice"}, False),
        ("UPDATE", "alice", {user: "alice", groups: "sre"}, {user: "alice"}, False),
        ("UPDATE", "alice", {user: "alice", "other": "x"}, {user: "alice"}, True),
    ]:
        expect(requester_policy_allows(policy, operation, who, notes, old) == allowed,
               f"{operation} by {who} with {notes} (before: {old}) is "
               f"{'allowed' if allowed else 'refused'}")
    groups_rule = [v["expression"] for v in spec["validations"] if "split(" in v["expression"]]
    expect(len(groups_rule) == 1 and "request.userInfo.groups" in groups_rule[0],
           f"one rule keeps requested-by-groups within the user's groups: {groups_rule}")
    scoped = Rendered(NAMESPACED).one("ValidatingAdmissionPolicyBinding",
                                      "neverwiped-restore-requester")
    expect(scoped["spec"]["matchResources"] == {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "shop"}}}, "with watchNamespace: that namespace only")


def acknowledgement_allowed(policy: dict[str, Any], operation: str, groups: list[str],
                            annotations: dict[str, str] | None,
                            old_annotations: dict[str, str] | None = None) -> bool:
    """Whether the suspicious-change policy's validations (evaluated with the cel crate) let a
    user in `groups` CREATE or UPDATE a BackupPlan with `annotations`."""
    def plan(notes: dict[str, str] | None) -> dict[str, Any]:
        obj = {"metadata": {"name": "nightly", "namespace": "shop"}, "spec": {}}
        if notes is not None:
            obj["metadata"]["annotations"] = notes
        return obj
    obj, old = plan(annotations), plan(old_annotations) if operation == "UPDATE" else None
    request = {"operation": operation, "namespace": "shop", "kind": {"kind": "BackupPlan"},
               "userInfo": {"username": "someone", "groups": groups}}
    variables: dict[str, Any] = {}
    for variable in policy["spec"]["variables"]:
        context = {"object": obj, "oldObject": old, "request": request, "variables": variables}
        variables[variable["name"]] = cel.evaluate(variable["expression"], context)
    context = {"object": obj, "oldObject": old, "request": request, "variables": variables}
    return all(cel.evaluate(v["expression"], context) for v in policy["spec"]["validations"])


@check
def the_suspicious_change_policy_lets_only_admin_groups_acknowledge() -> None:
    rendered = Rendered({"suspiciousChange": {"adminGroups": ["backup-admins", "system:masters"]}})
    policy = rendered.one("ValidatingAdmissionPolicy", "neverwiped-suspicious-change")
    binding = rendered.one("ValidatingAdmissionPolicyBinding", "neverwiped-suspicious-change")
    expect(binding["spec"]["policyName"] == policy["metadata"]["name"]
           and binding["spec"]["validationActions"] == ["Deny"], f"the binding: {binding['spec']}")
    spec = policy["spec"]
    expect(spec["failurePolicy"] == "Fail" and "matchConditions" not in spec,
           "it refuses when it cannot decide, and sees metadata-only updates too")
    message = spec["validations"][0]["message"]
    expect(message.startswith("only members of the admin groups (backup-admins, system:masters) "
                              "may set, change or remove the BackupPlan annotations "
                              "neverwiped.io/acknowledge-suspicious-change and "
                              "neverwiped.io/expected-change"), f"the refusal: {message}")
    ack = "neverwiped.io/acknowledge-suspicious-change"
    expected = "neverwiped.io/expected-change"
    tenant, admin = ["team-a", "system:authenticated"], ["backup-admins", "system:authenticated"]
    for operation, groups, notes, old, allowed in [
        ("UPDATE", tenant, {ack: "4f2a9c1b"}, None, False),
        ("UPDATE", tenant, {ack: "4f2a9c1b"}, {ack: "00000000"}, False),
        ("UPDATE", tenant, None, {ack: "4f2a9c1b"}, False),
        ("CREATE", tenant, {expected: "migration"}, None, False),
        ("UPDATE", tenant, {ack: "4f2a9c1b", "other": "x"}, {ack: "4f2a9c1b"}, True),
        ("CREATE", tenant, {"other": "x"}, None, True),
        ("UPDATE", admin, {ack: "4f2a9c1b"}, None, True),
        ("UPDATE", admin, {expected: "migration"}, {}, True),
    ]:
        expect(acknowledgement_allowed(policy, operation, groups, notes, old) == allowed,
               f"{operation} by {groups} with {notes} (before: {old}) is "
               f"{'allowed' if allowed else 'refused'}")


@check
def the_maintenance_values_reach_the_operator_as_json() -> None:
    expect("NEVERWIPED_MAINTENANCE" not in Rendered(None).operator_env(),
           "no maintenance credentials or window by default")
    values = {"credentials": [{"urlPrefix": "https://gate.example.com/",
                               "secretName": "gate-maintenance"}],
              "protectionWindow": {"default": "14d", "namespaces": {"shop": "30d"},
                                   "urlPrefixes": []}}
    env = Rendered({"maintenance": values}).operator_env()
    expect(json.loads(env["NEVERWIPED_MAINTENANCE"]) == values,
           f"maintenance values: {env.get('NEVERWIPED_MAINTENANCE')}")
    window_only = Rendered({"maintenance": {"protectionWindow": {"default": "7d"}}})
    expect("NEVERWIPED_MAINTENANCE" in window_only.operator_env(), "a window alone is passed")


@check
def the_tenant_policy_reaches_the_operator_as_json() -> None:
    expect(json.loads(Rendered(None).operator_env()["NEVERWIPED_TENANT_POLICY"])
           == {"allowedRepositoryPrefixes": []},
           "multi-tenant by default: no repository until the admin lists one")
    expect("NEVERWIPED_TENANT_POLICY" not in Rendered({"tenancy": "single"}).operator_env(),
           "single-tenant: no limits")
    preset = yaml.safe_load((CHART / "values-single-tenant.yaml").read_text())
    expect("NEVERWIPED_TENANT_POLICY" not in Rendered(preset).operator_env(),
           "the single-tenant preset sets no limits")
    env = Rendered({"restServer": {"enabled": True}}).operator_env()
    expect(json.loads(env["NEVERWIPED_TENANT_POLICY"]) == {"allowedRepositoryPrefixes": [
        "http://neverwiped-rest-server.neverwiped-system.svc:8000/"]},
           f"multi-tenant with the trial server: only it ({env['NEVERWIPED_TENANT_POLICY']})")
    hosts = {"shop": ["postgres.shop.svc", "*.db.shop.svc"], "*": []}
    env = Rendered({"tenancy": "single",
                    "policy": {"allowedRestoreDatabaseHosts": hosts}}).operator_env()
    expect(json.loads(env["NEVERWIPED_TENANT_POLICY"]) == {"allowedRestoreDatabaseHosts": hosts},
           f"the restore hosts as JSON: {env['NEVERWIPED_TENANT_POLICY']}")
    limits = {"allowedRepositoryPrefixes": ["https://gate.example.com/"],
              "allowedTolerations": [{"key": "dedicated", "value": "backup"}],
              "allowedNodeSelectors": {"pool": ["backup"]},
              "allowedPriorityClasses": []}
    env = Rendered({"policy": limits}).operator_env()
    expect(json.loads(env["NEVERWIPED_TENANT_POLICY"]) == limits,
           f"the limits as JSON: {env.get('NEVERWIPED_TENANT_POLICY')}")
    settings_rs = (ROOT / "operator" / "src" / "environment.rs").read_text()
    expect("`NEVERWIPED_TENANT_POLICY`" in settings_rs,
           "operator/src/environment.rs documents NEVERWIPED_TENANT_POLICY")


@check
def privileged_movers_are_allowed_only_in_the_namespaces_the_values_list() -> None:
    single = {"tenancy": "single"}
    expect("NEVERWIPED_TENANT_POLICY" not in Rendered({**single, "policy": {
        "privilegedMoverNamespaces": []}}).operator_env(),
           "no namespace allows privileged movers by default")
    env = Rendered({**single, "policy": {"privilegedMoverNamespaces": ["backup-admin"]}}).operator_env()
    expect(json.loads(env["NEVERWIPED_TENANT_POLICY"]) == {"privilegedMoverNamespaces": ["backup-admin"]},
           f"the namespaces as JSON: {env.get('NEVERWIPED_TENANT_POLICY')}")


@check
def clones_are_allowed_only_by_the_rules_the_values_list() -> None:
    single = {"tenancy": "single"}
    expect("NEVERWIPED_TENANT_POLICY" not in Rendered(single).operator_env(),
           "no clone rules by default")
    rules = [{"from": "shop", "to": "shop-staging"},
             {"from": "*", "to": "recovery", "repositoryPrefixes": ["https://gate.example.com/"]}]
    env = Rendered({**single, "policy": {"allowedRestoreOrigins": rules}}).operator_env()
    expect(json.loads(env["NEVERWIPED_TENANT_POLICY"]) == {"allowedRestoreOrigins": rules},
           f"the clone rules as JSON: {env.get('NEVERWIPED_TENANT_POLICY')}")
    for bad in [[{"from": "shop"}], [{"from": "Shop", "to": "b"}],
                [{"from": "a", "to": "b", "prefixes": []}]]:
        expect(render_error({**single, "policy": {"allowedRestoreOrigins": bad}}) is not None,
               f"the values schema refuses the clone rule {bad}")


@check
def notes_tell_the_user_what_to_apply_next() -> None:
    notes = Rendered(None).notes
    for part in ["kubectl -n neverwiped-system rollout status deployment/neverwiped-operator",
                 "create secret generic", "docs/examples/backupplan.yaml",
                 "kubectl apply -f backupplan.yaml", "kubectl get backupplans -A"]:
        expect(part in notes, f"NOTES.txt lacks {part!r}:\n{notes}")
    expect("NOT FOR PRODUCTION" not in notes, "no REST server warning by default")
    for part in ["NONE  repository URLs: none allowed", "OPEN  policy.allowedTolerations: any",
                 "OPEN  policy.allowedRestoreDatabaseHosts: any"]:
        expect(part in notes, f"NOTES.txt names the open limits, lacks {part!r}:\n{notes}")
    expect("ValidatingAdmissionPolicy" not in notes, "the admission policies are installed")
    notes = Rendered({"tenancy": "single", "policy": {"requireReadAccess": False,
                                                     "allowedTolerations": []}}).notes
    for part in ["OPEN  repository URLs: any", "set   policy.allowedTolerations",
                 "OPEN  policy.requireReadAccess is false"]:
        expect(part in notes, f"NOTES.txt (single tenant) lacks {part!r}:\n{notes}")
    notes = Rendered(NAMESPACED).notes
    for part in ["NOT FOR PRODUCTION",
                 "http://neverwiped-rest-server.neverwiped-system.svc:8000/",
                 "namespace shop only", "kubectl -n shop create secret", "2 replicas"]:
        expect(part in notes, f"NOTES.txt (everything on) lacks {part!r}:\n{notes}")
    notes = Rendered({"restServer": {"enabled": True, "authentication": False}}).notes
    expect("no authentication" in notes and "emptyDir" in notes,
           f"NOTES.txt warns of an open, volatile REST server:\n{notes}")
    notes = Rendered({"restServer": {"enabled": True}}).notes
    for part in ["get secret neverwiped-rest-server-login -o jsonpath='{.data.password}'",
                 "http://neverwiped-rest-server.neverwiped-system.svc:8000/neverwiped/NAMESPACE-PLAN"]:
        expect(part in notes, f"NOTES.txt (generated login) lacks {part!r}:\n{notes}")
    expect("no authentication" not in notes, "the default REST server asks for a login")


def leaf_keys(values: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            keys |= leaf_keys(value, path + ".")
        else:
            keys.add(path)
    return keys


@check
def the_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    expect("\n## Values\n" in readme, "charts/neverwiped/README.md has a section Values")
    table = readme.split("\n## Values\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([A-Za-z0-9_.]+)` \|", table, flags=re.M))
    leaves = leaf_keys(chart_values())
    undocumented = {leaf for leaf in leaves
                    if not any(leaf == d or leaf.startswith(d + ".") for d in documented)}
    expect(not undocumented, f"values missing from charts/neverwiped/README.md: "
           f"{sorted(undocumented)}")
    unknown = {d for d in documented
               if not any(leaf == d or leaf.startswith(d + ".") for leaf in leaves)}
    expect(not unknown, f"README.md documents values that do not exist: {sorted(unknown)}")


# --- main -----------------------------------------------------------------------------------


def run_checks() -> int:
    # The dashboard's checks (check_dashboard.py) import this module: the one running as __main__.
    sys.modules.setdefault("check_chart", sys.modules[__name__])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import check_dashboard

    failed = 0
    missing = []
    for function in CHECKS + check_dashboard.CHECKS:
        name = function.__name__
        try:
            function()
            print(f"ok      {name}")
        except CheckFailed as error:
            failed += 1
            print(f"FAILED  {name}: {error}")
        except MissingTool as error:
            missing.append(f"{name}: {error}")
            print(f"SKIPPED {name}: {error}")
        except Exception:  # a crash in a check is a failure with its traceback
            failed += 1
            print(f"FAILED  {name}:\n{traceback.format_exc()}")
    total = len(CHECKS) + len(check_dashboard.CHECKS)
    print(f"chart checks: {total - failed - len(missing)} of {total} passed")
    return exit_status(failed, missing)


def exit_status(failed: int, missing: list[str]) -> int:
    """1 when a check failed; else MISSING_TOOL_EXIT after a SKIPPED line when one could not run."""
    if failed:
        return 1
    if missing:
        print(f"SKIPPED: {'; '.join(missing)}")
        return MISSING_TOOL_EXIT
    return 0


def render_json(namespace: str, name: str, values: dict[str, Any] | None) -> int:
    rendered = Rendered(values, namespace=namespace, name=name)
    print(json.dumps({
        "manifests": rendered.manifests(),
        "crds_yaml": "".join(crd["data"] for crd in rendered.crd_files),
        "notes": rendered.notes,
    }))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command")
    render = commands.add_parser("render", help="print the rendered chart as JSON")
    render.add_argument("--namespace", default=NAMESPACE)
    render.add_argument("--name", default=RELEASE)
    render.add_argument("--values", help="values as a JSON object", default=None)
    arguments = parser.parse_args()
    if arguments.command == "render":
        values = json.loads(arguments.values) if arguments.values else None
        return render_json(arguments.namespace, arguments.name, values)
    return run_checks()


if __name__ == "__main__":
    sys.exit(main())
