//! The chart's `NeverwipedCopyLagging` alert, evaluated by Prometheus's own rule engine
//! (`support::alert_rules`): it fires for the destination whose lag passed the chart's threshold
//! (36 hours by default) for 15 minutes, not for one that keeps up, and resolves once a copy
//! catches up.

use serde_json::json;

use crate::support::alert_rules::{
    alert_rule, assert_promtool_tests, chart_rule_groups, expanded_annotations, promtool,
};

#[test]
fn the_copy_lag_alert_fires_past_the_threshold_and_resolves_when_the_copy_catches_up() {
    let Some(promtool) = promtool() else {
        return;
    };
    let Some(groups) = chart_rule_groups() else {
        return;
    };
    let rule = alert_rule(&groups, "NeverwipedCopyLagging");
    // Offsite: 35 h behind at minute 0, growing a minute a minute, past 36 h at minute 61,
    // caught up at minute 90. Near: always caught up within minutes.
    let hour = 3600;
    let lagging: Vec<String> = (0..100)
        .map(|minute| match minute {
            0..90 => (35 * hour + minute * 60).to_string(),
            _ => "0".to_owned(),
        })
        .collect();
    let gauge = "neverwiped_copy_lag_seconds";
    let tests = json!([{
        "interval": "1m",
        "input_series": [
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"nightly\",copy=\"offsite\"}}"), "values": lagging.join(" ")},
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"nightly\",copy=\"near\"}}"), "values": "600x99"},
        ],
        "alert_rule_test": [
            {"eval_time": "60m", "alertname": "NeverwipedCopyLagging", "exp_alerts": []},
            // Past the threshold at minute 61, for 15 minutes.
            {"eval_time": "70m", "alertname": "NeverwipedCopyLagging", "exp_alerts": []},
            {"eval_time": "80m", "alertname": "NeverwipedCopyLagging", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "shop", "plan": "nightly", "copy": "offsite"},
                "exp_annotations": annotations(&rule, 36 * hour + 80 * 60 - hour),
            }]},
            {"eval_time": "95m", "alertname": "NeverwipedCopyLagging", "exp_alerts": []},
        ],
    }]);
    assert_promtool_tests(promtool, &groups, tests);
}

/// The alert's annotations for the offsite copy, `lag_seconds` behind.
fn annotations(rule: &serde_json::Value, lag_seconds: i64) -> serde_json::Value {
    let expanded = expanded_annotations(rule, "shop", "nightly");
    let expand = |text: &serde_json::Value| {
        text.as_str()
            .unwrap()
            .replace("{{ $labels.copy }}", "offsite")
            .replace("{{ $value | humanizeDuration }}", &humanized(lag_seconds))
    };
    json!({
        "summary": expand(&expanded["summary"]),
        "description": expand(&expanded["description"]),
    })
}

/// Prometheus's `humanizeDuration` of whole seconds over a day: `1d 11h 20m 0s`.
fn humanized(seconds: i64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (hours, rest) = (rest / 3600, rest % 3600);
    let (minutes, seconds) = (rest / 60, rest % 60);
    format!("{days}d {hours}h {minutes}m {seconds}s")
}
