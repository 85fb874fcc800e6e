//! `RestBackend` against real restic REST servers (rest-server and `rclone serve restic`), and
//! against a scripted HTTP server on loopback that fails on purpose, to check retries and errors.

mod support;

use bytes::Bytes;
use neverwiped::backend::rest::{self, RestBackend, RestConfig, RestOptions};
use neverwiped::backend::retry::RetryPolicy;
use neverwiped::backend::{Backend, BackendError, ObjectInfo, ObjectKind, SharedBackend};
use sha2::{Digest, Sha256};
use std::time::Duration;
use support::{RcloneServer, RcloneServerOptions, RestServer, RestServerOptions, TestCertificate};

/// Pauses short enough for tests, within a budget of two seconds per call.
fn fast_policy() -> RetryPolicy {
    RetryPolicy {
        budget: Duration::from_secs(2),
        first_delay: Duration::from_millis(2),
        max_delay: Duration::from_millis(10),
    }
}

/// Default timeouts, shortened for tests.
fn fast_options() -> RestOptions {
    RestOptions {
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(10),
        ..RestOptions::default()
    }
}

/// The gate as the engine opens it (the client with the retry and limit layers), with short
/// pauses.
fn backend(config: RestConfig) -> SharedBackend {
    rest::open(config, fast_options(), fast_policy()).expect("a valid test configuration")
}

/// An object as the repository names it: by the SHA-256 of its bytes.
fn object(content: &[u8]) -> (String, Bytes) {
    (
        hex::encode(Sha256::digest(content)),
        Bytes::copy_from_slice(content),
    )
}

/// Bytes that differ at every offset, so a range read from the wrong place shows.
fn numbered_bytes(length: usize) -> Vec<u8> {
    (0..length).map(|index| (index % 251) as u8).collect()
}

// ---------------------------------------------------------------------------------------------
// Against real servers
// ---------------------------------------------------------------------------------------------

/// Everything a repository does with its storage, on one server; `data_dir` is the server's
/// storage folder, checked to hold the objects where restic's layout puts them.
async fn exercise_every_object_kind(store: &dyn Backend, data_dir: &std::path::Path) {
    store.create().await.expect("create");
    for kind in ObjectKind::LISTABLE {
        assert_eq!(
            store.list(kind).await.unwrap(),
            vec![],
            "{kind}/ after create"
        );
    }
    assert_eq!(store.list(ObjectKind::Config).await.unwrap(), vec![]);

    let config = Bytes::from_static(b"a config object, not content-addressed");
    store
        .write(ObjectKind::Config, "config", config.clone())
        .await
        .expect("write config");
    assert_eq!(
        store.read(ObjectKind::Config, "config").await.unwrap(),
        config
    );
    assert_eq!(
        store.list(ObjectKind::Config).await.unwrap(),
        vec![ObjectInfo {
            name: "config".into(),
            size_bytes: config.len() as u64
        }]
    );

    for (index, kind) in ObjectKind::LISTABLE.into_iter().enumerate() {
        let mut content = numbered_bytes(1000 + index * 4096);
        content.extend_from_slice(kind.dir_name().as_bytes());
        let (name, data) = object(&content);

        store
            .write(kind, &name, data.clone())
            .await
            .unwrap_or_else(|e| panic!("write {kind}: {e}"));
        assert_eq!(store.read(kind, &name).await.unwrap(), data, "{kind}: read");
        assert_eq!(
            store.stat(kind, &name).await.unwrap(),
            Some(data.len() as u64),
            "{kind}: stat"
        );
        assert_eq!(
            store.list(kind).await.unwrap(),
            vec![ObjectInfo {
                name: name.clone(),
                size_bytes: data.len() as u64
            }],
            "{kind}: list"
        );
        let range = store.read_range(kind, &name, 700, 250).await.unwrap();
        assert_eq!(range, data.slice(700..950), "{kind}: read_range");

        let on_disk = match kind {
            ObjectKind::Data => data_dir.join("repo/data").join(&name[..2]).join(&name),
            _ => data_dir.join("repo").join(kind.dir_name()).join(&name),
        };
        assert_eq!(
            std::fs::read(&on_disk).unwrap(),
            data,
            "{kind}: stored at {on_disk:?}"
        );

        store
            .delete(kind, &name)
            .await
            .unwrap_or_else(|e| panic!("delete {kind}: {e}"));
        assert_eq!(
            store.stat(kind, &name).await.unwrap(),
            None,
            "{kind}: stat after delete"
        );
        assert_eq!(
            store.list(kind).await.unwrap(),
            vec![],
            "{kind}: list after delete"
        );
        store
            .delete(kind, &name)
            .await
            .expect("deleting what is gone succeeds");
        match store.read(kind, &name).await {
            Err(BackendError::NotFound {
                kind: missing_kind,
                name: missing,
            }) => {
                assert_eq!((missing_kind, missing), (kind, name));
            }
            other => panic!("{kind}: read after delete gave {other:?}"),
        }
    }
}

