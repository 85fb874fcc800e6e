use super::*;

fn fault(text: &str) -> LocationFault {
    RestLocation::parse(text).unwrap_err().fault
}

#[test]
fn urls_every_former_rule_set_accepted_are_accepted_as_written() {
    for valid in [
        // admission
        "https://gate.example.com/team-a/shop",
        "http://rest-server.neverwiped.svc:8000/shop/",
        "https://gate.example.com/a..b/",
        // the sidecar's address tests (after `rest:`)
        "https://gate.example:8000/team/db",
        "http://127.0.0.1:8000",
        // the tenant policy's tests
        "https://gate.example.com",
        "https://b.example/team-a/shop",
        // Kubernetes expands the gate user name into the path of a Job's argument.
        "https://gate.example.com/$(NEVERWIPED_GATE_USERNAME)",
        "http://a",
        "http://[::1]:8000/r",
    ] {
        let location = RestLocation::parse(valid).unwrap_or_else(|e| panic!("{valid}: {e}"));
        assert_eq!(location.to_string(), valid);
        assert_eq!(location.as_str(), valid);
        assert!(location.url().path().ends_with('/'), "{valid}");
    }
}

#[test]
fn urls_any_former_rule_set_refused_are_refused_with_the_rule() {
    for (invalid, expected) in [
        // admission and the CRD's CEL rule
        (
            "https://gate.example.com/team-a/../team-b",
            LocationFault::DotSegment,
        ),
        (
            "https://gate.example.com/team-a/%2E%2e/team-b",
            LocationFault::DotSegment,
        ),
        (
            "https://gate.example.com/team-a%2f..%2fteam-b",
            LocationFault::DotSegment,
        ),
        ("https://gate.example.com/./x", LocationFault::DotSegment),
        ("https://gate.example.com/x/..", LocationFault::DotSegment),
        (
            "https://user@gate.example.com/x",
            LocationFault::Credentials,
        ),
        (
            "https://gate.example.com/x?y",
            LocationFault::UserQueryOrFragment,
        ),
        (
            "https://gate.example.com/x#y",
            LocationFault::UserQueryOrFragment,
        ),
        (
            "https://gate.example.com/x@y",
            LocationFault::UserQueryOrFragment,
        ),
        (
            "https://gate.example.com\\@evil/x",
            LocationFault::UserQueryOrFragment,
        ),
        (
            "https://gate.example.com/x\ny",
            LocationFault::ControlCharacter,
        ),
        (
            "https://gate.example.com/x y",
            LocationFault::ControlCharacter,
        ),
        // the CRD's pattern and length
        ("ftp://host/repo/", LocationFault::Scheme),
        ("HTTPS://gate.example.com/x", LocationFault::Scheme),
        ("/tmp/repo", LocationFault::Scheme),
        ("gate.example.com/x", LocationFault::Scheme),
        ("http://", LocationFault::Length),
        // the sidecar's URL checks
        (
            "https://alice:s3cret@gate.example/repo/",
            LocationFault::Credentials,
        ),
        ("https://host/repo/?x=1", LocationFault::UserQueryOrFragment),
        ("http:///repo/x", LocationFault::NoHost),
        ("https://gate.example:99999/x", LocationFault::Unparsable),
    ] {
        assert_eq!(fault(invalid), expected, "{invalid:?}");
    }
    let long = format!("https://gate.example.com/{}", "a".repeat(URL_MAX_CHARS));
    assert_eq!(fault(&long), LocationFault::Length);
}

#[test]
fn a_refusal_never_repeats_a_password() {
    for address in [
        "https://alice:s3cret@gate.example/repo/",
        "https://alice:s3cret@gate example/repo/",
    ] {
        let error = RestLocation::parse(address).unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
        assert!(!format!("{error:?}").contains("s3cret"), "{error:?}");
    }
    let error =
        RepositoryLocation::parse("rest:https://alice:s3cret@gate.example/repo/").unwrap_err();
    let message = error.to_string();
    assert!(!message.contains("s3cret"), "{message}");
    assert!(message.contains("NEVERWIPED_GATE_USERNAME"), "{message}");
    assert!(message.contains("NEVERWIPED_GATE_PASSWORD"), "{message}");
    assert!(
        message.contains("rest:https://***@gate.example/repo/"),
        "{message}"
    );
}

#[test]
fn the_sidecar_form_is_rest_and_a_url_or_a_folder() {
    let rest = RepositoryLocation::parse("rest:https://gate.example:8000/team/db").unwrap();
    assert_eq!(rest.to_arg(), "rest:https://gate.example:8000/team/db");
    let RepositoryLocation::Rest(inner) = &rest else {
        panic!("{rest:?}");
    };
    assert_eq!(inner.url().as_str(), "https://gate.example:8000/team/db/");
    assert_eq!(rest.folder(), None);

    let folder = RepositoryLocation::parse("/srv/repo").unwrap();
    assert_eq!(folder.folder(), Some(Path::new("/srv/repo")));
    assert_eq!(folder.to_string(), "/srv/repo");
    assert_eq!(folder.host(), None);
    assert_eq!(
        RepositoryLocation::parse("./a:b/c").unwrap().to_arg(),
        "./a:b/c"
    );
}

