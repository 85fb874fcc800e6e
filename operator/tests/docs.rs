//! The documentation against the API it describes.
//!
//! - Every manifest in the docs applies: each YAML document of `docs/examples/**/*.yaml` and of
//!   every ```` ```yaml ```` block of `docs/*.md` that has a `kind`. Those of kinds the API server
//!   serves in a namespace (BackupPlan, Restore, Secret, PersistentVolumeClaim, Pod, Job, ...) are
//!   applied with `kubectl apply --server-side --validate=strict` into a fresh namespace per file,
//!   in the order they appear; strict validation makes a misspelt field an error, not a silent
//!   prune. The others (Deployments, Services, ... which the test API server does not serve) must
//!   round-trip through their Kubernetes API type unchanged, so an unknown or misspelt field fails
//!   there too. Needs `KUBECONFIG` (skips without it, except under CI).
//! - `docs/reference.md` covers every field of both CRDs, read from `crds/*.yaml`: each field path
//!   of `spec` and `status` has a table row (see "Reading the tables" there), and the row agrees
//!   with the schema on `required`, the default and the allowed values. The walk stops at fields
//!   whose row links to the Kubernetes API reference (standard Kubernetes types such as
//!   Toleration or Condition); a row whose type says "the same fields as `X`" covers its fields by
//!   `X`'s rows, and the schemas of the two must then be the same. Needs no API server.
//! - Every copy-and-paste block of `docs/restore-runbook.md` marked `<!-- runbook: NAME -->` is run
//!   by the worst-day test (`operator/tests/worst_day.rs`), which reads each block from the
//!   runbook by its mark: what a reader pastes is what the test ran.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use support::{api_server_or_skip, apply_crds, kubectl_output, repo_root, TestNamespace};

// ------------------------------------------------------------------------------------------------
// Where the manifests are

/// One YAML document found in the docs, with where it came from.
struct Document {
    /// `docs/quickstart.md:120` (the line of the block's fence) or `docs/examples/restore.yaml`.
    origin: String,
    value: Value,
}

/// A file of the docs and the YAML documents it holds, in order.
struct Source {
    path: PathBuf,
    documents: Vec<Document>,
}

fn relative(path: &Path) -> String {
    let root = repo_root().canonicalize().expect("the repository's root");
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// The ```` ```yaml ```` (or `yml`) blocks of a Markdown text: the line of each fence (1-based)
/// and the block's text, with the fence's indentation removed.
fn yaml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            None => {
                let info = trimmed.strip_prefix("```").map(str::trim);
                if matches!(info, Some("yaml" | "yml")) {
                    open = Some((index + 1, indent, String::new()));
                }
            }
            Some((start, fence_indent, mut text)) => {
                if trimmed.starts_with("```") {
                    blocks.push((start, text));
                } else {
                    let cut = line
                        .char_indices()
                        .take_while(|(i, c)| *i < fence_indent && *c == ' ')
                        .count();
                    text.push_str(&line[cut..]);
                    text.push('\n');
                    open = Some((start, fence_indent, text));
                }
            }
        }
    }
    assert!(open.is_none(), "a ```yaml block is not closed");
    blocks
}

fn parse_documents(text: &str, origin: &str) -> Vec<Document> {
    let values: Vec<Value> = serde_saphyr::from_multiple(text)
        .unwrap_or_else(|error| panic!("{origin} is not valid YAML: {error}"));
    values
        .into_iter()
        .filter(|value| !value.is_null())
        .map(|value| Document {
            origin: origin.to_owned(),
            value,
        })
        .collect()
}