#[tokio::test]
async fn rest_server_stores_reads_lists_and_deletes_every_object_kind() {
    let test = "rest_server_stores_reads_lists_and_deletes_every_object_kind";
    let options = RestServerOptions {
        auth: true,
        ..Default::default()
    };
    let Some(server) = RestServer::start(test, options) else {
        return;
    };
    exercise_every_object_kind(&*backend(server.rest_config()), &server.data_dir()).await;
}

#[tokio::test]
async fn rclone_stores_reads_lists_and_deletes_every_object_kind() {
    let test = "rclone_stores_reads_lists_and_deletes_every_object_kind";
    let options = RcloneServerOptions {
        auth: true,
        ..Default::default()
    };
    let Some(server) = RcloneServer::start(test, options) else {
        return;
    };
    exercise_every_object_kind(&*backend(server.rest_config()), &server.data_dir()).await;
}

/// Reading a range that runs past the object's end is an error, not a silently short read.
async fn check_range_past_the_end_is_refused(store: &dyn Backend) {
    store.create().await.unwrap();
    let (name, data) = object(&numbered_bytes(100));
    store.write(ObjectKind::Data, &name, data).await.unwrap();
    for (offset, length) in [(90, 20), (100, 1), (5000, 10)] {
        let result = store
            .read_range(ObjectKind::Data, &name, offset, length)
            .await;
        match result {
            // rest-server answers 416 or a short 206; rclone 1.60 a short 206 (with a negative
            // Content-Length when the range starts past the end).
            Err(BackendError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::UnexpectedEof => {}
            other => panic!("bytes {offset}..+{length} of a 100-byte object gave {other:?}"),
        }
    }
}

#[tokio::test]
async fn rest_server_range_past_the_end_is_an_error() {
    let test = "rest_server_range_past_the_end_is_an_error";
    let Some(server) = RestServer::start(test, RestServerOptions::default()) else {
        return;
    };
    check_range_past_the_end_is_refused(&*backend(server.rest_config())).await;
}

#[tokio::test]
async fn rclone_range_past_the_end_is_an_error() {
    let test = "rclone_range_past_the_end_is_an_error";
    let Some(server) = RcloneServer::start(test, RcloneServerOptions::default()) else {
        return;
    };
    check_range_past_the_end_is_refused(&*backend(server.rest_config())).await;
}

async fn check_missing_repository_and_second_create(store: &dyn Backend) {
    match store.read(ObjectKind::Config, "config").await {
        Err(BackendError::NoRepository { location }) => assert_eq!(location, store.location()),
        other => panic!("reading the config of no repository gave {other:?}"),
    }
    store.create().await.expect("first create");
    store
        .write(ObjectKind::Config, "config", Bytes::from_static(b"config"))
        .await
        .unwrap();
    match store.create().await {
        Err(BackendError::AlreadyExists { location }) => assert_eq!(location, store.location()),
        other => panic!("second create gave {other:?}"),
    }
}

#[tokio::test]
async fn rest_server_reports_no_repository_then_already_exists() {
    let test = "rest_server_reports_no_repository_then_already_exists";
    let Some(server) = RestServer::start(test, RestServerOptions::default()) else {
        return;
    };
    let store = backend(server.rest_config());
    // rest-server has no folders to list before `create`.
    assert!(matches!(
        store.list(ObjectKind::Keys).await,
        Err(BackendError::NoRepository { .. })
    ));
    check_missing_repository_and_second_create(&*store).await;
}

#[tokio::test]
async fn rclone_reports_no_repository_then_already_exists() {
    let test = "rclone_reports_no_repository_then_already_exists";
    let Some(server) = RcloneServer::start(test, RcloneServerOptions::default()) else {
        return;
    };
    check_missing_repository_and_second_create(&*backend(server.rest_config())).await;
}

async fn check_wrong_password_is_unauthorized(mut config: RestConfig) {
    config.password = Some("not-the-password".into());
    let error = backend(config.clone()).create().await.unwrap_err();
    assert!(matches!(error, BackendError::Unauthorized), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("401"), "{message}");
    assert!(message.contains("NEVERWIPED_GATE_PASSWORD"), "{message}");

    config.username = None;
    config.password = None;
    let error = backend(config)
        .list(ObjectKind::Snapshots)
        .await
        .unwrap_err();
    assert!(
        matches!(error, BackendError::Unauthorized),
        "without credentials: {error:?}"
    );
}

#[tokio::test]
async fn rest_server_wrong_password_is_unauthorized_with_a_hint() {
    let test = "rest_server_wrong_password_is_unauthorized_with_a_hint";
    let options = RestServerOptions {
        auth: true,
        ..Default::default()
    };
    let Some(server) = RestServer::start(test, options) else {
        return;
    };
    check_wrong_password_is_unauthorized(server.rest_config()).await;
}

#[tokio::test]
async fn rclone_wrong_password_is_unauthorized_with_a_hint() {
    let test = "rclone_wrong_password_is_unauthorized_with_a_hint";
    let options = RcloneServerOptions {
        auth: true,
        ..Default::default()
    };
    let Some(server) = RcloneServer::start(test, options) else {
        return;
    };
    check_wrong_password_is_unauthorized(server.rest_config()).await;
}

/// On an append-only server: data cannot be deleted, locks can, and writing an object that is
/// already there (as a retried backup does) succeeds through the HEAD check.
async fn check_append_only(store: &dyn Backend) {
    store.create().await.unwrap();
    let (name, data) = object(b"pack bytes");
    store
        .write(ObjectKind::Data, &name, data.clone())
        .await
        .unwrap();

    match store.delete(ObjectKind::Data, &name).await {
        Err(BackendError::Forbidden { what }) => assert!(what.contains(&name), "{what}"),
        other => panic!("deleting data on an append-only server gave {other:?}"),
    }
    assert_eq!(
        store.stat(ObjectKind::Data, &name).await.unwrap(),
        Some(data.len() as u64)
    );

    store
        .write(ObjectKind::Data, &name, data.clone())
        .await
        .expect("re-writing the same object");
    assert_eq!(store.read(ObjectKind::Data, &name).await.unwrap(), data);

    let (lock, lock_data) = object(b"a lock");
    store
        .write(ObjectKind::Locks, &lock, lock_data)
        .await
        .unwrap();
    store
        .delete(ObjectKind::Locks, &lock)
        .await
        .expect("append-only servers let locks go");
    assert_eq!(store.stat(ObjectKind::Locks, &lock).await.unwrap(), None);
}

#[tokio::test]
async fn append_only_rest_server_refuses_deleting_data_but_accepts_rewriting_it() {
    let test = "append_only_rest_server_refuses_deleting_data_but_accepts_rewriting_it";
    let options = RestServerOptions {
        append_only: true,
        ..Default::default()
    };
    let Some(server) = RestServer::start(test, options) else {
        return;
    };
    check_append_only(&*backend(server.rest_config())).await;
}

#[tokio::test]
async fn append_only_rclone_refuses_deleting_data_but_accepts_rewriting_it() {
    let test = "append_only_rclone_refuses_deleting_data_but_accepts_rewriting_it";
    let options = RcloneServerOptions {
        append_only: true,
        auth: true,
    };
    let Some(server) = RcloneServer::start(test, options) else {
        return;
    };
    check_append_only(&*backend(server.rest_config())).await;
}

#[tokio::test]
async fn rest_server_refuses_a_different_config_over_the_existing_one() {
    let test = "rest_server_refuses_a_different_config_over_the_existing_one";
    let Some(server) = RestServer::start(test, RestServerOptions::default()) else {
        return;
    };
    let store = backend(server.rest_config());
    store.create().await.unwrap();
    let config = Bytes::from_static(b"config one");
    store
        .write(ObjectKind::Config, "config", config.clone())
        .await
        .unwrap();
    store
        .write(ObjectKind::Config, "config", config.clone())
        .await
        .expect("same bytes again");
    // Same size, other bytes: the config is not content-addressed, so size alone proves nothing.
    let error = store
        .write(
            ObjectKind::Config,
            "config",
            Bytes::from_static(b"config two"),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::Forbidden { .. }), "{error:?}");
    assert_eq!(
        store.read(ObjectKind::Config, "config").await.unwrap(),
        config
    );
}

