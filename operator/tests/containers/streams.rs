//! Streams end to end: a plan's dump containers for data stores other than PostgreSQL and
//! MariaDB, through the built images. The operator runs from its image; each Job's pod runs in
//! `support::kubelet` with all its containers (the init container that brings the launcher, one
//! container per stream of the store's own image, the sidecar), sharing the pod's `emptyDir`s as
//! containers of one pod do. The stores are real servers of Debian's packages
//! (`tests/images/stores/`): Redis (`redis-cli --rdb -`), SQLite (`sqlite3 DB .dump`, the file on
//! a claim) and etcd (`etcdctl snapshot save`).
//!
//! Emulated: the kubelet and the Job controller. Real: the API server, the operator, the
//! sidecar, the launcher, the stores' tools and servers, rest-server.
//!
//! Each store's stream is restored by a Restore's `streams` into claims, loaded into a new
//! server (Redis from the dump file, etcd by `etcdutl snapshot restore`, SQLite by loading the
//! SQL) and compared key by key, row by row, with the original. A stream whose command fails, or
//! writes nothing, fails the run and says why.

use super::*;
use support::stores::{store_image, store_shell, StoreServer};

const REDIS_PASSWORD: &str = "redis secret 41c9";

/// Every key of a Redis server with its type and value, in key order: what "identical" means.
fn redis_contents(port: u16) -> String {
    let script = format!(
        r#"cli() {{ redis-cli -p {port} "$@"; }}
        cli --scan | sort | while read -r key; do
          type=$(cli type "$key")
          case $type in
            string) value=$(cli --no-raw get "$key" | sha256sum) ;;
            hash) value=$(cli hgetall "$key" | paste - - | sort) ;;
            list) value=$(cli lrange "$key" 0 -1) ;;
            set) value=$(cli smembers "$key" | sort) ;;
            zset) value=$(cli zrange "$key" 0 -1 withscores) ;;
            *) value="unexpected type" ;;
          esac
          printf '%s %s\n%s\n' "$key" "$type" "$value"
        done"#
    );
    store_shell("redis", &script, &[], &[("REDISCLI_AUTH", REDIS_PASSWORD)])
}

/// Fills Redis with every kind of value, one of them 1 MiB of text.
fn fill_redis(port: u16) {
    let script = format!(
        r#"cli() {{ redis-cli -p {port} "$@" >/dev/null; }}
        i=0; while [ $i -lt 200 ]; do cli set "user:$i" "name $i ü \"quoted\""; i=$((i+1)); done
        cli hset cart:7 apples 3 pears 5 "with space" 1
        cli rpush queue first second third
        cli sadd tags red green blue
        cli zadd scores 1.5 ann 2 bob 10 cy
        head -c 1048576 /dev/urandom | base64 -w0 | cli -x set blob"#
    );
    store_shell("redis", &script, &[], &[("REDISCLI_AUTH", REDIS_PASSWORD)]);
}

/// Every key and value of an etcd, in key order.
fn etcd_contents(port: u16) -> String {
    store_shell(
        "etcd",
        &format!("etcdctl --endpoints http://127.0.0.1:{port} get '' --prefix"),
        &[],
        &[],
    )
}

fn fill_etcd(port: u16) {
    let script = format!(
        r#"i=0; while [ $i -lt 100 ]; do
          etcdctl --endpoints http://127.0.0.1:{port} put "/registry/item/$i" "value $i ü" >/dev/null; i=$((i+1));
        done
        etcdctl --endpoints http://127.0.0.1:{port} del /registry/item/7 >/dev/null"#
    );
    store_shell("etcd", &script, &[], &[]);
}

/// A SQLite database of two tables at `dir/app.db`, made by the store's own `sqlite3`.
fn fill_sqlite(dir: &Path) {
    let sql = "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, price REAL, note BLOB);
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
          INSERT INTO orders SELECT i, 'item ' || i || ' ''quoted'' ü', i * 1.25, randomblob(16) FROM n;
        CREATE INDEX orders_item ON orders (item);
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
        INSERT INTO customers VALUES (1, 'ann'), (2, NULL);";
    store_shell(
        "sqlite",
        &format!("sqlite3 /db/app.db \"{sql}\""),
        &[(dir, "/db")],
        &[],
    );
}

fn sqlite_dump(dir: &Path) -> String {
    store_shell("sqlite", "sqlite3 /db/app.db .dump", &[(dir, "/db")], &[])
}

/// A folder any user of the pod may write, as a fresh volume is.
fn writable_folder(root: &Path, name: &str) -> PathBuf {
    let path = root.join(name);
    folder(&path, "", (0, 0), 0o777);
    path
}

