//! Streams and hooks against the real API server: a valid plan with both, a Restore of streams
//! only, and the CEL rules that refuse duplicate names, the operator's own variables, secrets
//! given two ways and mount paths outside their place.

use serde_json::{json, Value};

use super::support::{api_server_or_skip, TestNamespace};
use super::{apply_test_crds, assert_refused, create, plan, TEST_GROUP, TEST_PREFIX};

fn stream(name: &str) -> Value {
    json!({
        "name": name,
        "image": "registry.example/redis:7",
        "command": ["redis-cli", "--rdb", "-"],
        "env": [{"name": "REDISCLI_AUTH",
                 "valueFrom": {"secretKeyRef": {"name": "redis", "key": "password"}}}],
        "volumeMounts": [{"claimName": "data", "mountPath": "/var/lib/redis"}]
    })
}

/// A case's name, the text its refusal names, and the change that makes the plan invalid.
type Case = (&'static str, &'static str, fn(&mut Value));

#[test]
fn the_api_server_takes_streams_and_hooks_and_refuses_their_bad_shapes() {
    if !api_server_or_skip() {
        return;
    }
    apply_test_crds();
    let namespace = TestNamespace::create("admission-streams");
    let ns = namespace.name.as_str();
    let with_streams = |p: &mut Value| {
        p["spec"]["streams"] = json!([stream("cache")]);
        p["spec"]["hooks"] = json!({
            "pre": [{"name": "checkpoint", "command": ["psql", "-c", "CHECKPOINT"]}],
            "post": [{"name": "checkpoint", "command": ["true"], "onError": "Continue"}]
        });
    };
    create(ns, &plan("valid", with_streams)).expect("streams and hooks are accepted");
    create(
        ns,
        &plan("streams-only", |p| {
            let spec = p["spec"].as_object_mut().unwrap();
            spec.remove("volumes");
            spec.remove("databases");
            spec.insert("streams".into(), json!([stream("cache")]));
        }),
    )
    .expect("a plan of streams only is accepted");
    let cases: [Case; 6] = [
        ("duplicate", "streams: each name once", |p| {
            p["spec"]["streams"] = json!([stream("cache"), stream("cache")])
        }),
        ("reserved-env", "names starting with NEVERWIPED_", |p| {
            p["spec"]["streams"] = json!([stream("cache")]);
            p["spec"]["streams"][0]["env"][0]["name"] = json!("NEVERWIPED_PASSWORD_FILE");
        }),
        ("two-values", "set exactly one of value or valueFrom", |p| {
            p["spec"]["streams"] = json!([stream("cache")]);
            p["spec"]["streams"][0]["env"][0]["value"] = json!("hunter2");
        }),
        ("relative-mount", "mountPath must be absolute", |p| {
            p["spec"]["streams"] = json!([stream("cache")]);
            p["spec"]["streams"][0]["volumeMounts"][0]["mountPath"] = json!("var/lib/redis");
        }),
        ("reserved-mount", "mountPath must be absolute", |p| {
            p["spec"]["streams"] = json!([stream("cache")]);
            p["spec"]["streams"][0]["volumeMounts"][0]["mountPath"] = json!("/neverwiped/bin");
        }),
        ("hook-timeout", "spec.hooks.pre[0].timeoutSeconds", |p| {
            p["spec"]["hooks"] = json!({"pre": [{"name": "slow", "command": ["sleep", "1"], "timeoutSeconds": 7200}]});
        }),
    ];
    for (name, expected, patch) in cases {
        assert_refused(create(ns, &plan(name, patch)), expected, name);
    }
}

#[test]
fn the_api_server_takes_a_restore_of_streams_only() {
    if !api_server_or_skip() {
        return;
    }
    apply_test_crds();
    let namespace = TestNamespace::create("admission-restore-streams");
    let ns = namespace.name.as_str();
    let restore = |name: &str, streams: Value| {
        json!({
            "apiVersion": format!("{TEST_GROUP}/v1alpha1"),
            "kind": format!("{TEST_PREFIX}Restore"),
            "metadata": {"name": name},
            "spec": {"backupPlanName": "nightly", "streams": streams}
        })
    };
    let cache = json!({"name": "cache", "command": ["redis-cli", "--pipe"]});
    create(ns, &restore("streams", json!([cache]))).expect("a Restore of streams only");
    assert_refused(
        create(ns, &restore("duplicate", json!([cache, cache]))),
        "streams: each name once",
        "duplicate restore streams",
    );
}
