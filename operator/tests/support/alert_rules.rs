//! The chart's alert rules evaluated by Prometheus's own rule engine (`promtool test rules`, from
//! Debian's prometheus package: `scripts/test.sh --packages`).

use std::process::Command;

use serde_json::{json, Value};

use super::chart_render::render_chart;

/// `promtool`, when it is on `PATH`; `None` after a recorded skip (a failure where every test
/// must run).
pub fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool").arg("--version").output();
    if found.is_ok_and(|output| output.status.success()) {
        return Some("promtool");
    }
    neverwiped_testkit::missing(
        "promtool is not on PATH",
        "scripts/test.sh --packages extracts it from Debian's prometheus package",
    );
    None
}

/// The rule groups of the chart's PrometheusRule, rendered by Helm with the rule enabled.
pub fn chart_rule_groups() -> Option<Value> {
    let values = json!({"metrics": {"prometheusRule": {"enabled": true}}});
    let rendered = render_chart("neverwiped", "neverwiped-system", &values)?;
    let rule = rendered["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .find(|object| {
            object["kind"] == "PrometheusRule"
                && object["metadata"]["name"] == "neverwiped-operator"
        })
        .expect("the chart renders its PrometheusRule");
    Some(rule["spec"]["groups"].clone())
}

/// The rule of `groups` that raises `alert`.
pub fn alert_rule(groups: &Value, alert: &str) -> Value {
    groups[0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|rule| rule["alert"] == alert)
        .unwrap_or_else(|| panic!("the chart renders {alert}"))
        .clone()
}

/// Runs `promtool test rules` with `groups` as the rule file and `tests` (its `tests` list, the
/// rule file filled in); panics with promtool's output when a test fails.
pub fn assert_promtool_tests(promtool: &str, groups: &Value, tests: Value) {
    let dir = std::env::temp_dir().join(format!(
        "alert-rules-{}-{:x}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rules.yaml"),
        json!({"groups": groups}).to_string(),
    )
    .unwrap();
    let file = json!({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests});
    std::fs::write(dir.join("tests.yaml"), file.to_string()).unwrap();
    let output = Command::new(promtool)
        .args(["test", "rules", "tests.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Distinct folders for tests of one process that run at once.
fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default()
}

/// The alert's annotations for `namespace`/`plan`, as the rule's templates expand them.
pub fn expanded_annotations(rule: &Value, namespace: &str, plan: &str) -> Value {
    let expand = |text: &str| {
        text.replace("{{ $labels.namespace }}", namespace)
            .replace("{{ $labels.plan }}", plan)
    };
    json!({
        "summary": expand(rule["annotations"]["summary"].as_str().unwrap()),
        "description": expand(rule["annotations"]["description"].as_str().unwrap()),
    })
}