fn files_under(dir: &Path, extensions: &[&str], recursive: bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            if recursive {
                found.extend(files_under(&path, extensions, true));
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e))
        {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Every example file and every Markdown page of `docs/`, with their YAML documents.
fn doc_sources() -> Vec<Source> {
    let docs = repo_root().join("docs");
    let mut sources = Vec::new();
    for path in files_under(&docs.join("examples"), &["yaml", "yml"], true) {
        let text = std::fs::read_to_string(&path).expect("an example file");
        let documents = parse_documents(&text, &relative(&path));
        sources.push(Source { path, documents });
    }
    for path in files_under(&docs, &["md"], false) {
        let text = std::fs::read_to_string(&path).expect("a Markdown page");
        let mut documents = Vec::new();
        for (line, block) in yaml_blocks(&text) {
            documents.extend(parse_documents(
                &block,
                &format!("{}:{line}", relative(&path)),
            ));
        }
        sources.push(Source { path, documents });
    }
    sources
}

fn kind_of(value: &Value) -> Option<(&str, &str)> {
    Some((value["apiVersion"].as_str()?, value["kind"].as_str()?))
}

// ------------------------------------------------------------------------------------------------
// Manifests of kinds the test API server does not serve

/// Whether everything of `written` is in `read` unchanged. `read` may hold more: the types write
/// `apiVersion` and `kind` of nested objects (a StatefulSet's `volumeClaimTemplates`).
fn survives(written: &Value, read: &Value) -> bool {
    match (written, read) {
        (Value::Object(written), Value::Object(read)) => written
            .iter()
            .all(|(key, value)| read.get(key).is_some_and(|other| survives(value, other))),
        (Value::Array(written), Value::Array(read)) => {
            written.len() == read.len() && written.iter().zip(read).all(|(a, b)| survives(a, b))
        }
        (written, read) => written == read,
    }
}

/// Deserializes `value` as `K` and serializes it back: a field the type does not know (a
/// misspelt one) is lost on the way, a value of the wrong type is an error.
fn round_trip<K>(value: &Value) -> Result<(), String>
where
    K: serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: K = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    if survives(value, &back) {
        Ok(())
    } else {
        Err(format!(
            "fields the Kubernetes type does not have, or of another type:\n  written: {value}\n  as read: {back}"
        ))
    }
}

/// Checks a manifest of a kind the test API server does not serve against its Kubernetes type.
fn check_offline(api_version: &str, kind: &str, value: &Value) -> Result<(), String> {
    use k8s_openapi::api::{apps, batch, core, networking, policy, rbac};
    match (api_version, kind) {
        ("apps/v1", "Deployment") => round_trip::<apps::v1::Deployment>(value),
        ("apps/v1", "StatefulSet") => round_trip::<apps::v1::StatefulSet>(value),
        ("apps/v1", "DaemonSet") => round_trip::<apps::v1::DaemonSet>(value),
        ("v1", "Service") => round_trip::<core::v1::Service>(value),
        ("v1", "Namespace") => round_trip::<core::v1::Namespace>(value),
        ("v1", "ConfigMap") => round_trip::<core::v1::ConfigMap>(value),
        ("v1", "Secret") => round_trip::<core::v1::Secret>(value),
        ("v1", "PersistentVolumeClaim") => round_trip::<core::v1::PersistentVolumeClaim>(value),
        ("v1", "Pod") => round_trip::<core::v1::Pod>(value),
        ("batch/v1", "Job") => round_trip::<batch::v1::Job>(value),
        ("batch/v1", "CronJob") => round_trip::<batch::v1::CronJob>(value),
        ("networking.k8s.io/v1", "NetworkPolicy") => {
            round_trip::<networking::v1::NetworkPolicy>(value)
        }
        ("policy/v1", "PodDisruptionBudget") => {
            round_trip::<policy::v1::PodDisruptionBudget>(value)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<rbac::v1::Role>(value),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            round_trip::<rbac::v1::RoleBinding>(value)
        }
        _ => Err(format!(
            "{api_version} {kind} is neither served by the test API server nor known to \
             operator/tests/docs.rs: add its Kubernetes type to check_offline"
        )),
    }
}

// ------------------------------------------------------------------------------------------------
// Applying to the API server

