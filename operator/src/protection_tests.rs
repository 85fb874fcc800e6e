use super::*;

fn protection(json: &str) -> Protection {
    Protection::parse(json, "neverwiped-system").expect("valid maintenance values")
}

fn refusal(json: &str) -> ProtectionError {
    Protection::parse(json, "neverwiped-system").expect_err("refused")
}

#[test]
fn no_values_protect_nothing() {
    let none = protection("");
    assert_eq!(none.namespace, "neverwiped-system");
    let plan = none.for_plan("shop", "https://gate.example.com/shop");
    assert_eq!(plan, PlanProtection::default());
    assert_eq!(
        protection("{}").for_plan("shop", "https://g.example/x"),
        plan
    );
    // Without credentials the operator looks for no Jobs in its namespace.
    assert_eq!(none.jobs_namespace(), None);
    let windows_only = protection(r#"{"protectionWindow": {"default": "14d"}}"#);
    assert_eq!(windows_only.jobs_namespace(), None);
}

#[test]
fn windows_take_days_and_hours_and_refuse_the_rest() {
    assert_eq!(Window::parse("14d").unwrap().seconds, 14 * 86_400);
    assert_eq!(Window::parse("36h").unwrap().seconds, 36 * 3_600);
    assert_eq!(Window::parse("1d12h").unwrap().seconds, 36 * 3_600);
    for bad in [
        "", "14", "d", "2w", "12h1d", "1d1d", "0d", "-1d", "14 d", "1m",
    ] {
        assert!(Window::parse(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn the_login_of_the_longest_prefix_applies_compared_parsed() {
    let values = protection(
        r#"{"credentials": [
            {"urlPrefix": "https://gate.example.com/", "secretName": "gate-maintenance"},
            {"urlPrefix": "https://gate.example.com/finance", "secretName": "finance-maintenance"}
        ]}"#,
    );
    assert_eq!(values.jobs_namespace(), Some("neverwiped-system"));
    let secret = |url: &str| {
        values
            .for_plan("shop", url)
            .credentials
            .map(|c| c.secret_name.as_str())
    };
    assert_eq!(
        secret("https://gate.example.com/shop"),
        Some("gate-maintenance")
    );
    assert_eq!(
        secret("https://Gate.Example.com:443/finance/ledger"),
        Some("finance-maintenance")
    );
    // Neither a look-alike host, another scheme or port, nor a segment that only starts alike.
    assert_eq!(secret("https://gate.example.com.evil/shop"), None);
    assert_eq!(secret("https://gate.example.evil/shop"), None);
    assert_eq!(secret("http://gate.example.com/shop"), None);
    assert_eq!(secret("https://gate.example.com:8443/shop"), None);
    assert_eq!(
        secret("https://gate.example.com/financeX/a"),
        Some("gate-maintenance")
    );
    assert_eq!(secret("not a url"), None);
}

#[test]
fn the_longest_window_that_applies_wins() {
    let values = protection(
        r#"{"protectionWindow": {
            "default": "7d",
            "namespaces": {"payments": "30d", "scratch": "1d"},
            "urlPrefixes": [{"urlPrefix": "https://gate.example.com/archive/", "window": "90d"}]
        }}"#,
    );
    let window = |namespace: &str, url: &str| values.for_plan(namespace, url).protect_within();
    assert_eq!(
        window("shop", "https://gate.example.com/shop"),
        Some("7d".into())
    );
    assert_eq!(
        window("payments", "https://gate.example.com/p"),
        Some("30d".into())
    );
    // A namespace's shorter window does not shorten the default.
    assert_eq!(
        window("scratch", "https://gate.example.com/s"),
        Some("7d".into())
    );
    assert_eq!(
        window("payments", "https://gate.example.com/archive/p"),
        Some("90d".into())
    );
    assert_eq!(
        window("shop", "https://gate.example.com/archive2/p"),
        Some("7d".into())
    );
    // An empty default (the chart's) is no window.
    let empty = protection(r#"{"protectionWindow": {"default": ""}}"#);
    assert_eq!(empty.for_plan("shop", "https://g.example/x").window, None);
}

#[test]
fn a_bad_entry_is_refused_by_its_place_in_the_values() {
    let cases = [
        (
            r#"{"credentials": [{"urlPrefix": "https://a.example/", "secretName": "a"},
                {"urlPrefix": "gate.example.com", "secretName": "b"}]}"#,
            "credentials[1].urlPrefix",
        ),
        (
            r#"{"credentials": [{"urlPrefix": "https://a.example/", "secretName": "Not_A_Name"}]}"#,
            "credentials[0].secretName",
        ),
        (
            r#"{"credentials": [{"urlPrefix": "https://a.example/x", "secretName": "a"},
                {"urlPrefix": "https://A.example:443/x/", "secretName": "b"}]}"#,
            "credentials[1].urlPrefix",
        ),
        (
            r#"{"protectionWindow": {"default": "two weeks"}}"#,
            "protectionWindow.default",
        ),
        (
            r#"{"protectionWindow": {"namespaces": {"shop": "0h"}}}"#,
            "protectionWindow.namespaces.shop",
        ),
        (
            r#"{"protectionWindow": {"namespaces": {"Shop!": "1d"}}}"#,
            "protectionWindow.namespaces.Shop!",
        ),
        (
            r#"{"protectionWindow": {"urlPrefixes": [{"urlPrefix": "https://a.example/", "window": "1y"}]}}"#,
            "protectionWindow.urlPrefixes[0].window",
        ),
        (r#"{"credential": []}"#, "maintenance"),
    ];
    for (json, entry) in cases {
        let error = refusal(json);
        assert_eq!(error.entry, entry, "{json}: {error}");
        assert!(error.to_string().starts_with(entry), "{error}");
    }
    let error =
        refusal(r#"{"credentials": [{"urlPrefix": "https://u:p@a.example/", "secretName": "a"}]}"#);
    assert!(!error.to_string().contains("u:p"), "{error}");
}