/// The containers of the backup pod ran as the operator asked: not root, no capability, a
/// read-only root, no privilege escalation, and none of the sidecar's Secrets mounted.
fn restricted(run: &PodRun, container: &str) {
    let options = &run.container(container).run_options;
    let secrets = format!("target={}", neverwiped_operator::job::SECRETS_ROOT);
    assert!(
        run.container("sidecar")
            .run_options
            .iter()
            .any(|o| o.contains(&secrets))
            && !options.iter().any(|o| o.contains(&secrets)),
        "{container} sees the repository's Secrets: {options:?}"
    );
    for option in ["--read-only", "--cap-drop=ALL", "no-new-privileges"] {
        assert!(
            options.iter().any(|o| o == option),
            "{container}: {option} missing: {options:?}"
        );
    }
    let user = options
        .iter()
        .position(|o| o == "--user")
        .map(|i| options[i + 1].clone())
        .unwrap_or_default();
    assert!(
        !user.is_empty() && !user.starts_with("0:") && user != "0",
        "{container} runs as {user:?}"
    );
}

#[tokio::test]
async fn redis_sqlite_and_etcd_streams_back_up_and_restore_identically() {
    let stores = ["redis", "sqlite", "etcd"].map(store_image);
    let store_refs: Vec<&str> = stores.iter().map(String::as_str).collect();
    if !parts_or_skip() || !engine_or_skip(&store_refs) {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("streams");
    let ns = namespace.name.as_str();
    let client = client().await;
    let rest = RestServer::start(ns);
    let scratch = Scratch::new(&format!("{ns}-stores"));
    let redis = StoreServer::redis(
        &format!("{ns}-redis"),
        &writable_folder(&scratch.0, "redis"),
        REDIS_PASSWORD,
    );
    fill_redis(redis.port);
    let etcd = StoreServer::etcd(&format!("{ns}-etcd"), &writable_folder(&scratch.0, "etcd"));
    fill_etcd(etcd.port);
    let app = writable_folder(&scratch.0, "app");
    fill_sqlite(&app);

    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    secret(ns, "redis", &[("password", REDIS_PASSWORD)]);
    let mut kubelet = Kubelet::new(client.clone(), ns);
    for name in ["app", "redis-restored", "sqlite-restored", "etcd-restored"] {
        claim(ns, name);
        let folder = match name {
            "app" => app.clone(),
            other => writable_folder(&scratch.0, other),
        };
        kubelet.claim(name, &folder);
    }
    let operator = OperatorContainer::start(ns);
    let streams = json!([
        {"name": "redis", "image": store_image("redis"),
         "command": ["redis-cli", "-h", "127.0.0.1", "-p", redis.port.to_string(), "--rdb", "-"],
         "env": [{"name": "REDISCLI_AUTH", "valueFrom": {"secretKeyRef": {"name": "redis", "key": "password"}}}]},
        {"name": "sqlite", "image": store_image("sqlite"),
         "command": ["sqlite3", "/app/app.db", ".dump"],
         "volumeMounts": [{"claimName": "app", "mountPath": "/app"}]},
        {"name": "etcd", "image": store_image("etcd"),
         "command": ["sh", "-c", format!("etcdctl --endpoints http://127.0.0.1:{} snapshot save /tmp/etcd.db >&2 && cat /tmp/etcd.db", etcd.port)]},
    ]);
    apply(&plan(
        ns,
        "nightly",
        &rest.url("stores"),
        json!({"streams": streams}),
    ));
    let backup = run(&mut kubelet, &client, ns, "nightly-manual-1").await;
    assert!(succeeded(&backup), "{}", pod_report(&backup));
    for container in ["stream-redis", "stream-sqlite", "stream-etcd"] {
        restricted(&backup, container);
    }
    let status = recorded(ns, "nightly", "nightly-manual-1").await;
    assert_eq!(status["lastRun"]["result"], "Succeeded", "{status:#}");
    let recorded_streams = &status["lastRun"]["streams"];
    for (index, name) in ["redis", "sqlite", "etcd"].iter().enumerate() {
        let stream = &recorded_streams[index];
        assert_eq!(stream["name"], *name, "{status:#}");
        assert!(stream["bytes"].as_u64() > Some(1000), "{status:#}");
    }

    let restore_streams = json!([
        {"name": "redis", "command": ["sh", "-c", "cat > /restore/dump.rdb"],
         "volumeMounts": [{"claimName": "redis-restored", "mountPath": "/restore"}]},
        {"name": "sqlite", "image": store_image("sqlite"), "command": ["sqlite3", "/restore/app.db"],
         "volumeMounts": [{"claimName": "sqlite-restored", "mountPath": "/restore"}]},
        {"name": "etcd",
         "command": ["sh", "-c", "cat > /tmp/etcd.db && etcdutl snapshot restore /tmp/etcd.db --data-dir /restore/etcd"],
         "volumeMounts": [{"claimName": "etcd-restored", "mountPath": "/restore"}]},
    ]);
    let (restored, restore_run) = restore(
        &mut kubelet,
        &client,
        ns,
        "stores-back",
        json!({"streams": restore_streams}),
    )
    .await;
    assert_eq!(
        restored["snapshotId"],
        status["lastRun"]["snapshotId"],
        "{restored:#}\n{}",
        pod_report(&restore_run)
    );

    let redis_again = StoreServer::redis(
        &format!("{ns}-redis-restored"),
        &scratch.0.join("redis-restored"),
        REDIS_PASSWORD,
    );
    let original = redis_contents(redis.port);
    assert!(
        original.contains("user:199 string") && original.contains("blob string"),
        "{original}"
    );
    assert_eq!(
        redis_contents(redis_again.port),
        original,
        "Redis, key by key"
    );
    let etcd_again = StoreServer::etcd(
        &format!("{ns}-etcd-restored"),
        &scratch.0.join("etcd-restored"),
    );
    let original = etcd_contents(etcd.port);
    assert!(
        original.contains("/registry/item/99") && !original.contains("/registry/item/7\n"),
        "{original}"
    );
    assert_eq!(etcd_contents(etcd_again.port), original, "etcd, key by key");
    let original = sqlite_dump(&app);
    assert!(original.contains("CREATE INDEX orders_item"), "{original}");
    assert_eq!(
        sqlite_dump(&scratch.0.join("sqlite-restored")),
        original,
        "SQLite, row by row"
    );
    drop(operator);
}

#[tokio::test]
async fn a_stream_that_fails_or_writes_nothing_fails_the_run_and_says_why() {
    if !parts_or_skip() || !engine_or_skip(&[store_image("sqlite").as_str()]) {
        return;
    }
    apply_crds();
    let namespace = TestNamespace::create("broken-streams");
    let ns = namespace.name.as_str();
    let client = client().await;
    let rest = RestServer::start(ns);
    secret(ns, "repository", &[("password", REPOSITORY_PASSWORD)]);
    let mut kubelet = Kubelet::new(client.clone(), ns);
    let operator = OperatorContainer::start(ns);
    let stream = |command: Value, allow_empty: bool| json!([{"name": "export", "image": store_image("sqlite"), "command": command, "allowEmpty": allow_empty}]);
    let failing = json!([
        "sh",
        "-c",
        "echo 'half the rows' ; echo 'cannot reach the store' >&2; exit 3"
    ]);
    apply(&plan(
        ns,
        "nightly",
        &rest.url("broken"),
        json!({"streams": stream(failing, false)}),
    ));

    // Each case's run, and the spec of the next: a stream that exits 0 without a byte, then
    // the same stream with an empty output allowed.
    let cases = [
        (
            "nightly-manual-1",
            "exit",
            "cannot reach the store",
            stream(json!(["true"]), false),
        ),
        (
            "nightly-manual-2",
            "wrote nothing",
            "allowEmpty",
            stream(json!(["true"]), true),
        ),
    ];
    for (job, what, detail, next) in cases {
        let backup = run(&mut kubelet, &client, ns, job).await;
        assert!(!succeeded(&backup), "{}", pod_report(&backup));
        let status = recorded(ns, "nightly", job).await;
        let last = &status["lastRun"];
        assert_eq!(
            (&last["result"], &last["reason"]),
            (&json!("Failed"), &json!("StreamFailed")),
            "{status:#}"
        );
        let message = last["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("export") && message.contains(what) && message.contains(detail),
            "{message}"
        );
        assert!(
            last["snapshotId"].is_null(),
            "no snapshot of a failed stream: {status:#}"
        );
        patch_plan(
            ns,
            "nightly",
            &json!({"spec": {"manualTrigger": job, "streams": next}}),
        );
    }
    // An empty stream the plan allows: a snapshot, and the stream recorded with no bytes.
    let backup = run(&mut kubelet, &client, ns, "nightly-manual-3").await;
    assert!(succeeded(&backup), "{}", pod_report(&backup));
    let status = recorded(ns, "nightly", "nightly-manual-3").await;
    assert_eq!(status["lastRun"]["result"], "Succeeded", "{status:#}");
    assert_eq!(status["lastRun"]["streams"][0]["bytes"], 0, "{status:#}");
    drop(operator);
}

/// Merges `patch` into the plan.
fn patch_plan(namespace: &str, name: &str, patch: &Value) {
    kubectl(&[
        "patch",
        "backupplan",
        name,
        "-n",
        namespace,
        "--type",
        "merge",
        "-p",
        &patch.to_string(),
    ]);
}