/// The kinds the API server serves in namespaces: (apiVersion, kind).
fn namespaced_kinds() -> BTreeSet<(String, String)> {
    let output = kubectl_output(
        &["api-resources", "--namespaced=true", "--no-headers"],
        None,
    );
    assert!(
        output.status.success(),
        "kubectl api-resources failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            // NAME [SHORTNAMES] APIVERSION NAMESPACED KIND: read from the right.
            let words: Vec<&str> = line.split_whitespace().collect();
            let [.., api_version, _namespaced, kind] = words.as_slice() else {
                return None;
            };
            Some(((*api_version).to_owned(), (*kind).to_owned()))
        })
        .collect()
}

/// Applies one manifest into `namespace` the way a user's `kubectl apply` would, strictly.
fn apply(namespace: &str, value: &Value) -> Result<String, String> {
    let mut value = value.clone();
    value["metadata"]["namespace"] = json!(namespace);
    let output = kubectl_output(
        &[
            "apply",
            "--server-side",
            "--validate=strict",
            "--field-manager=neverwiped-docs-test",
            "-n",
            namespace,
            "-f",
            "-",
        ],
        Some(&value.to_string()),
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // A warning (e.g. a field the schema prunes) is as bad as an error for documentation.
    if output.status.success() && !stderr.contains("Warning") {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{stderr}"))
    }
}

#[test]
fn every_yaml_block_of_the_docs_parses_and_names_its_object() {
    let mut problems = Vec::new();
    let mut documents = 0;
    for source in doc_sources() {
        for document in &source.documents {
            documents += 1;
            let value = &document.value;
            // A block without `kind` is a fragment (e.g. Helm values); it only has to parse.
            if value.get("kind").is_none() {
                continue;
            }
            if kind_of(value).is_none() || value["metadata"]["name"].as_str().is_none() {
                problems.push(format!(
                    "{}: a manifest needs apiVersion, kind and metadata.name",
                    document.origin
                ));
            }
        }
    }
    assert!(documents > 0, "no YAML found in docs/");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A block that starts with the comment `# docs/examples/<file>` shows that file: it must say the
/// same, so that what readers copy and what they `kubectl apply -f` do not drift apart.
#[test]
fn blocks_that_show_an_example_file_match_it() {
    let docs = repo_root().join("docs");
    let mut shown = 0;
    let mut problems = Vec::new();
    for path in files_under(&docs, &["md"], false) {
        let text = std::fs::read_to_string(&path).expect("a Markdown page");
        for (line, block) in yaml_blocks(&text) {
            let first = block.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let Some(file) = first
                .strip_prefix("# ")
                .and_then(|rest| rest.split_whitespace().next())
                .filter(|name| name.starts_with("docs/examples/"))
            else {
                continue;
            };
            shown += 1;
            let origin = format!("{}:{line}", relative(&path));
            let Ok(example) = std::fs::read_to_string(repo_root().join(file)) else {
                problems.push(format!("{origin}: shows {file}, which does not exist"));
                continue;
            };
            let block_values: Vec<Value> = parse_documents(&block, &origin)
                .into_iter()
                .map(|d| d.value)
                .collect();
            let file_values: Vec<Value> = parse_documents(&example, file)
                .into_iter()
                .map(|d| d.value)
                .collect();
            if block_values != file_values {
                problems.push(format!("{origin}: differs from {file}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!("{shown} blocks show an example file");
}

#[test]
fn every_manifest_in_the_docs_applies() {
    if !api_server_or_skip() {
        return;
    }
    apply_crds();
    let served = namespaced_kinds();
    let mut problems = Vec::new();
    let mut applied: BTreeMap<String, usize> = BTreeMap::new();
    for source in doc_sources() {
        let manifests: Vec<&Document> = source
            .documents
            .iter()
            .filter(|d| d.value.get("kind").is_some())
            .collect();
        if manifests.is_empty() {
            continue;
        }
        // One namespace per file: its manifests build on each other, other files' do not.
        let namespace = TestNamespace::create("docs");
        let (mut here_applied, mut here_checked) = (0, 0);
        for document in manifests {
            let Some((api_version, kind)) = kind_of(&document.value) else {
                problems.push(format!("{}: no apiVersion or kind", document.origin));
                continue;
            };
            let name = document.value["metadata"]["name"].as_str().unwrap_or("?");
            if served.contains(&(api_version.to_owned(), kind.to_owned())) {
                here_applied += 1;
                match apply(&namespace.name, &document.value) {
                    Ok(_) => *applied.entry(kind.to_owned()).or_default() += 1,
                    Err(error) => problems.push(format!(
                        "{}: {kind} {name} does not apply: {error}",
                        document.origin
                    )),
                }
            } else {
                here_checked += 1;
                if let Err(error) = check_offline(api_version, kind, &document.value) {
                    problems.push(format!("{}: {kind} {name}: {error}", document.origin));
                }
            }
        }
        eprintln!(
            "{}: {here_applied} applied, {here_checked} checked against their Kubernetes types",
            relative(&source.path)
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    eprintln!("applied: {applied:?}");
    for kind in ["BackupPlan", "Restore", "Secret", "PersistentVolumeClaim"] {
        assert!(
            applied.get(kind).is_some_and(|n| *n > 0),
            "the docs hold no {kind} manifest, or none was applied: {applied:?}"
        );
    }
}

/// The check above would be worthless if a misspelt field were pruned silently.
#[test]
fn a_misspelt_field_does_not_apply() {
    if !api_server_or_skip() {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("docs-typo");
    let plan = json!({
        "apiVersion": "neverwiped.io/v1alpha1", "kind": "BackupPlan",
        "metadata": {"name": "typo"},
        "spec": {
            "schedule": "@daily",
            "copymethod": "Direct",
            "repository": {
                "url": "https://gate.example.com/x",
                "passwordSecretRef": {"name": "repo", "key": "password"},
            },
            "volumes": [{"claimName": "data"}],
        },
    });
    let error = apply(&namespace.name, &plan).expect_err("a misspelt field is rejected");
    assert!(error.contains("copymethod"), "{error}");
    let mut fixed = plan.clone();
    let spec = fixed["spec"].as_object_mut().expect("a spec");
    spec.remove("copymethod");
    spec.insert("copyMethod".into(), json!("Direct"));
    apply(&namespace.name, &fixed).expect("the corrected plan applies");

    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "x", "image": "x:1", "imagePullPolicy": "Always"}]}}},
    });
    check_offline("apps/v1", "Deployment", &deployment).expect("a correct Deployment passes");
    let mut typo = deployment.clone();
    typo["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = json!("Always");
    assert!(check_offline("apps/v1", "Deployment", &typo).is_err());
}

// ------------------------------------------------------------------------------------------------
// The reference against the CRDs

/// A table row of docs/reference.md.
#[derive(Debug, Clone)]
struct Row {
    line: usize,
    type_cell: String,
    default_cell: String,
}

/// The paths a table cell names in backticks, `[]` at the end dropped (`volumes[]` names
/// `volumes`).
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|span| span.trim_end_matches("[]").to_owned())
        .collect()
}

fn is_path(text: &str) -> bool {
    !text.is_empty()
        && text.starts_with(|c: char| c.is_ascii_lowercase())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '[' | ']'))
}