#[tokio::test]
async fn rest_server_rejects_an_object_not_named_by_its_sha256_with_a_clear_error() {
    let test = "rest_server_rejects_an_object_not_named_by_its_sha256_with_a_clear_error";
    let Some(server) = RestServer::start(test, RestServerOptions::default()) else {
        return;
    };
    let store = backend(server.rest_config());
    store.create().await.unwrap();
    let (name_of_other_bytes, _) = object(b"other bytes");
    let error = store
        .write(
            ObjectKind::Keys,
            &name_of_other_bytes,
            Bytes::from_static(b"these bytes"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, BackendError::Http { status: 400, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("keys/{name_of_other_bytes}")),
        "{message}"
    );
    assert!(message.contains("SHA-256"), "{message}");
    assert_eq!(
        store
            .stat(ObjectKind::Keys, &name_of_other_bytes)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn https_with_the_servers_ca_works() {
    let test = "https_with_the_servers_ca_works";
    let tls = Some(TestCertificate::for_loopback());
    let options = RestServerOptions {
        auth: true,
        tls,
        ..Default::default()
    };
    let Some(server) = RestServer::start(test, options) else {
        return;
    };
    assert_eq!(server.url().scheme(), "https");
    let store = backend(server.rest_config());
    store.create().await.expect("create over HTTPS");
    let (name, data) = object(b"over TLS");
    store
        .write(ObjectKind::Snapshots, &name, data.clone())
        .await
        .unwrap();
    assert_eq!(
        store.read(ObjectKind::Snapshots, &name).await.unwrap(),
        data
    );
}

#[tokio::test]
async fn https_without_the_ca_fails_with_a_certificate_error() {
    let test = "https_without_the_ca_fails_with_a_certificate_error";
    let tls = Some(TestCertificate::for_loopback());
    let Some(server) = RestServer::start(
        test,
        RestServerOptions {
            tls,
            ..Default::default()
        },
    ) else {
        return;
    };
    // The client reaches the server through a relay that counts the connections it opens.
    let relay = ConnectionCounter::start(server.address()).await;
    let mut config = server.rest_config();
    config.url.set_port(Some(relay.port())).unwrap();
    config.ca_certificate_pem = None;
    let error = backend(config.clone()).create().await.unwrap_err();
    let message = error.to_string();
    // Final at once: one connection, not sent again for the retry layer's budget (a retried
    // call that ran out of budget would end in `RetryBudgetSpent`).
    assert!(
        matches!(error, BackendError::Certificate { .. }),
        "{error:?}"
    );
    assert_eq!(relay.connections(), 1, "one TLS handshake, not retried");
    assert!(message.contains("certificate"), "{message}");
    assert!(message.contains("--cacert"), "{message}");
    assert!(message.contains("CA"), "{message}");

    // A CA that did not sign the server's certificate is no better.
    config.ca_certificate_pem = Some(TestCertificate::for_loopback().ca_pem.into_bytes());
    let error = backend(config).create().await.unwrap_err();
    assert!(error.to_string().contains("certificate"), "{error}");
}

/// A TCP relay on loopback to `upstream` that counts the connections made through it.
struct ConnectionCounter {
    port: u16,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl ConnectionCounter {
    async fn start(upstream: std::net::SocketAddr) -> ConnectionCounter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connections.clone();
        let accept_loop = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        ConnectionCounter {
            port,
            connections,
            accept_loop,
        }
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for ConnectionCounter {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

/// A certificate for the loopback addresses that signs itself, marked as a CA or not.
fn self_signed_loopback_certificate(marked_as_ca: bool) -> TestCertificate {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    if marked_as_ca {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    let key = KeyPair::generate().unwrap();
    let certificate = params.self_signed(&key).unwrap();
    TestCertificate {
        ca_pem: certificate.pem(),
        cert_pem: certificate.pem(),
        key_pem: key.serialize_pem(),
    }
}

#[tokio::test]
async fn self_signed_server_certificate_given_with_cacert_is_accepted_unless_marked_as_ca() {
    let test = "self_signed_server_certificate_given_with_cacert_is_accepted_unless_marked_as_ca";
    for marked_as_ca in [false, true] {
        let tls = Some(self_signed_loopback_certificate(marked_as_ca));
        let options = RestServerOptions {
            tls,
            ..Default::default()
        };
        let Some(server) = RestServer::start(test, options) else {
            return;
        };
        let result = backend(server.rest_config()).create().await;
        match (marked_as_ca, result) {
            (false, Ok(())) => {}
            (true, Err(error @ BackendError::Certificate { .. })) => {
                let message = error.to_string();
                assert!(message.contains("CaUsedAsEndEntity"), "{message}");
                assert!(message.contains("not marked as a CA"), "{message}");
            }
            (marked_as_ca, result) => panic!("marked as CA: {marked_as_ca}: {result:?}"),
        }
    }
}

#[tokio::test]
async fn unreachable_server_is_a_transport_error_that_names_the_location_but_not_the_password() {
    // A port that was free a moment ago: nothing answers there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = url::Url::parse(&format!("http://127.0.0.1:{port}/repo/")).unwrap();
    let mut config = RestConfig::new(url);
    config.username = Some("alice".into());
    config.password = Some("s3cret-password".into());
    let store = backend(config);
    let error = store.stat(ObjectKind::Data, "00ff").await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error.root(), BackendError::Transport { .. }),
        "{error:?}"
    );
    assert!(message.contains("retry budget"), "{message}");
    assert!(
        message.contains(&format!("rest:http://127.0.0.1:{port}/repo/")),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");
    assert!(!format!("{error:?} {store:?}").contains("s3cret"));
}

// ---------------------------------------------------------------------------------------------
// Against a server that fails on purpose
// ---------------------------------------------------------------------------------------------

use scripted::{Reply, ScriptedServer};

/// A rest-server behind a scripted proxy, or `None` when rest-server is missing.
async fn scripted_rest_server(
    test: &str,
    script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
) -> Option<(RestServer, ScriptedServer, SharedBackend)> {
    let server = RestServer::start(test, RestServerOptions::default())?;
    let direct = backend(server.rest_config());
    direct.create().await.unwrap();
    let proxy = ScriptedServer::start(Some(server.address()), script).await;
    let through_proxy = backend(RestConfig::new(proxy.url()));
    Some((server, proxy, through_proxy))
}

#[tokio::test]
async fn write_is_retried_after_two_500s_and_succeeds() {
    let test = "write_is_retried_after_two_500s_and_succeeds";
    let script = |method: &str, nth: usize| match (method, nth) {
        ("POST", 0 | 1) => Reply::status(500, "disk hiccup"),
        _ => Reply::Proxy,
    };
    let Some((server, proxy, store)) = scripted_rest_server(test, script).await else {
        return;
    };
    let (name, data) = object(&numbered_bytes(50_000));
    store
        .write(ObjectKind::Data, &name, data.clone())
        .await
        .expect("write after two 500s");
    // Before each retry the object is looked up, in case the failed try stored it after all.
    assert_eq!(proxy.methods(), ["POST", "HEAD", "POST", "HEAD", "POST"]);
    let direct = backend(server.rest_config());
    assert_eq!(direct.read(ObjectKind::Data, &name).await.unwrap(), data);
}

#[tokio::test]
async fn write_whose_answer_was_lost_is_confirmed_by_head_and_not_sent_again() {
    let test = "write_whose_answer_was_lost_is_confirmed_by_head_and_not_sent_again";
    let script = |method: &str, nth: usize| match (method, nth) {
        ("POST", 0) => Reply::ProxyThenDropAnswer,
        _ => Reply::Proxy,
    };
    let Some((server, proxy, store)) = scripted_rest_server(test, script).await else {
        return;
    };
    let (name, data) = object(b"stored, but the answer never came back");
    store
        .write(ObjectKind::Index, &name, data.clone())
        .await
        .expect("write");
    assert_eq!(proxy.methods(), ["POST", "HEAD"]);
    let direct = backend(server.rest_config());
    assert_eq!(direct.read(ObjectKind::Index, &name).await.unwrap(), data);
}

#[tokio::test]
async fn read_is_retried_after_the_connection_drops_mid_response() {
    let test = "read_is_retried_after_the_connection_drops_mid_response";
    let script = |method: &str, nth: usize| match (method, nth) {
        ("GET", 0) => Reply::DropMidBody,
        ("GET", 1) => Reply::status(503, "busy"),
        _ => Reply::Proxy,
    };
    let Some((server, proxy, store)) = scripted_rest_server(test, script).await else {
        return;
    };
    let (name, data) = object(&numbered_bytes(20_000));
    backend(server.rest_config())
        .write(ObjectKind::Data, &name, data.clone())
        .await
        .unwrap();
    assert_eq!(store.read(ObjectKind::Data, &name).await.unwrap(), data);
    assert_eq!(proxy.methods(), ["GET", "GET", "GET"]);
    let range = store
        .read_range(ObjectKind::Data, &name, 1234, 4321)
        .await
        .unwrap();
    assert_eq!(range, data.slice(1234..1234 + 4321));
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    let proxy = ScriptedServer::start(None, |_: &str, _| Reply::status(400, "no such thing")).await;
    let store = backend(RestConfig::new(proxy.url()));
    let (name, data) = object(b"anything");

    let error = store.read(ObjectKind::Snapshots, &name).await.unwrap_err();
    match &error {
        BackendError::Http {
            status: 400,
            what,
            body,
        } => {
            assert!(what.contains(&format!("snapshots/{name}")), "{what}");
            assert_eq!(body, "no such thing");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(proxy.methods(), ["GET"]);

    store
        .write(ObjectKind::Snapshots, &name, data)
        .await
        .unwrap_err();
    assert_eq!(
        proxy.methods(),
        ["GET", "POST"],
        "a refused write is neither retried nor checked"
    );
}

#[tokio::test]
async fn insufficient_storage_is_reported_as_repository_full_and_not_retried() {
    let proxy = ScriptedServer::start(None, |_: &str, _| Reply::status(507, "quota")).await;
    let store = backend(RestConfig::new(proxy.url()));
    let (name, data) = object(b"one pack too many");
    let error = store
        .write(ObjectKind::Data, &name, data)
        .await
        .unwrap_err();
    assert!(
        matches!(error, BackendError::RepositoryFull { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("507"), "{error}");
    assert!(
        error.to_string().contains("quota"),
        "the gate's message: {error}"
    );
    assert_eq!(proxy.methods(), ["POST"]);
}

#[tokio::test]
async fn payload_too_large_is_reported_as_too_large_and_not_retried() {
    let proxy = ScriptedServer::start(None, |_: &str, _| Reply::status(413, "")).await;
    let store = backend(RestConfig::new(proxy.url()));
    let (name, data) = object(&numbered_bytes(100_000));
    match store.write(ObjectKind::Data, &name, data).await {
        Err(BackendError::TooLarge { what }) => assert!(what.contains(&name), "{what}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(proxy.methods(), ["POST"]);
}

#[tokio::test]
async fn forbidden_write_of_an_object_that_is_not_there_stays_forbidden() {
    let script = |method: &str, _| match method {
        "POST" => Reply::status(403, "Forbidden"),
        _ => Reply::status(404, "Not Found"),
    };
    let proxy = ScriptedServer::start(None, script).await;
    let store = backend(RestConfig::new(proxy.url()));
    let (name, data) = object(b"refused");
    let error = store
        .write(ObjectKind::Keys, &name, data)
        .await
        .unwrap_err();
    assert!(matches!(error, BackendError::Forbidden { .. }), "{error:?}");
    assert!(error.to_string().contains("403"), "{error}");
    assert_eq!(proxy.methods(), ["POST", "HEAD"]);
}

#[tokio::test]
async fn persistent_500_is_retried_until_the_budget_is_spent() {
    let long_body = "x".repeat(1000);
    let proxy = ScriptedServer::start(None, move |_: &str, _| Reply::status(500, &long_body)).await;
    let policy = RetryPolicy {
        budget: Duration::from_millis(300),
        ..fast_policy()
    };
    let store = rest::open(RestConfig::new(proxy.url()), fast_options(), policy).unwrap();
    let started = std::time::Instant::now();
    let error = store.list(ObjectKind::Index).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("retry budget"), "{error}");
    match error.root() {
        BackendError::Http {
            status: 500, body, ..
        } => {
            assert_eq!(body.chars().count(), 201, "200 characters and an ellipsis");
        }
        other => panic!("{other:?}"),
    }
    assert!(proxy.methods().len() > 3, "{:?}", proxy.methods());
}

#[tokio::test]
async fn silent_server_times_out_and_is_retried() {
    let proxy = ScriptedServer::start(None, |_: &str, _| Reply::Silence).await;
    let mut options = fast_options();
    options.read_timeout = Duration::from_millis(200);
    // The first try times out at 0.2 s, the second may start, a third would start past 0.3 s.
    let policy = RetryPolicy {
        budget: Duration::from_millis(300),
        ..fast_policy()
    };
    let store = rest::open(RestConfig::new(proxy.url()), options, policy).unwrap();
    let error = store.stat(ObjectKind::Locks, "00").await.unwrap_err();
    assert!(
        matches!(error.root(), BackendError::Transport { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("did not answer within 0.2 s"),
        "{error}"
    );
    assert_eq!(proxy.methods(), ["HEAD", "HEAD"]);
}

#[tokio::test]
async fn write_may_outlast_the_read_timeout_in_proportion_to_its_size() {
    let script =
        |_: &str, _| Reply::Slow(Duration::from_millis(600), Box::new(Reply::status(200, "")));
    let proxy = ScriptedServer::start(None, script).await;
    let mut options = fast_options();
    options.read_timeout = Duration::from_millis(200);
    options.min_upload_bytes_per_sec = 1024 * 1024;
    // The bare client: one request per call, no retries.
    let store = RestBackend::with_options(RestConfig::new(proxy.url()), options).unwrap();

    // 2 MiB at 1 MiB/s may take 2 s on top of the read timeout.
    let (name, data) = object(&numbered_bytes(2 * 1024 * 1024));
    store
        .write(ObjectKind::Data, &name, data)
        .await
        .expect("a slow answer to a large upload");
    // A lookup has only the read timeout.
    let error = store.stat(ObjectKind::Data, &name).await.unwrap_err();
    assert!(
        error.to_string().contains("did not answer within 0.2 s"),
        "{error}"
    );
}

#[tokio::test]
async fn read_range_cuts_the_range_out_when_the_server_ignores_range() {
    let proxy = ScriptedServer::start(None, |_: &str, _| Reply::status(200, "0123456789")).await;
    let store = backend(RestConfig::new(proxy.url()));
    let range = store
        .read_range(ObjectKind::Index, "ab", 2, 3)
        .await
        .unwrap();
    assert_eq!(range, Bytes::from_static(b"234"));
    let error = store
        .read_range(ObjectKind::Index, "ab", 8, 3)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("returned 2 bytes instead of 3"),
        "{error}"
    );
}

#[tokio::test]
async fn answers_longer_than_asked_for_are_refused() {
    // A range answered with more bytes than the range holds.
    let proxy = ScriptedServer::start(None, |_: &str, _| Reply::status(206, "0123456789")).await;
    let store = backend(RestConfig::new(proxy.url()));
    let error = store
        .read_range(ObjectKind::Data, "ab", 2, 3)
        .await
        .unwrap_err();
    assert!(
        matches!(error, BackendError::OversizedAnswer { limit_bytes: 3, .. }),
        "{error:?}"
    );
    assert_eq!(
        proxy.methods(),
        ["GET"],
        "a refused answer is not asked for again"
    );

    // A whole object above the ceiling.
    let proxy =
        ScriptedServer::start(None, |_: &str, _| Reply::status(200, &"x".repeat(5000))).await;
    let options = RestOptions {
        max_object_bytes: 4096,
        ..fast_options()
    };
    let store = rest::open(RestConfig::new(proxy.url()), options, fast_policy()).unwrap();
    let error = store.read(ObjectKind::Index, "ab").await.unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::OversizedAnswer {
                limit_bytes: 4096,
                ..
            }
        ),
        "{error:?}"
    );
    let error = store.list(ObjectKind::Index).await.unwrap_err();
    assert!(
        matches!(error, BackendError::OversizedAnswer { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn requests_in_flight_never_exceed_the_configured_connections() {
    let script =
        |_: &str, _| Reply::Slow(Duration::from_millis(100), Box::new(Reply::status(404, "")));
    let proxy = ScriptedServer::start(None, script).await;
    let mut config = RestConfig::new(proxy.url());
    config.connections = 2;
    let store = backend(config);
    let lookups: Vec<_> = (0..6)
        .map(|index| {
            let store = store.clone();
            tokio::spawn(async move { store.stat(ObjectKind::Data, &format!("{index:02x}")).await })
        })
        .collect();
    for lookup in lookups {
        assert_eq!(lookup.await.unwrap().unwrap(), None);
    }
    assert_eq!(proxy.methods().len(), 6);
    assert_eq!(proxy.most_in_flight(), 2);
}

/// A hand-written HTTP/1.1 server on loopback whose answers a test scripts: a status, silence, a
/// connection dropped halfway, or the request passed on to a real server. Every answer closes
/// its connection, so each request arrives on a connection of its own.
mod scripted {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::{TcpListener, TcpStream};
    use url::Url;

    /// What to do with one request.
    #[derive(Clone, Debug)]
    pub enum Reply {
        /// Answer this status with this body.
        Status(u16, String),
        /// Pass the request to the real server and its answer back.
        Proxy,
        /// Pass the request to the real server, then close without answering.
        ProxyThenDropAnswer,
        /// Promise a body and close the connection after part of it.
        DropMidBody,
        /// Never answer.
        Silence,
        /// Wait, then reply.
        Slow(Duration, Box<Reply>),
    }

    impl Reply {
        pub fn status(code: u16, body: &str) -> Reply {
            Reply::Status(code, body.to_owned())
        }
    }

    type Script = dyn Fn(&str, usize) -> Reply + Send + Sync;

    #[derive(Default)]
    struct Record {
        methods: Mutex<Vec<String>>,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
    }

    pub struct ScriptedServer {
        address: SocketAddr,
        record: Arc<Record>,
        accept_loop: tokio::task::JoinHandle<()>,
    }

    impl ScriptedServer {
        /// Listens on a free loopback port; `script(method, nth)` decides the reply to the `nth`
        /// (from 0) request with that method. `upstream` is the real server for `Proxy`.
        pub async fn start(
            upstream: Option<SocketAddr>,
            script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
        ) -> ScriptedServer {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let record = Arc::new(Record::default());
            let script: Arc<Script> = Arc::new(script);
            let accept_loop = tokio::spawn({
                let record = record.clone();
                async move {
                    while let Ok((client, _)) = listener.accept().await {
                        let (record, script) = (record.clone(), script.clone());
                        tokio::spawn(serve_one(client, upstream, record, script));
                    }
                }
            });
            ScriptedServer {
                address,
                record,
                accept_loop,
            }
        }

        /// The repository `repo/` on this server.
        pub fn url(&self) -> Url {
            Url::parse(&format!("http://{}/repo/", self.address)).unwrap()
        }

        /// The methods of the requests received so far, in order.
        pub fn methods(&self) -> Vec<String> {
            self.record.methods.lock().unwrap().clone()
        }

        /// The most requests that were being answered at one time.
        pub fn most_in_flight(&self) -> usize {
            self.record.most_in_flight.load(Ordering::SeqCst)
        }
    }

    impl Drop for ScriptedServer {
        fn drop(&mut self) {
            self.accept_loop.abort();
        }
    }

    /// A request as received: its head (request line and headers, without `Connection`) and body.
    struct Request {
        method: String,
        head_lines: Vec<String>,
        body: Vec<u8>,
    }

    async fn read_request(client: &mut BufReader<TcpStream>) -> Option<Request> {
        let mut head_lines = Vec::new();
        let mut content_length = 0;
        loop {
            let mut line = String::new();
            if client.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let line = line.trim_end().to_owned();
            if line.is_empty() {
                break;
            }
            let lowercase = line.to_ascii_lowercase();
            if let Some(value) = lowercase.strip_prefix("content-length:") {
                content_length = value.trim().parse().ok()?;
            }
            if !lowercase.starts_with("connection:") {
                head_lines.push(line);
            }
        }
        let method = head_lines.first()?.split(' ').next()?.to_owned();
        let mut body = vec![0; content_length];
        client.read_exact(&mut body).await.ok()?;
        Some(Request {
            method,
            head_lines,
            body,
        })
    }

    async fn serve_one(
        client: TcpStream,
        upstream: Option<SocketAddr>,
        record: Arc<Record>,
        script: Arc<Script>,
    ) {
        let mut client = BufReader::new(client);
        let Some(request) = read_request(&mut client).await else {
            return;
        };
        let reply = {
            let mut methods = record.methods.lock().unwrap();
            let nth = methods
                .iter()
                .filter(|method| **method == request.method)
                .count();
            methods.push(request.method.clone());
            script(&request.method, nth)
        };
        let in_flight = record.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        record.most_in_flight.fetch_max(in_flight, Ordering::SeqCst);
        answer(client.get_mut(), &request, reply, upstream).await;
        record.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    async fn answer(
        client: &mut TcpStream,
        request: &Request,
        reply: Reply,
        upstream: Option<SocketAddr>,
    ) {
        match reply {
            Reply::Status(code, body) => {
                let head = format!(
                    "HTTP/1.1 {code} Scripted\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = client.write_all(head.as_bytes()).await;
                let _ = client.write_all(body.as_bytes()).await;
            }
            Reply::Proxy => {
                let answer = forward(request, upstream).await;
                let _ = client.write_all(&answer).await;
            }
            Reply::ProxyThenDropAnswer => {
                forward(request, upstream).await;
            }
            Reply::DropMidBody => {
                let head = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n";
                let _ = client.write_all(head.as_bytes()).await;
                let _ = client.write_all(&[0u8; 1000]).await;
            }
            Reply::Silence => tokio::time::sleep(Duration::from_secs(600)).await,
            Reply::Slow(delay, reply) => {
                tokio::time::sleep(delay).await;
                Box::pin(answer(client, request, *reply, upstream)).await;
            }
        }
        let _ = client.shutdown().await;
    }

    /// Sends the request to the real server with `Connection: close` and returns its whole answer.
    async fn forward(request: &Request, upstream: Option<SocketAddr>) -> Vec<u8> {
        let upstream = upstream.expect("a Proxy reply needs an upstream server");
        let mut server = TcpStream::connect(upstream).await.unwrap();
        let mut head = request.head_lines.join("\r\n");
        head.push_str("\r\nConnection: close\r\n\r\n");
        server.write_all(head.as_bytes()).await.unwrap();
        server.write_all(&request.body).await.unwrap();
        let mut answer = Vec::new();
        server.read_to_end(&mut answer).await.unwrap();
        answer
    }
}
