//! The chart's `NeverwipedSuspiciousChange` alert, evaluated by Prometheus's own rule engine
//! (`promtool test rules`, from Debian's prometheus package: `scripts/test.sh --packages`): it
//! fires for the plan whose gauge is 1, not for a quiet one, and resolves once acknowledged.

use std::process::Command;

use serde_json::{json, Value};

use super::{manifest, render_chart};

fn promtool() -> Option<&'static str> {
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

/// The alert's annotations for `namespace`/`plan`, as the rendered rule's templates expand.
fn annotations(rule: &Value, namespace: &str, plan: &str) -> Value {
    let expand = |text: &str| {
        text.replace("{{ $labels.namespace }}", namespace)
            .replace("{{ $labels.plan }}", plan)
    };
    json!({
        "summary": expand(rule["annotations"]["summary"].as_str().unwrap()),
        "description": expand(rule["annotations"]["description"].as_str().unwrap()),
    })
}

#[test]
fn the_suspicious_change_alert_fires_for_the_flagged_plan_and_resolves_when_acknowledged() {
    let Some(promtool) = promtool() else {
        return;
    };
    let values = json!({"metrics": {"prometheusRule": {"enabled": true}}});
    let Some(rendered) = render_chart("neverwiped", &values) else {
        return;
    };
    let groups = &manifest(&rendered, "PrometheusRule", "neverwiped-operator")["spec"]["groups"];
    let rule = groups[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "NeverwipedSuspiciousChange")
        .expect("the chart renders the alert")
        .clone();
    let dir = std::env::temp_dir().join(format!("suspicious-alert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rules.yaml"),
        json!({"groups": groups}).to_string(),
    )
    .unwrap();
    // Flagged at minute 2, acknowledged at minute 5; another plan stays quiet.
    let gauge = "neverwiped_suspicious_change";
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": format!("{gauge}{{namespace=\"shop\",plan=\"nightly\"}}"), "values": "0 0 1 1 1 0 0"},
                {"series": format!("{gauge}{{namespace=\"shop\",plan=\"quiet\"}}"), "values": "0 0 0 0 0 0 0"},
            ],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "NeverwipedSuspiciousChange", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "NeverwipedSuspiciousChange", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "namespace": "shop", "plan": "nightly"},
                    "exp_annotations": annotations(&rule, "shop", "nightly"),
                }]},
                {"eval_time": "6m", "alertname": "NeverwipedSuspiciousChange", "exp_alerts": []},
            ],
        }],
    });
    std::fs::write(dir.join("tests.yaml"), tests.to_string()).unwrap();
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