/// The rows of the `### spec` and `### status` tables of each `## <Kind>` section:
/// (kind, "spec" | "status") → path → row.
fn reference_rows(
    markdown: &str,
    kinds: &[String],
) -> BTreeMap<(String, String), BTreeMap<String, Row>> {
    let mut tables: BTreeMap<(String, String), BTreeMap<String, Row>> = BTreeMap::new();
    let mut kind: Option<String> = None;
    let mut root: Option<String> = None;
    for (index, line) in markdown.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("## ") {
            let first = heading.split_whitespace().next().unwrap_or("");
            kind = kinds.iter().find(|k| k.as_str() == first).cloned();
            root = None;
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ") {
            let first = heading.split_whitespace().next().unwrap_or("");
            root = matches!(first, "spec" | "status").then(|| first.to_owned());
            continue;
        }
        let (Some(kind), Some(root)) = (&kind, &root) else {
            continue;
        };
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        // `\|` is a pipe inside a cell.
        let cells: Vec<String> = row
            .replace("\\|", "\u{0}")
            .split('|')
            .map(|cell| cell.replace('\u{0}', "|").trim().to_owned())
            .collect();
        if cells.len() < 3 {
            continue;
        }
        for path in code_spans(&cells[0]).into_iter().filter(|p| is_path(p)) {
            tables
                .entry((kind.clone(), root.clone()))
                .or_default()
                .insert(
                    path,
                    Row {
                        line: index + 1,
                        type_cell: cells[1].clone(),
                        default_cell: cells[2].clone(),
                    },
                );
        }
    }
    tables
}

