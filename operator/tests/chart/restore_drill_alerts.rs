//! The chart's restore drill alerts, evaluated by Prometheus's own rule engine
//! (`support::alert_rules`): `NeverwipedRestoreDrillFailed` fires while a plan's last drill
//! failed, `NeverwipedRestoreDrillStale` once no drill has proven a plan's data for longer than
//! the threshold (8 days by default), `NeverwipedRestoreDrillOverObjective` while the last drill
//! took longer than the plan's objective; each stays quiet for a plan that drills well.

use serde_json::{json, Value};

use crate::support::alert_rules::{
    alert_rule, assert_promtool_tests, chart_rule_groups, expanded_annotations, promtool,
};

/// The rule groups and promtool, or `None` after a recorded skip.
fn rules() -> Option<(&'static str, Value)> {
    Some((promtool()?, chart_rule_groups()?))
}

/// The alert's annotations for shop/nightly, with `{{ $value | humanizeDuration }}` as `value`.
fn annotations(rule: &Value, value: &str) -> Value {
    let expanded = expanded_annotations(rule, "shop", "nightly");
    let expand = |text: &Value| {
        text.as_str()
            .unwrap()
            .replace("{{ $value | humanizeDuration }}", value)
    };
    json!({
        "summary": expand(&expanded["summary"]),
        "description": expand(&expanded["description"]),
    })
}

#[test]
fn the_failed_drill_alert_fires_while_the_last_drill_failed_and_resolves_with_a_good_one() {
    let Some((promtool, groups)) = rules() else {
        return;
    };
    let rule = alert_rule(&groups, "NeverwipedRestoreDrillFailed");
    // Failed at minute 2, a good drill at minute 5; another plan's drills always pass.
    // (The gauge is 1 for a drill that proved the data, 0 for one that failed.)
    let gauge = "neverwiped_restore_drill_last_result";
    let tests = json!([{
        "interval": "1m",
        "input_series": [
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"nightly\"}}"), "values": "1 1 0 0 0 1 1"},
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"steady\"}}"), "values": "1x6"},
        ],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "NeverwipedRestoreDrillFailed", "exp_alerts": []},
            {"eval_time": "3m", "alertname": "NeverwipedRestoreDrillFailed", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "namespace": "shop", "plan": "nightly"},
                "exp_annotations": annotations(&rule, ""),
            }]},
            {"eval_time": "6m", "alertname": "NeverwipedRestoreDrillFailed", "exp_alerts": []},
        ],
    }]);
    assert_promtool_tests(promtool, &groups, tests);
}

#[test]
fn the_stale_drill_alert_fires_once_no_drill_succeeded_for_eight_days() {
    let Some((promtool, groups)) = rules() else {
        return;
    };
    let rule = alert_rule(&groups, "NeverwipedRestoreDrillStale");
    // Nightly's last good drill ended at time 0 and none after; steady's succeeds every minute.
    // (Samples a minute apart: Prometheus forgets a series after 5 minutes without one.)
    let gauge = "neverwiped_restore_drill_last_success_timestamp_seconds";
    let tests = json!([{
        "interval": "1m",
        "input_series": [
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"nightly\"}}"), "values": "0x11600"},
            {"series": format!("{gauge}{{namespace=\"shop\",plan=\"steady\"}}"), "values": "0+60x11600"},
        ],
        "alert_rule_test": [
            // 8 days are 192 h: past them, for 15 minutes.
            {"eval_time": "191h", "alertname": "NeverwipedRestoreDrillStale", "exp_alerts": []},
            {"eval_time": "192h10m", "alertname": "NeverwipedRestoreDrillStale", "exp_alerts": []},
            {"eval_time": "193h", "alertname": "NeverwipedRestoreDrillStale", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "shop", "plan": "nightly"},
                "exp_annotations": annotations(&rule, "8d 1h 0m 0s"),
            }]},
        ],
    }]);
    assert_promtool_tests(promtool, &groups, tests);
}

#[test]
fn the_objective_alert_fires_for_a_drill_slower_than_its_objective_only() {
    let Some((promtool, groups)) = rules() else {
        return;
    };
    let rule = alert_rule(&groups, "NeverwipedRestoreDrillOverObjective");
    // Nightly's objective is an hour; its drill at minute 2 takes 90 minutes, the one at minute 5
    // ten. Unbounded has no objective: however slow, no alert.
    let duration = "neverwiped_restore_drill_duration_seconds";
    let objective = "neverwiped_restore_drill_objective_seconds";
    let tests = json!([{
        "interval": "1m",
        "input_series": [
            {"series": format!("{duration}{{namespace=\"shop\",plan=\"nightly\"}}"), "values": "600 600 5400 5400 5400 600 600"},
            {"series": format!("{objective}{{namespace=\"shop\",plan=\"nightly\"}}"), "values": "3600x6"},
            {"series": format!("{duration}{{namespace=\"shop\",plan=\"unbounded\"}}"), "values": "99999x6"},
        ],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "NeverwipedRestoreDrillOverObjective", "exp_alerts": []},
            {"eval_time": "3m", "alertname": "NeverwipedRestoreDrillOverObjective", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "shop", "plan": "nightly"},
                "exp_annotations": annotations(&rule, "1h 30m 0s"),
            }]},
            {"eval_time": "6m", "alertname": "NeverwipedRestoreDrillOverObjective", "exp_alerts": []},
        ],
    }]);
    assert_promtool_tests(promtool, &groups, tests);
}
