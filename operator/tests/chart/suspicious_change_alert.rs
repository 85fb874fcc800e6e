//! The chart's `NeverwipedSuspiciousChange` alert, evaluated by Prometheus's own rule engine
//! (`support::alert_rules`): it fires for the plan whose gauge is 1, not for a quiet one, and
//! resolves once acknowledged.

use serde_json::json;

use crate::support::alert_rules::{
    alert_rule, assert_promtool_tests, chart_rule_groups, expanded_annotations, promtool,
};

#[test]
fn the_suspicious_change_alert_fires_for_the_flagged_plan_and_resolves_when_acknowledged() {
    let Some(promtool) = promtool() else {
        return;
    };
    let Some(groups) = chart_rule_groups() else {
        return;
    };
    let rule = alert_rule(&groups, "NeverwipedSuspiciousChange");
    // Flagged at minute 2, acknowledged at minute 5; another plan stays quiet.
    let gauge = "neverwiped_suspicious_change";
    let tests = json!([{
        "interval": "1m",
        "input_series": [
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"nightly\"}}"), "values": "0 0 1 1 1 0 0"},
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"quiet\"}}"), "values": "0 0 0 0 0 0 0"},
        ],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "NeverwipedSuspiciousChange", "exp_alerts": []},
            {"eval_time": "3m", "alertname": "NeverwipedSuspiciousChange", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "namespace": "shop", "plan": "nightly"},
                "exp_annotations": expanded_annotations(&rule, "shop", "nightly"),
            }]},
            {"eval_time": "6m", "alertname": "NeverwipedSuspiciousChange", "exp_alerts": []},
        ],
    }]);
    assert_promtool_tests(promtool, &groups, tests);
}