/// A field of a CRD's schema.
struct Field {
    /// The path below `spec` or `status`, `[]` for list items.
    path: String,
    schema: Value,
    required: bool,
}

/// Every field below `node` (an object schema), depth first.
fn schema_fields(node: &Value, prefix: &str, out: &mut Vec<Field>) {
    let Some(properties) = node["properties"].as_object() else {
        return;
    };
    let required: BTreeSet<&str> = node["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, schema) in properties {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        out.push(Field {
            path: path.clone(),
            schema: schema.clone(),
            required: required.contains(name.as_str()),
        });
        if schema["type"] == "array" {
            schema_fields(&schema["items"], &format!("{path}[]"), out);
        } else {
            schema_fields(schema, &path, out);
        }
    }
}

/// The paths that contain `path`: `history[].databases[].name` → `history`,
/// `history[].databases`.
fn ancestors(path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split('.').collect();
    (1..parts.len())
        .map(|n| parts[..n].join(".").trim_end_matches("[]").to_owned())
        .collect()
}

/// A schema without its descriptions, and without `nullable` at the top (an optional field and a
/// list's items differ only there), to compare shapes.
fn shape_of_fields(schema: &Value) -> Value {
    let mut shape = shape(schema);
    if let Some(map) = shape.as_object_mut() {
        map.remove("nullable");
    }
    shape
}