#[test]
fn the_sidecar_form_refuses_bare_urls_other_schemes_and_nothing() {
    for (invalid, expected) in [
        ("https://gate.example.com/x", LocationFault::BareUrl),
        ("HTTP://gate.example.com/x", LocationFault::BareUrl),
        ("s3://bucket/x", LocationFault::Scheme),
        ("rest:ftp://host/repo/", LocationFault::Scheme),
        ("rest:/tmp/repo", LocationFault::Scheme),
        ("rest:https://gate/x/../y", LocationFault::DotSegment),
        ("", LocationFault::Empty),
    ] {
        let error = RepositoryLocation::parse(invalid).unwrap_err();
        assert_eq!(error.fault, expected, "{invalid:?}: {error}");
    }
    let error = RepositoryLocation::parse("https://gate.example.com/x").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("write rest:https://gate.example.com/x"),
        "{error}"
    );
    let error = RepositoryLocation::parse("s3://bucket/x").unwrap_err();
    assert!(error.to_string().contains("\"s3\""), "{error}");
}

#[test]
fn hosts_are_lower_case_with_a_port_and_without_a_path() {
    let host = |text: &str| RepositoryLocation::parse(text).unwrap().host();
    assert_eq!(
        host("rest:https://Gate.Example.com:8443/shop/"),
        Some("gate.example.com:8443".into())
    );
    assert_eq!(
        host("rest:http://127.0.0.1:8000/a"),
        Some("127.0.0.1:8000".into())
    );
    assert_eq!(
        host("rest:https://gate.example.com/shop"),
        Some("gate.example.com".into())
    );
    assert_eq!(host("rest:http://[::1]:8000/a"), Some("[::1]:8000".into()));
    assert_eq!(host("/srv/repo"), None);
}

#[test]
fn a_prefix_covers_only_whole_path_segments_of_the_same_origin() {
    let under = |url: &str, prefix: &str| {
        RestLocation::parse(url)
            .unwrap()
            .is_under(&RestLocation::parse(prefix).unwrap())
    };
    assert!(under(
        "https://gate.example.com/shop",
        "https://gate.example.com"
    ));
    assert!(under(
        "https://gate.example.com",
        "https://gate.example.com"
    ));
    assert!(under(
        "https://Gate.Example.com/shop",
        "https://gate.example.com/"
    ));
    assert!(!under(
        "https://gate.example.com.evil.test/shop",
        "https://gate.example.com"
    ));
    assert!(!under(
        "https://gate.example.com:8443/shop",
        "https://gate.example.com"
    ));
    assert!(!under(
        "http://gate.example.com/shop",
        "https://gate.example.com"
    ));
    assert!(under(
        "https://b.example/team-a/shop",
        "https://b.example/team-a/"
    ));
    assert!(under(
        "https://b.example/team-a/shop",
        "https://b.example/team-a"
    ));
    assert!(under(
        "https://b.example/team-a",
        "https://b.example/team-a/"
    ));
    assert!(!under(
        "https://b.example/team-ab/shop",
        "https://b.example/team-a/"
    ));
    assert!(!under(
        "https://b.example/team-ab/shop",
        "https://b.example/team-a"
    ));
}

#[test]
fn serde_is_the_written_string_both_ways() {
    for text in ["rest:https://gate.example.com/shop", "/srv/repo"] {
        let location = RepositoryLocation::parse(text).unwrap();
        let json = serde_json::to_string(&location).unwrap();
        assert_eq!(json, serde_json::to_string(text).unwrap());
        let back: RepositoryLocation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, location);
    }
    let rest: RestLocation = serde_json::from_str(r#""https://gate.example.com/shop""#).unwrap();
    assert_eq!(
        serde_json::to_string(&rest).unwrap(),
        r#""https://gate.example.com/shop""#
    );
    let refused = serde_json::from_str::<RestLocation>(r#""https://u:pw@gate/x""#).unwrap_err();
    assert!(!refused.to_string().contains("pw@"), "{refused}");
}

#[test]
fn a_location_as_connected_names_the_folder_the_client_uses() {
    let written = RestLocation::parse("https://gate.example:8000/team/db").unwrap();
    let connected = written.as_connected();
    assert_eq!(
        connected.to_arg(),
        "rest:https://gate.example:8000/team/db/"
    );
    assert_eq!(connected.url(), written.url());
    assert_eq!(written.to_arg(), "rest:https://gate.example:8000/team/db");
}