/// A schema without its descriptions.
fn shape(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| key.as_str() != "description")
                .map(|(key, value)| (key.clone(), shape(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        other => other.clone(),
    }
}

fn links_to_kubernetes(row: &Row) -> bool {
    row.type_cell
        .contains("](https://kubernetes.io/docs/reference/")
}

/// `X` of "the same fields as `X`" in a type cell.
fn same_fields_as(row: &Row) -> Option<String> {
    let rest = row.type_cell.split("same fields as `").nth(1)?;
    rest.split('`').next().map(str::to_owned)
}

fn render_default(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

struct Crd {
    file: String,
    kind: String,
    schema: Value,
}

fn crds() -> Vec<Crd> {
    let mut crds = Vec::new();
    for path in files_under(&repo_root().join("crds"), &["yaml", "yml"], false) {
        let text = std::fs::read_to_string(&path).expect("a CRD file");
        let documents: Vec<Value> =
            serde_saphyr::from_multiple(&text).expect("the CRD file is YAML");
        for document in documents
            .into_iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            let kind = document["spec"]["names"]["kind"]
                .as_str()
                .expect("a kind")
                .to_owned();
            let versions = document["spec"]["versions"].as_array().expect("versions");
            let version = versions
                .iter()
                .find(|v| v["storage"] == true)
                .unwrap_or(&versions[0]);
            crds.push(Crd {
                file: relative(&path),
                kind,
                schema: version["schema"]["openAPIV3Schema"].clone(),
            });
        }
    }
    crds
}

#[test]
fn the_reference_covers_every_field_of_the_crds() {
    let crds = crds();
    assert!(
        crds.iter().any(|c| c.kind == "BackupPlan") && crds.iter().any(|c| c.kind == "Restore"),
        "crds/ holds the BackupPlan and Restore CRDs"
    );
    let kinds: Vec<String> = crds.iter().map(|c| c.kind.clone()).collect();
    let reference = std::fs::read_to_string(repo_root().join("docs/reference.md"))
        .expect("docs/reference.md exists");
    let tables = reference_rows(&reference, &kinds);
    let mut problems = Vec::new();
    let mut covered = 0;

    for crd in &crds {
        for root in ["spec", "status"] {
            let node = &crd.schema["properties"][root];
            if node.is_null() {
                continue;
            }
            let mut fields = Vec::new();
            schema_fields(node, "", &mut fields);
            let by_path: BTreeMap<&str, &Field> =
                fields.iter().map(|f| (f.path.as_str(), f)).collect();
            let empty = BTreeMap::new();
            let rows = tables
                .get(&(crd.kind.clone(), root.to_owned()))
                .unwrap_or(&empty);
            let section = format!("`## {}` → `### {root}`", crd.kind);

            // Rows that name no field: a typo, or a field that is gone.
            for (path, row) in rows {
                if !by_path.contains_key(path.as_str()) {
                    problems.push(format!(
                        "docs/reference.md:{}: `{path}` under {section} is not a field of {} ({})",
                        row.line, crd.kind, crd.file
                    ));
                }
            }
            // "The same fields as `X`": the two schemas must have the same shape.
            let mut aliases = BTreeMap::new();
            for (path, row) in rows {
                if let Some(target) = same_fields_as(row) {
                    match (by_path.get(path.as_str()), by_path.get(target.as_str())) {
                        (Some(field), Some(other)) => {
                            let items = if field.schema["type"] == "array" {
                                &field.schema["items"]
                            } else {
                                &field.schema
                            };
                            if shape_of_fields(items) != shape_of_fields(&other.schema) {
                                problems.push(format!(
                                    "docs/reference.md:{}: `{path}` says it has the same fields as `{target}`, but their schemas differ in {}",
                                    row.line, crd.file
                                ));
                            }
                            let prefix = if field.schema["type"] == "array" {
                                format!("{path}[].")
                            } else {
                                format!("{path}.")
                            };
                            aliases.insert(prefix, format!("{target}."));
                        }
                        _ => problems.push(format!(
                            "docs/reference.md:{}: `{path}` refers to `{target}`, which is not a field",
                            row.line
                        )),
                    }
                }
            }

            for field in &fields {
                let path = field.path.as_str();
                // Below a standard Kubernetes type: its own reference covers it.
                if ancestors(path)
                    .iter()
                    .any(|a| rows.get(a).is_some_and(links_to_kubernetes))
                {
                    continue;
                }
                // Below a "same fields as" row: covered by the other field's rows.
                let aliased = aliases.iter().find_map(|(prefix, target)| {
                    path.strip_prefix(prefix.as_str())
                        .map(|rest| format!("{target}{rest}"))
                });
                if let Some(other) = aliased {
                    if rows.contains_key(&other)
                        || ancestors(&other)
                            .iter()
                            .any(|a| rows.get(a).is_some_and(links_to_kubernetes))
                    {
                        covered += 1;
                    } else {
                        problems.push(format!(
                            "`{path}` of {} is documented as `{other}`, which has no row",
                            crd.kind
                        ));
                    }
                    continue;
                }
                let Some(row) = rows.get(path) else {
                    problems.push(format!(
                        "{} {root}.{path} ({}) has no row under {section} in docs/reference.md",
                        crd.kind, crd.file
                    ));
                    continue;
                };
                covered += 1;
                let at = format!("docs/reference.md:{} (`{path}` of {})", row.line, crd.kind);
                let says_required = row
                    .type_cell
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|word| word == "required");
                // Status fields are written by the operator; "required" is for what users write.
                if root == "spec" && field.required != says_required {
                    problems.push(if field.required {
                        format!("{at}: the CRD requires it; say `required` in the type column")
                    } else {
                        format!("{at}: the type column says `required`, the CRD does not")
                    });
                }
                // An object's default is its fields' defaults, which their own rows give.
                let default = field.schema.get("default").filter(|d| !d.is_object());
                if let Some(default) = default {
                    let wanted = format!("`{}`", render_default(default));
                    if !row.default_cell.contains(&wanted) {
                        problems.push(format!(
                            "{at}: the CRD's default is {wanted}; the default column says {:?}",
                            row.default_cell
                        ));
                    }
                }
                let values = field
                    .schema
                    .get("enum")
                    .or_else(|| field.schema["items"].get("enum"));
                for value in values.and_then(Value::as_array).into_iter().flatten() {
                    let wanted = format!("`{}`", render_default(value));
                    if !row.type_cell.contains(&wanted) {
                        problems.push(format!(
                            "{at}: the type column does not list the allowed value {wanted}"
                        ));
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/reference.md and crds/ disagree ({} problems; the convention is under \"Reading the tables\" in docs/reference.md):\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        covered > 100,
        "only {covered} fields were found in the CRDs"
    );
}

#[test]
fn the_reference_parser_reads_the_conventions() {
    let markdown = "\
## Thing (`t`)\n\
### spec\n\
| field | type | default | meaning |\n\
|---|---|---|---|\n\
| `a` | `X` \\| `Y`, required | `X` | a |\n\
| `b[]` | list | | b |\n\
#### more\n\
| `b[].c` | [Toleration](https://kubernetes.io/docs/reference/x) | | c |\n\
## Other\n\
| `d` | string | | not in a kind's section |\n";
    let tables = reference_rows(markdown, &["Thing".to_owned()]);
    let rows = &tables[&("Thing".to_owned(), "spec".to_owned())];
    assert_eq!(rows.keys().collect::<Vec<_>>(), ["a", "b", "b[].c"]);
    assert_eq!(rows["a"].type_cell, "`X` | `Y`, required");
    assert_eq!(rows["a"].default_cell, "`X`");
    assert!(links_to_kubernetes(&rows["b[].c"]));
    assert_eq!(
        ancestors("history[].databases[].name"),
        ["history", "history[].databases"]
    );
    assert_eq!(
        yaml_blocks("text\n```yaml\na: 1\n```\n  ```yaml\n  b: 2\n  ```\n"),
        [(2, "a: 1\n".to_owned()), (5, "b: 2\n".to_owned())]
    );
}

/// The names of the runbook's marked blocks (`<!-- runbook: NAME -->`), in order.
fn runbook_marks(markdown: &str) -> Vec<String> {
    markdown
        .split("<!-- runbook: ")
        .skip(1)
        .map(|rest| rest.split(" -->").next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn every_marked_runbook_block_is_run_by_the_worst_day_test() {
    let runbook =
        std::fs::read_to_string(repo_root().join("docs/restore-runbook.md")).expect("the runbook");
    let marks = runbook_marks(&runbook);
    assert!(!marks.is_empty(), "the runbook marks no block");
    let tests = repo_root().join("operator/tests");
    let mut sources = std::fs::read_to_string(tests.join("worst_day.rs")).expect("worst_day.rs");
    for file in files_under(&tests.join("worst_day"), &["rs"], true) {
        sources.push_str(&std::fs::read_to_string(file).expect("a test source"));
    }
    // Calls as rustfmt may break them over lines.
    sources.retain(|c| !c.is_whitespace());
    let mut problems = Vec::new();
    for (index, name) in marks.iter().enumerate() {
        if marks[..index].contains(name) {
            problems.push(format!("the mark {name} is on two blocks"));
        }
        let mark = format!("<!-- runbook: {name} -->\n```");
        if !runbook.contains(&mark) {
            problems.push(format!(
                "the mark {name} is not right before a fenced block"
            ));
        }
        // The test reads each block it runs by its name: runbook::run("NAME", ...),
        // runbook::run_while("NAME", ...) or runbook::block("NAME").
        let calls = [
            format!("runbook::run(\"{name}\","),
            format!("runbook::run_while(\"{name}\","),
            format!("runbook::block(\"{name}\")"),
        ];
        if !calls.iter().any(|call| sources.contains(call)) {
            problems.push(format!(
                "the block {name} is not run by operator/tests/worst_day.rs"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
