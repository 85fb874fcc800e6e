//! Databases through the CLI, against real servers started by the tests: PostgreSQL and MariaDB
//! dumped into a repository (a real rest-server, or a local folder), dropped, restored with
//! `restore --database`, and compared table by table (row counts and an ordered SHA-256 of every
//! table), with sequences, views, indexes, roles and users. Failures — wrong credentials, an
//! unreachable server, a dump killed halfway, a truncated dump — fail the run with the tool's own
//! message and leave the repository valid.

#[path = "support/databases.rs"]
mod databases_support;
mod drill;
mod support;

use databases_support::{write_script, MariaDb, Postgres, ADMIN, ADMIN_PASSWORD};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use support::sidecar::{bare_command, DatabaseRun, Run};
use support::RestServer;
use tempfile::TempDir;

/// Rows of the `orders` table of the big data set: about 190 bytes each in a dump, so the
/// PostgreSQL dump of every database is about 40 MB (`customers`, an eighth as many rows, adds a
/// tenth). The issue aims at
/// a few hundred MB; this keeps the suite to about a minute on two cores. Raise it to try more.
const ORDERS_ROWS: u64 = 200_000;

/// The password of the application role or user the data set creates.
const APP_PASSWORD: &str = "app-password-ü";

/// The repository password.
const REPO_PASSWORD: &str = "database test repository";

// ---------------------------------------------------------------------------------------------
// The sidecar
// ---------------------------------------------------------------------------------------------

/// The sidecar on one repository, with a work folder for its secrets and result files.
struct Sidecar {
    repo: String,
    work: TempDir,
    env: Vec<(String, OsString)>,
    /// Folders put first on the sidecar's PATH (the server's tools, fake tools).
    path_prefix: Vec<PathBuf>,
}

impl Sidecar {
    /// A fresh repository: on the rest-server when given, else in a local folder.
    fn init(rest: Option<&RestServer>) -> Sidecar {
        let work = tempfile::tempdir().unwrap();
        let password_file = work.path().join("repo-password");
        fs::write(&password_file, format!("{REPO_PASSWORD}\n")).unwrap();
        let mut env = vec![(
            "NEVERWIPED_PASSWORD_FILE".to_owned(),
            password_file.into_os_string(),
        )];
        let repo = match rest {
            Some(server) => {
                if let (Some(user), Some(password)) = (server.username(), server.password()) {
                    env.push(("NEVERWIPED_GATE_USERNAME".into(), user.into()));
                    env.push(("NEVERWIPED_GATE_PASSWORD".into(), password.into()));
                }
                format!("rest:{}", server.url())
            }
            None => work.path().join("repo").display().to_string(),
        };
        let sidecar = Sidecar {
            repo,
            work,
            env,
            path_prefix: Vec::new(),
        };
        sidecar.run(&["init"]).expect_ok();
        sidecar
    }

    fn command(&self) -> Command {
        let mut command = bare_command();
        command
            .arg("--repo")
            .arg(&self.repo)
            .arg("--log-format=json");
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if !self.path_prefix.is_empty() {
            let mut paths = self.path_prefix.clone();
            paths.extend(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            ));
            command.env("PATH", std::env::join_paths(paths).unwrap());
        }
        command
    }

    /// Runs the sidecar with `args` and a result file; `extra_env` on top of the usual.
    fn run_with(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Run {
        let result_file = self
            .work
            .path()
            .join(format!("result-{}.json", rand::random::<u64>()));
        let mut command = self.command();
        command.arg("--result-file").arg(&result_file).args(args);
        for (name, value) in extra_env {
            command.env(name, value);
        }
        let output = command.output().expect("start neverwiped-sidecar");
        Run::from_output(output, Some(&result_file))
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[])
    }

    /// A password file for a database, as `NAME=PATH` for `--database-password-file`.
    fn password_file(&self, name: &str, password: &str) -> String {
        let path = self.work.path().join(format!("db-password-{name}"));
        fs::write(&path, format!("{password}\n")).unwrap();
        format!("{name}={}", path.display())
    }

    fn snapshot_count(&self) -> usize {
        let run = self.run(&["--json", "snapshots"]).expect_ok();
        serde_json::from_str::<Vec<serde_json::Value>>(&run.stdout)
            .unwrap()
            .len()
    }

    /// `check`: the repository's structure is sound.
    fn check(&self) {
        self.run(&["check"]).expect_ok();
    }
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let value = f();
    println!("{what}: {:.1}s", started.elapsed().as_secs_f64());
    value
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL data set and state
// ---------------------------------------------------------------------------------------------

/// What the newest snapshot records of its database entries (`snapshots --json`).
fn recorded_databases(sidecar: &Sidecar) -> Vec<serde_json::Value> {
    let listed = sidecar.run(&["snapshots", "--json"]).expect_ok();
    let snapshots: Vec<serde_json::Value> = serde_json::from_str(&listed.stdout).unwrap();
    let newest = snapshots.last().expect("a snapshot");
    newest["sources"]["databases"]
        .as_array()
        .unwrap_or_else(|| panic!("no databases recorded: {newest}"))
        .clone()
}

/// Checks the rows the snapshot records per table (counted from the dump) against the server's
/// own `count(*)`, and that every table of the databases the entry lists is recorded.
fn assert_recorded_rows(
    recorded: &serde_json::Value,
    tables_of: impl Fn(&str) -> Vec<String>,
    rows_of: impl Fn(&str, &str) -> u64,
) {
    let tables = recorded["tables"]
        .as_array()
        .unwrap_or_else(|| panic!("no tables recorded: {recorded}"));
    let mut seen = std::collections::BTreeSet::new();
    for table in tables {
        let (database, name) = (
            table["database"].as_str().unwrap(),
            table["table"].as_str().unwrap(),
        );
        assert_eq!(
            table["rows"].as_u64(),
            Some(rows_of(database, name)),
            "the rows of {database} {name}"
        );
        seen.insert((database.to_owned(), name.to_owned()));
    }
    for database in recorded["databases"].as_array().unwrap() {
        let database = database.as_str().unwrap();
        for table in tables_of(database) {
            assert!(
                seen.contains(&(database.to_owned(), table.clone())),
                "{database} {table} is not recorded: {recorded}"
            );
        }
    }
}

/// The rows the newest snapshot recorded for entry `recorded`, checked in `uri`'s server by the
/// drill's check ([`neverwiped::dump::row_check`]): the mismatches, as text.
fn row_mismatches(recorded: &serde_json::Value, uri: &str, password: &str) -> Vec<String> {
    let tables: Vec<neverwiped_contract::record::RecordedTable> =
        serde_json::from_value(recorded["tables"].clone()).expect("recorded tables");
    let target = neverwiped::dump::DatabaseTarget::new(
        "check",
        neverwiped::dump::DatabaseUri::parse(uri).unwrap(),
        Some(zeroize::Zeroizing::new(password.to_owned())),
    )
    .unwrap();
    let mismatches = neverwiped::dump::row_check::check_rows(&target, &tables, None);
    mismatches.iter().map(ToString::to_string).collect()
}

fn postgres_tables(server: &Postgres, database: &str) -> Vec<String> {
    let listed = server.psql(
        database,
        "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables \
         WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1",
    );
    listed.lines().map(str::to_owned).collect()
}

fn postgres_rows(server: &Postgres, database: &str, table: &str) -> u64 {
    let counted = server.psql(database, &format!("SELECT count(*) FROM {table}"));
    counted.trim().parse().unwrap()
}

fn mariadb_tables(server: &MariaDb, database: &str) -> Vec<String> {
    let listed = server.root_sql(&format!(
        "SELECT CONCAT('`', REPLACE(table_name, '`', '``'), '`') FROM information_schema.tables \
         WHERE table_schema = '{database}' AND table_type = 'BASE TABLE' ORDER BY 1"
    ));
    listed.lines().map(str::to_owned).collect()
}

fn mariadb_rows(server: &MariaDb, database: &str, table: &str) -> u64 {
    let counted = server.root_sql(&format!("SELECT count(*) FROM `{database}`.{table}"));
    counted.trim().parse().unwrap()
}

/// Two databases owned by an application role: `shop` with tables, indexes, a foreign key, a
/// sequence, a view, non-ASCII text and `orders` rows; `inventory`, small. Deterministic, so
/// that a second dump of it is the same bytes.
fn create_postgres_data(server: &Postgres, orders: u64) {
    let customers = (orders / 8).max(10);
    server.psql(
        "postgres",
        &format!(
            "CREATE ROLE app LOGIN PASSWORD '{APP_PASSWORD}'; CREATE ROLE reporting NOLOGIN; GRANT reporting TO app; \
             CREATE ROLE \"Ops Team\" LOGIN CONNECTION LIMIT 3 PASSWORD 'ops';"
        ),
    );
    server.psql("postgres", "CREATE DATABASE shop OWNER app");
    server.psql("postgres", "CREATE DATABASE inventory OWNER app");
    server.psql(
        "shop",
        &format!(
            "SET ROLE app;
             CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, city text NOT NULL, note text);
             CREATE INDEX customers_city ON customers (city);
             CREATE TABLE orders (id bigserial PRIMARY KEY, customer_id bigint NOT NULL REFERENCES customers (id),
                                  amount numeric(12,2) NOT NULL, ordered_at timestamptz NOT NULL, payload text);
             CREATE INDEX orders_customer ON orders (customer_id, ordered_at);
             CREATE SEQUENCE invoice_numbers START 1000 INCREMENT 7;
             SELECT setval('invoice_numbers', 424242);
             CREATE VIEW big_customers AS
               SELECT c.id, c.name, sum(o.amount) AS total FROM customers c JOIN orders o ON o.customer_id = c.id
               GROUP BY c.id, c.name HAVING sum(o.amount) > 1000;
             GRANT SELECT ON big_customers TO reporting;
             INSERT INTO customers
               SELECT i, 'Zoë Ångström ' || i || ' — 東京 ' || md5(i::text),
                      (ARRAY['Köln', 'Łódź', 'São Paulo', 'Αθήνα', 'Москва'])[1 + i % 5], repeat(md5(i::text || 'n'), 3)
               FROM generate_series(1, {customers}) i;
             INSERT INTO orders (customer_id, amount, ordered_at, payload)
               SELECT 1 + i % {customers}, (i % 100000) / 100.0, timestamptz '2024-01-01 00:00+00' + i * interval '1 minute',
                      repeat(md5(i::text), 4)
               FROM generate_series(1, {orders}) i;"
        ),
    );
    server.psql(
        "inventory",
        "SET ROLE app;
         CREATE TABLE items (sku text PRIMARY KEY, label text NOT NULL, stock integer NOT NULL DEFAULT 0);
         INSERT INTO items SELECT 'SKU-' || i, 'Größe ' || i, i * 3 FROM generate_series(1, 500) i;",
    );
}

/// Everything a restore must give back, as (what, value) pairs to compare.
fn postgres_state(server: &Postgres) -> Vec<(String, String)> {
    let mut state = Vec::new();
    let mut add = |key: String, value: String| state.push((key, value));
    add(
        "databases".into(),
        server.psql(
            "postgres",
            "SELECT datname, pg_get_userbyid(datdba), pg_encoding_to_char(encoding) FROM pg_database \
             WHERE datname NOT IN ('template0', 'template1', 'postgres') ORDER BY 1",
        ),
    );
    add(
        "roles".into(),
        server.psql(
            "postgres",
            "SELECT rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, rolbypassrls, \
             rolconnlimit FROM pg_roles WHERE rolname !~ '^pg_' ORDER BY 1",
        ),
    );
    add(
        "memberships".into(),
        server.psql(
            "postgres",
            "SELECT r.rolname, m.rolname FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid \
             JOIN pg_roles m ON m.oid = a.member ORDER BY 1, 2",
        ),
    );
    let databases = server.psql(
        "postgres",
        "SELECT datname FROM pg_database WHERE datname NOT IN ('template0', 'template1', 'postgres') ORDER BY 1",
    );
    for database in databases.lines() {
        let tables = server.psql(
            database,
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
        );
        for table in tables.lines() {
            let (hash, rows) = server.hash_query(
                database,
                &format!("SELECT * FROM public.\"{table}\" ORDER BY 1"),
            );
            add(format!("{database}.{table} rows"), rows.to_string());
            add(format!("{database}.{table} sha256"), hash);
        }
        for (what, sql) in [
            ("tables", "SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"),
            ("indexes", "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"),
            (
                "sequences",
                "SELECT sequencename, last_value, start_value, increment_by FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1",
            ),
            ("views", "SELECT viewname, viewowner, definition FROM pg_views WHERE schemaname = 'public' ORDER BY 1"),
            (
                "grants",
                "SELECT table_name, grantee, privilege_type FROM information_schema.role_table_grants \
                 WHERE table_schema = 'public' ORDER BY 1, 2, 3",
            ),
            (
                "constraints",
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1",
            ),
        ] {
            add(format!("{database} {what}"), server.psql(database, sql));
        }
    }
    state
}

#[track_caller]
fn assert_same_state(before: &[(String, String)], after: &[(String, String)]) {
    let keys = |s: &[(String, String)]| s.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(
        keys(before),
        keys(after),
        "the same databases, tables and objects"
    );
    for ((key, expected), (_, actual)) in before.iter().zip(after) {
        assert_eq!(expected, actual, "{key} differs after the restore");
    }
}

fn value<'a>(state: &'a [(String, String)], key: &str) -> &'a str {
    &state
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in the state"))
        .1
}

fn drop_postgres_data(server: &Postgres) {
    server.psql("postgres", "DROP DATABASE shop WITH (FORCE)");
    server.psql("postgres", "DROP DATABASE inventory WITH (FORCE)");
    server.psql(
        "postgres",
        "DROP ROLE app; DROP ROLE reporting; DROP ROLE \"Ops Team\";",
    );
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------------

#[test]
fn postgres_every_database_and_role_comes_back_after_a_drop_through_rest_server() {
    let test = "postgres_every_database_and_role_comes_back_after_a_drop_through_rest_server";
    let Some(server) = Postgres::start(test) else {
        return;
    };
    let Some(rest) = RestServer::start_with_login(test) else {
        return;
    };
    timed("creating the PostgreSQL data set", || {
        create_postgres_data(&server, ORDERS_ROWS)
    });
    let mut sidecar = Sidecar::init(Some(&rest));
    sidecar.path_prefix.push(server.bin_dir().to_path_buf());
    let uri = server.uri(None);
    let database = format!("main={uri}");
    let env = [("NEVERWIPED_DB_PASSWORD_MAIN", ADMIN_PASSWORD)];

    let first = timed("first backup", || {
        sidecar.run_with(&["backup", "--database", &database], &env)
    })
    .expect_ok();
    let result = first.result();
    assert_eq!(result.databases.len(), 1, "{result:?}");
    let dump = &result.databases[0];
    assert_eq!((dump.name.as_str(), dump.error.as_deref()), ("main", None));
    assert!(
        dump.dump_bytes > ORDERS_ROWS * 150,
        "a dump of {} bytes is too small",
        dump.dump_bytes
    );
    assert_eq!(result.bytes_read, dump.dump_bytes);
    // The snapshot records the server's engine, version and databases, for a restore elsewhere.
    let recorded = &recorded_databases(&sidecar)[0];
    assert_eq!(
        (recorded["name"].as_str(), recorded["engine"].as_str()),
        (Some("main"), Some("postgresql"))
    );
    let version = recorded["serverVersion"].as_str().unwrap();
    assert!(
        !version.is_empty()
            && server
                .psql("postgres", "SHOW server_version")
                .contains(version)
    );
    let databases = recorded["databases"].as_array().unwrap();
    for database in ["inventory", "postgres", "shop"] {
        assert!(databases.contains(&database.into()), "{recorded}");
    }
    assert!(!databases.contains(&"template1".into()), "{recorded}");
    assert_recorded_rows(
        recorded,
        |database| postgres_tables(&server, database),
        |database, table| postgres_rows(&server, database, table),
    );
    assert!(
        recorded["tables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["table"] == "public.orders"
                && t["database"] == "shop"
                && t["rows"] == ORDERS_ROWS),
        "{recorded}"
    );
    println!(
        "dump: {} bytes, {} added",
        dump.dump_bytes, result.bytes_added
    );
    assert!(result.bytes_added < dump.dump_bytes, "plain SQL compresses");

    let ls = sidecar
        .run(&["ls", "--recursive", "latest", "/databases"])
        .expect_ok();
    assert!(
        ls.stdout
            .contains(&format!("{:>12}  /databases/main/all.sql", dump.dump_bytes)),
        "{}",
        ls.stdout
    );

    // The same database again: the dump deduplicates against the first one.
    let second = timed("second backup", || {
        sidecar.run_with(&["backup", "--database", &database], &env)
    })
    .expect_ok();
    let again = second.result();
    assert_eq!(again.databases[0].dump_bytes, dump.dump_bytes);
    println!(
        "second dump added {} bytes of {} (the first added {})",
        again.bytes_added, dump.dump_bytes, result.bytes_added
    );
    assert!(again.bytes_added * 5 < result.bytes_added, "{again:?}");
    assert!(
        again.bytes_added * 10 < dump.dump_bytes,
        "an unchanged database added {} bytes of a {}-byte dump",
        again.bytes_added,
        dump.dump_bytes
    );

    let before = timed("reading the state", || postgres_state(&server));
    assert_eq!(value(&before, "shop.orders rows"), ORDERS_ROWS.to_string());
    assert!(value(&before, "shop views").contains("big_customers"));
    assert!(
        value(&before, "shop sequences").contains("invoice_numbers|424242|1000|7"),
        "{before:?}"
    );
    drop_postgres_data(&server);

    let restore = ["restore", "latest", "--database", &database];
    let restored = timed("restore after the drop", || {
        sidecar.run_with(&restore, &env)
    })
    .expect_ok();
    assert!(
        restored.stdout.contains("restored /databases/main/all.sql"),
        "{}",
        restored.stdout
    );
    let restored_result = restored.result();
    assert_eq!(restored_result.databases[0].dump_bytes, dump.dump_bytes);
    assert_eq!(restored_result.databases[0].error, None);
    assert_same_state(&before, &postgres_state(&server));
    // The drill's check of the loaded dump: every recorded table holds its rows; one row gone
    // is named.
    let recorded = &recorded_databases(&sidecar)[0];
    assert_eq!(
        row_mismatches(recorded, &uri, ADMIN_PASSWORD),
        Vec::<String>::new()
    );
    server.psql(
        "shop",
        "DELETE FROM orders WHERE id = (SELECT max(id) FROM orders)",
    );
    assert_eq!(
        row_mismatches(recorded, &uri, ADMIN_PASSWORD),
        [format!(
            "shop public.orders: {} rows, the dump held {ORDERS_ROWS}",
            ORDERS_ROWS - 1
        )]
    );
    // The roles came back with their passwords; the administrator's is still the target's.
    let count = server
        .psql_as(
            "app",
            APP_PASSWORD,
            "shop",
            "SELECT count(*) FROM big_customers",
        )
        .unwrap();
    assert!(count.trim().parse::<u64>().unwrap() > 0);
    server
        .psql_as(ADMIN, ADMIN_PASSWORD, "postgres", "SELECT 1")
        .unwrap();

    // Into a server that holds databases: refused, naming them and the way to force it.
    let refused = sidecar.run_with(&restore, &env);
    let error = refused.error();
    for expected in [
        "is not empty",
        "database inventory",
        "database shop",
        "--overwrite-databases",
    ] {
        assert!(error.contains(expected), "{expected:?} not in: {error}");
    }
    assert_eq!(
        refused.result().databases[0]
            .error
            .as_deref()
            .map(|e| e.contains("is not empty")),
        Some(true)
    );

    // Forced: the changed target is replaced by the dump.
    server.psql(
        "shop",
        "DELETE FROM orders WHERE id % 2 = 0; CREATE TABLE stray (x int);",
    );
    let mut forced = restore.to_vec();
    forced.push("--overwrite-databases");
    timed("restore over existing databases", || {
        sidecar.run_with(&forced, &env)
    })
    .expect_ok();
    assert_same_state(&before, &postgres_state(&server));

    // The dump can still be written out as a file for a person to read.
    let target = tempfile::tempdir().unwrap();
    let target_text = target.path().to_str().unwrap();
    sidecar
        .run(&[
            "restore",
            "latest",
            "--target",
            target_text,
            "--include",
            "/databases/main",
        ])
        .expect_ok();
    let file = fs::read(target.path().join("databases/main/all.sql")).unwrap();
    assert_eq!(file.len() as u64, dump.dump_bytes);
    let tail = String::from_utf8_lossy(&file[file.len() - 300..]).into_owned();
    assert!(
        tail.contains("-- PostgreSQL database cluster dump complete"),
        "{tail}"
    );
    sidecar.check();
}

#[test]
fn postgres_one_database_restores_under_its_own_name_or_another() {
    let test = "postgres_one_database_restores_under_its_own_name_or_another";
    let Some(server) = Postgres::start(test) else {
        return;
    };
    create_postgres_data(&server, 5_000);
    let mut sidecar = Sidecar::init(None);
    sidecar.path_prefix.push(server.bin_dir().to_path_buf());
    let password_file = sidecar.password_file("shop-db", ADMIN_PASSWORD);
    let database = format!("shop-db={}", server.uri(Some("shop")));
    let run = sidecar
        .run(
            &DatabaseRun::backup()
                .database(&database, &password_file)
                .args()[..],
        )
        .expect_ok();
    assert_eq!(run.result().databases[0].name, "shop-db/shop");
    assert_eq!(
        recorded_databases(&sidecar)[0]["databases"],
        serde_json::json!(["shop"])
    );
    let ls = sidecar.run(&["ls", "latest"]).expect_ok();
    assert!(
        ls.stdout.contains("/databases/shop-db/shop.sql"),
        "{}",
        ls.stdout
    );

    let before = postgres_state(&server);
    let shop_only = |state: &[(String, String)]| -> Vec<(String, String)> {
        state
            .iter()
            .filter(|(k, _)| k.starts_with("shop"))
            .cloned()
            .collect()
    };
    // A one-database dump holds the contents, not the database: created empty beforehand, the
    // database keeps the owner it was given.
    server.psql("postgres", "DROP DATABASE shop WITH (FORCE)");
    server.psql("postgres", "CREATE DATABASE shop OWNER app");
    let restore_run = DatabaseRun::restore("latest").database(&database, &password_file);
    let restore = restore_run.args();
    sidecar.run(&restore).expect_ok();
    assert_same_state(&before, &postgres_state(&server));

    // Refused over a database that holds objects; named in the message.
    let error = sidecar.run(&restore).error();
    assert!(
        error.contains("database shop (not empty)") && error.contains("--overwrite-databases"),
        "{error}"
    );

    // Under another name: a copy beside the original, with the same contents.
    let copy = format!("shop-db={}", server.uri(Some("shop_copy")));
    let renamed = sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&copy, &password_file)
                .args()[..],
        )
        .expect_ok();
    assert!(
        renamed
            .stdout
            .contains("(the dump of database shop, restored under the name shop_copy)"),
        "the output says the dump went in under another name: {}",
        renamed.stdout
    );
    let after = postgres_state(&server);
    let copied: Vec<(String, String)> = after
        .iter()
        .filter(|(k, _)| k.starts_with("shop_copy"))
        .map(|(k, v)| (k.replacen("shop_copy", "shop", 1), v.clone()))
        .collect();
    assert_same_state(&shop_only(&before), &copied);

    // A whole-server URI is not a place for a one-database dump and vice versa.
    let uri_all = format!("shop-db={}", server.uri(None));
    let wrong_engine = format!("shop-db=mariadb://{ADMIN}@127.0.0.1:{}", server.port());
    let error = sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&wrong_engine, &password_file)
                .args()[..],
        )
        .error();
    assert!(
        error.contains("is a PostgreSQL dump: it cannot be restored into mariadb://"),
        "{error}"
    );
    let run = sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&uri_all, &password_file)
                .arg("--overwrite-databases")
                .args()[..],
        )
        .expect_ok();
    let expected = format!("into {}: ", server.uri(Some("shop")));
    assert!(
        run.stdout.contains(&expected),
        "restored into the database of its file name: {}",
        run.stdout
    );
    let after: Vec<(String, String)> = postgres_state(&server)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("shop_copy"))
        .collect();
    assert_same_state(&shop_only(&before), &shop_only(&after));
}

#[test]
fn postgres_an_entry_of_chosen_databases_dumps_each_and_restores_them_all_or_one() {
    let test = "postgres_an_entry_of_chosen_databases_dumps_each_and_restores_them_all_or_one";
    let Some(server) = Postgres::start(test) else {
        return;
    };
    create_postgres_data(&server, 2_000);
    let mut sidecar = Sidecar::init(None);
    sidecar.path_prefix.push(server.bin_dir().to_path_buf());
    let password_file = sidecar.password_file("app", ADMIN_PASSWORD);
    // As the operator passes a plan entry with `databases: [shop, inventory]`.
    let shop = format!("app={}", server.uri(Some("shop")));
    let inventory = format!("app={}", server.uri(Some("inventory")));
    let run = sidecar
        .run(&[
            "backup",
            "--database",
            &shop,
            "--database",
            &inventory,
            "--database-password-file",
            &password_file,
        ])
        .expect_ok();
    let names: Vec<&str> = run
        .result()
        .databases
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["app/shop", "app/inventory"]);
    // Recorded once, with both databases.
    let recorded = recorded_databases(&sidecar);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(
        recorded[0]["databases"],
        serde_json::json!(["shop", "inventory"])
    );
    // Each dump's tables, in the database the URI names (pg_dump's script names none).
    assert_recorded_rows(
        &recorded[0],
        |database| postgres_tables(&server, database),
        |database, table| postgres_rows(&server, database, table),
    );
    assert!(run
        .result()
        .databases
        .iter()
        .all(|d| d.dump_bytes > 0 && d.error.is_none()));
    let ls = sidecar.run(&["ls", "latest"]).expect_ok();
    for path in ["/databases/app/shop.sql", "/databases/app/inventory.sql"] {
        assert!(ls.stdout.contains(path), "{path}: {}", ls.stdout);
    }

    // Both come back into a server URI without a database name, each under its own name.
    let before = postgres_state(&server);
    let ours = |state: &[(String, String)]| -> Vec<(String, String)> {
        state
            .iter()
            .filter(|(k, _)| k.starts_with("shop") || k.starts_with("inventory"))
            .cloned()
            .collect()
    };
    for database in ["shop", "inventory"] {
        server.psql(
            "postgres",
            &format!("DROP DATABASE {database} WITH (FORCE)"),
        );
        server.psql("postgres", &format!("CREATE DATABASE {database} OWNER app"));
    }
    let all = format!("app={}", server.uri(None));
    let run = sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&all, &password_file)
                .args()[..],
        )
        .expect_ok();
    assert_eq!(run.result().files, 2, "{}", run.stdout);
    assert_same_state(&ours(&before), &ours(&postgres_state(&server)));

    // One of them, chosen by the URI's database name, over the existing one.
    let run = sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&inventory, &password_file)
                .arg("--overwrite-database")
                .arg("app")
                .args()[..],
        )
        .expect_ok();
    assert_eq!(run.result().files, 1, "{}", run.stdout);
    assert_same_state(&ours(&before), &ours(&postgres_state(&server)));
    let missing = format!("app={}", server.uri(Some("billing")));
    let error = sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&missing, &password_file)
                .args()[..],
        )
        .error();
    assert!(
        error.contains("holds dumps of inventory, shop, not of billing"),
        "{error}"
    );
}

#[test]
fn postgres_failures_fail_the_run_with_the_tools_message_and_leave_the_repository_valid() {
    let test =
        "postgres_failures_fail_the_run_with_the_tools_message_and_leave_the_repository_valid";
    let Some(server) = Postgres::start(test) else {
        return;
    };
    create_postgres_data(&server, 20_000);
    let mut sidecar = Sidecar::init(None);
    sidecar.path_prefix.push(server.bin_dir().to_path_buf());
    let database = format!("main={}", server.uri(None));
    let good = [("NEVERWIPED_DB_PASSWORD_MAIN", ADMIN_PASSWORD)];
    let backup = ["backup", "--database", &database];

    // Wrong credentials.
    let run = sidecar.run_with(
        &backup,
        &[("NEVERWIPED_DB_PASSWORD_MAIN", "not the password")],
    );
    let error = run.error();
    assert!(
        error.contains(&format!(
            "password authentication failed for user \"{ADMIN}\""
        )),
        "{error}"
    );
    assert!(
        error.contains("pg_dumpall failed (exit status 1)"),
        "{error}"
    );
    let db_error = run.result().databases[0].error.clone().unwrap();
    assert!(
        db_error.starts_with("pg_dumpall failed")
            && db_error.contains("password authentication failed"),
        "{db_error}"
    );
    assert_eq!(run.result().snapshot_id, None);

    // Nobody listening.
    let closed = format!(
        "main=postgresql://{ADMIN}@127.0.0.1:{}",
        databases_support::free_port()
    );
    let error = sidecar
        .run_with(&["backup", "--database", &closed], &good)
        .error();
    assert!(error.contains("Connection refused"), "{error}");

    // Killed halfway: a pg_dumpall that runs the real one and is killed after 1 MB of output.
    let fakes = sidecar.work.path().join("fake-bin");
    fs::create_dir(&fakes).unwrap();
    let real = server.bin_dir().join("pg_dumpall");
    write_script(
        &fakes.join("pg_dumpall"),
        &format!(
            "#!/bin/sh\n\"{}\" \"$@\" | head -c 1000000\nkill -KILL $$\n",
            real.display()
        ),
    );
    let mut killed = Sidecar {
        repo: sidecar.repo.clone(),
        work: tempfile::tempdir().unwrap(),
        env: sidecar.env.clone(),
        path_prefix: vec![fakes.clone()],
    };
    killed.path_prefix.push(server.bin_dir().to_path_buf());
    let run = killed.run_with(&backup, &good);
    let error = run.error();
    assert!(
        error.contains("pg_dumpall was killed by signal 9 (SIGKILL)"),
        "{error}"
    );
    let db = &run.result().databases[0];
    assert_eq!(db.dump_bytes, 1_000_000, "{db:?}");

    // Truncated but exiting 0: only the completion line tells.
    write_script(
        &fakes.join("pg_dumpall"),
        &format!(
            "#!/bin/sh\n\"{}\" \"$@\" | head -c 1000000\nexit 0\n",
            real.display()
        ),
    );
    let error = killed.run_with(&backup, &good).error();
    assert!(
        error.contains("pg_dumpall exited successfully but its output ends without the line `-- PostgreSQL database cluster dump complete`"),
        "{error}"
    );

    // None of it left a snapshot, and the repository is fine: a backup and a restore work.
    assert_eq!(sidecar.snapshot_count(), 0);
    sidecar.check();
    sidecar.run_with(&backup, &good).expect_ok();
    assert_eq!(sidecar.snapshot_count(), 1);
    sidecar.check();
    let before = postgres_state(&server);
    drop_postgres_data(&server);
    sidecar
        .run_with(&["restore", "latest", "--database", &database], &good)
        .expect_ok();
    assert_same_state(&before, &postgres_state(&server));

    // A restore with a wrong password fails with psql's message.
    let error = sidecar
        .run_with(
            &[
                "restore",
                "latest",
                "--database",
                &database,
                "--overwrite-databases",
            ],
            &[("NEVERWIPED_DB_PASSWORD_MAIN", "wrong")],
        )
        .error();
    assert!(error.contains("password authentication failed"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// MariaDB data set and state
// ---------------------------------------------------------------------------------------------

fn create_mariadb_data(server: &MariaDb, orders: u64) {
    let customers = (orders / 8).max(10);
    server.root_sql(&format!(
        "CREATE DATABASE shop CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
         USE shop;
         CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(200) NOT NULL, city VARCHAR(50) NOT NULL, note TEXT,
                                 KEY customers_city (city)) ENGINE=InnoDB;
         CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL,
                              ordered_at DATETIME NOT NULL, payload TEXT, KEY orders_customer (customer_id, ordered_at),
                              CONSTRAINT orders_customer_fk FOREIGN KEY (customer_id) REFERENCES customers (id)) ENGINE=InnoDB;
         CREATE SEQUENCE invoice_numbers START WITH 1000 INCREMENT BY 7;
         SELECT SETVAL(invoice_numbers, 424242);
         CREATE VIEW big_customers AS SELECT c.id, c.name, SUM(o.amount) AS total FROM customers c
           JOIN orders o ON o.customer_id = c.id GROUP BY c.id, c.name HAVING SUM(o.amount) > 1000;
         INSERT INTO customers SELECT seq, CONCAT('Zoë Ångström ', seq, ' — 東京 ', MD5(seq)),
           ELT(1 + seq % 5, 'Köln', 'Łódź', 'São Paulo', 'Αθήνα', 'Москва'), REPEAT(MD5(CONCAT(seq, 'n')), 3)
           FROM seq_1_to_{customers};
         INSERT INTO orders (customer_id, amount, ordered_at, payload)
           SELECT 1 + seq % {customers}, (seq % 100000) / 100, '2024-01-01' + INTERVAL seq MINUTE, REPEAT(MD5(seq), 4)
           FROM seq_1_to_{orders};
         CREATE TRIGGER orders_positive BEFORE INSERT ON orders FOR EACH ROW SET NEW.amount = ABS(NEW.amount);
         CREATE PROCEDURE count_orders(OUT n BIGINT) SELECT COUNT(*) INTO n FROM orders;
         CREATE DATABASE inventory;
         CREATE TABLE inventory.items (sku VARCHAR(20) PRIMARY KEY, label VARCHAR(100) NOT NULL, stock INT NOT NULL DEFAULT 0);
         INSERT INTO inventory.items SELECT CONCAT('SKU-', seq), CONCAT('Größe ', seq), seq * 3 FROM seq_1_to_500;
         CREATE ROLE reader; GRANT SELECT ON shop.* TO reader;
         CREATE USER 'app'@'%' IDENTIFIED BY '{APP_PASSWORD}'; GRANT reader TO 'app'@'%'; SET DEFAULT ROLE reader FOR 'app'@'%';
         GRANT INSERT ON shop.orders TO 'app'@'%';"
    ));
}

fn mariadb_state(server: &MariaDb) -> Vec<(String, String)> {
    let mut state = Vec::new();
    let system = "('mysql', 'information_schema', 'performance_schema', 'sys')";
    let databases = server.root_sql(&format!(
        "SELECT schema_name, default_character_set_name, default_collation_name FROM information_schema.schemata \
         WHERE schema_name NOT IN {system} ORDER BY 1"
    ));
    state.push(("databases".to_owned(), databases.clone()));
    state.push((
        "users".to_owned(),
        server.root_sql(
            "SELECT user, host, plugin, authentication_string, is_role, default_role FROM mysql.user \
             WHERE user IN ('app', 'reader', 'admin') ORDER BY 1, 2",
        ),
    ));
    state.push((
        "grants app".to_owned(),
        server.root_sql("SHOW GRANTS FOR 'app'@'%'"),
    ));
    state.push((
        "grants reader".to_owned(),
        server.root_sql("SHOW GRANTS FOR reader"),
    ));
    for line in databases.lines() {
        let database = line.split('\t').next().unwrap();
        let tables = server.root_sql(&format!(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = '{database}' AND table_type = 'BASE TABLE' ORDER BY 1"
        ));
        for table in tables.lines() {
            let (hash, rows) =
                server.hash_query(&format!("SELECT * FROM `{database}`.`{table}` ORDER BY 1"));
            state.push((format!("{database}.{table} rows"), rows.to_string()));
            state.push((format!("{database}.{table} sha256"), hash));
        }
        for (what, sql) in [
            ("tables", "SELECT table_name, table_type, engine, auto_increment, table_collation FROM information_schema.tables WHERE table_schema = '{db}' ORDER BY 1"),
            ("indexes", "SELECT table_name, index_name, seq_in_index, column_name, non_unique FROM information_schema.statistics WHERE table_schema = '{db}' ORDER BY 1, 2, 3"),
            ("views", "SELECT table_name, view_definition FROM information_schema.views WHERE table_schema = '{db}' ORDER BY 1"),
            ("routines", "SELECT routine_name, routine_type, routine_definition FROM information_schema.routines WHERE routine_schema = '{db}' ORDER BY 1"),
            ("triggers", "SELECT trigger_name, action_statement FROM information_schema.triggers WHERE trigger_schema = '{db}' ORDER BY 1"),
            ("constraints", "SELECT constraint_name, table_name, referenced_table_name FROM information_schema.referential_constraints WHERE constraint_schema = '{db}' ORDER BY 1"),
        ] {
            state.push((format!("{database} {what}"), server.root_sql(&sql.replace("{db}", database))));
        }
        if database == "shop" {
            state.push((
                "shop sequence".to_owned(),
                server.root_sql("SELECT next_not_cached_value, minimum_value, increment FROM shop.invoice_numbers"),
            ));
        }
    }
    state
}

fn drop_mariadb_data(server: &MariaDb) {
    server.root_sql(
        "DROP DATABASE shop; DROP DATABASE inventory; DROP USER 'app'@'%'; DROP ROLE reader;",
    );
}

// ---------------------------------------------------------------------------------------------
// MariaDB
// ---------------------------------------------------------------------------------------------

#[test]
fn mariadb_every_database_and_user_comes_back_after_a_drop() {
    let test = "mariadb_every_database_and_user_comes_back_after_a_drop";
    let Some(server) = MariaDb::start(test) else {
        return;
    };
    let orders = ORDERS_ROWS / 2;
    timed("creating the MariaDB data set", || {
        create_mariadb_data(&server, orders)
    });
    let sidecar = Sidecar::init(None);
    let password_file = sidecar.password_file("maria", ADMIN_PASSWORD);
    let database = format!("maria={}", server.uri(None));
    let backup_run = DatabaseRun::backup().database(&database, &password_file);
    let backup = backup_run.args();

    let first = timed("first backup", || sidecar.run(&backup)).expect_ok();
    let dump = first.result().databases[0].clone();
    assert_eq!((dump.name.as_str(), dump.error.as_deref()), ("maria", None));
    assert!(dump.dump_bytes > orders * 150, "{dump:?}");
    let recorded = &recorded_databases(&sidecar)[0];
    assert_eq!(recorded["engine"], "mariadb");
    let version = recorded["serverVersion"].as_str().unwrap();
    assert!(!version.is_empty() && server.root_sql("SELECT VERSION()").contains(version));
    assert!(
        recorded["databases"]
            .as_array()
            .unwrap()
            .contains(&"shop".into()),
        "{recorded}"
    );
    assert_recorded_rows(
        recorded,
        |database| mariadb_tables(&server, database),
        |database, table| mariadb_rows(&server, database, table),
    );
    assert!(
        recorded["tables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["table"] == "`orders`" && t["database"] == "shop" && t["rows"] == orders),
        "{recorded}"
    );
    let second = timed("second backup", || sidecar.run(&backup)).expect_ok();
    println!(
        "dump: {} bytes; second backup added {}",
        dump.dump_bytes,
        second.result().bytes_added
    );
    assert!(
        second.result().bytes_added * 10 < dump.dump_bytes,
        "{:?}",
        second.result()
    );

    let before = timed("reading the state", || mariadb_state(&server));
    assert_eq!(value(&before, "shop.orders rows"), orders.to_string());
    assert!(value(&before, "users").contains("app\t%"), "{before:?}");
    drop_mariadb_data(&server);

    let restore_run = DatabaseRun::restore("latest").database(&database, &password_file);
    let restore = restore_run.args();
    timed("restore after the drop", || sidecar.run(&restore)).expect_ok();
    assert_same_state(&before, &mariadb_state(&server));
    let recorded = &recorded_databases(&sidecar)[0];
    let uri = server.uri(None);
    assert_eq!(
        row_mismatches(recorded, &uri, ADMIN_PASSWORD),
        Vec::<String>::new()
    );
    server.root_sql("DELETE FROM shop.orders ORDER BY id DESC LIMIT 2");
    assert_eq!(
        row_mismatches(recorded, &uri, ADMIN_PASSWORD),
        [format!(
            "shop `orders`: {} rows, the dump held {orders}",
            orders - 2
        )]
    );
    let count = server
        .sql_as(
            "app",
            APP_PASSWORD,
            "SELECT COUNT(*) FROM shop.big_customers",
        )
        .unwrap();
    assert!(
        count.trim().parse::<u64>().unwrap() > 0,
        "the app user logs in with its restored password and role"
    );
    server
        .sql_as(ADMIN, ADMIN_PASSWORD, "SELECT 1")
        .expect("the administrator's password is untouched");

    let error = sidecar.run(&restore).error();
    for expected in [
        "is not empty",
        "database inventory",
        "database shop",
        "--overwrite-databases",
    ] {
        assert!(error.contains(expected), "{expected:?} not in: {error}");
    }
    server.root_sql("DELETE FROM shop.orders WHERE id % 2 = 0; CREATE TABLE shop.stray (x INT);");
    let mut forced = restore.to_vec();
    forced.push("--overwrite-databases");
    timed("restore over existing databases", || sidecar.run(&forced)).expect_ok();
    assert_same_state(&before, &mariadb_state(&server));

    // One database, restored under another name.
    let one = format!("inv={}", server.uri(Some("inventory")));
    let inv_password = sidecar.password_file("inv", ADMIN_PASSWORD);
    sidecar
        .run(&DatabaseRun::backup().database(&one, &inv_password).args()[..])
        .expect_ok();
    let copy = format!("inv={}", server.uri(Some("inventory_copy")));
    sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&copy, &inv_password)
                .args()[..],
        )
        .expect_ok();
    let (original, copied) = (
        server.hash_query("SELECT * FROM inventory.items ORDER BY 1"),
        server.hash_query("SELECT * FROM inventory_copy.items ORDER BY 1"),
    );
    assert_eq!(original, copied);
    let error = sidecar
        .run(
            &DatabaseRun::restore("latest")
                .database(&one, &inv_password)
                .args()[..],
        )
        .error();
    assert!(error.contains("database inventory (not empty)"), "{error}");
    sidecar.check();
}

#[test]
fn mariadb_failures_fail_the_run_with_the_tools_message_and_leave_the_repository_valid() {
    let test =
        "mariadb_failures_fail_the_run_with_the_tools_message_and_leave_the_repository_valid";
    let Some(server) = MariaDb::start(test) else {
        return;
    };
    create_mariadb_data(&server, 2_000);
    let mut sidecar = Sidecar::init(None);
    let database = format!("maria={}", server.uri(None));
    let backup = ["backup", "--database", &database];
    let good = [("NEVERWIPED_DB_PASSWORD_MARIA", ADMIN_PASSWORD)];

    let run = sidecar.run_with(
        &backup,
        &[("NEVERWIPED_DB_PASSWORD_MARIA", "not the password")],
    );
    let error = run.error();
    assert!(
        error.contains(&format!("Access denied for user '{ADMIN}'")),
        "{error}"
    );
    assert!(run.result().databases[0]
        .error
        .as_deref()
        .unwrap()
        .contains("Access denied"));

    let closed = format!(
        "maria=mariadb://{ADMIN}@127.0.0.1:{}",
        databases_support::free_port()
    );
    let error = sidecar
        .run_with(&["backup", "--database", &closed], &good)
        .error();
    assert!(
        error.contains("Can't connect to server on '127.0.0.1'")
            || error.contains("Can't connect to MySQL server"),
        "{error}"
    );

    // A dump tool that stops early but exits 0.
    let fakes = sidecar.work.path().join("fake-bin");
    fs::create_dir(&fakes).unwrap();
    let real = databases_support::find_program("mariadb-dump", &[]).unwrap();
    write_script(
        &fakes.join("mariadb-dump"),
        &format!(
            "#!/bin/sh\n\"{}\" \"$@\" | head -c 100000\nexit 0\n",
            real.display()
        ),
    );
    sidecar.path_prefix.push(fakes);
    let error = sidecar.run_with(&backup, &good).error();
    assert!(error.contains("mariadb-dump exited successfully but its output ends without the line `-- Dump completed`"), "{error}");
    sidecar.path_prefix.clear();

    assert_eq!(sidecar.snapshot_count(), 0);
    sidecar.check();
    sidecar.run_with(&backup, &good).expect_ok();
    assert_eq!(sidecar.snapshot_count(), 1);
    let before = mariadb_state(&server);
    drop_mariadb_data(&server);
    sidecar
        .run_with(&["restore", "latest", "--database", &database], &good)
        .expect_ok();
    assert_same_state(&before, &mariadb_state(&server));
}

// ---------------------------------------------------------------------------------------------
// Without servers
// ---------------------------------------------------------------------------------------------

#[test]
fn a_password_in_the_uri_or_a_stray_password_file_is_refused_before_anything_runs() {
    let sidecar = Sidecar::init(None);
    let run = sidecar.run(&[
        "backup",
        "--database",
        "main=postgresql://admin:hunter2@db.example.com/shop",
    ]);
    let error = run.error();
    assert!(error.contains("the URI holds a password"), "{error}");
    assert!(
        error.contains("NEVERWIPED_DB_PASSWORD_MAIN")
            && error.contains("--database-password-file main=PATH"),
        "{error}"
    );
    assert!(
        !error.contains("hunter2") && !run.stderr.contains("hunter2"),
        "the password is never repeated"
    );

    let error = sidecar
        .run(&[
            "backup",
            "--database",
            "main=postgresql://a@h",
            "--database-password-file",
            "other=/nonexistent",
        ])
        .error();
    assert!(
        error.contains("--database-password-file names database other, which no --database gives"),
        "{error}"
    );
    let error = sidecar.run(&["backup", "--database", "main"]).error();
    assert!(error.contains("--database takes NAME=URI"), "{error}");
    let error = sidecar
        .run(&["backup", "--database", "../x=postgresql://a@h"])
        .error();
    assert!(
        error.contains("is not a database name for --database NAME=URI"),
        "{error}"
    );
    assert_eq!(sidecar.snapshot_count(), 0);
}

/// Passwords that would add a line to a PGPASSFILE or an option to a MariaDB option file if
/// their control characters reached it.
fn injecting_passwords() -> Vec<String> {
    vec![
        format!("{ADMIN_PASSWORD}\n*:*:*:*:other"),
        format!("{ADMIN_PASSWORD}\"\nport=1\n#"),
        format!("{ADMIN_PASSWORD}\r\nhost=localhost"),
        format!("{ADMIN_PASSWORD}\u{0b}ssl=0"),
        format!("{ADMIN_PASSWORD}\tx"),
    ]
}

/// Each injecting password, from the environment and from a file, is refused before any tool
/// runs against the real server at `uri`, and is never echoed.
fn assert_injecting_passwords_are_refused(sidecar: &Sidecar, uri: &str) {
    let database = format!("main={uri}");
    for password in injecting_passwords() {
        let from_env = sidecar.run_with(
            &["backup", "--database", &database],
            &[("NEVERWIPED_DB_PASSWORD_MAIN", password.as_str())],
        );
        let file = sidecar.password_file("main", &password);
        let from_file = sidecar.run(&DatabaseRun::backup().database(&database, &file).args()[..]);
        for run in [from_env, from_file] {
            let error = run.error();
            assert!(
                error.contains("the password of database main holds a control character"),
                "{password:?}: {error}"
            );
            assert!(
                !run.stderr.contains(ADMIN_PASSWORD) && !error.contains(ADMIN_PASSWORD),
                "the password is never repeated: {}",
                run.stderr
            );
            assert_eq!(run.result().snapshot_id, None);
        }
    }
    assert_eq!(sidecar.snapshot_count(), 0);
}

#[test]
fn postgres_a_control_character_in_the_password_cannot_add_a_line_to_the_pgpass_file() {
    let test = "postgres_a_control_character_in_the_password_cannot_add_a_line_to_the_pgpass_file";
    let Some(server) = Postgres::start(test) else {
        return;
    };
    let mut sidecar = Sidecar::init(None);
    sidecar.path_prefix.push(server.bin_dir().to_path_buf());
    assert_injecting_passwords_are_refused(&sidecar, &server.uri(None));
    // The same server with the plain password: the dump works, so the refusal above was the
    // password's doing.
    sidecar
        .run_with(
            &[
                "backup",
                "--database",
                &format!("main={}", server.uri(None)),
            ],
            &[("NEVERWIPED_DB_PASSWORD_MAIN", ADMIN_PASSWORD)],
        )
        .expect_ok();
}

#[test]
fn mariadb_a_control_character_in_the_password_cannot_add_an_option_to_the_option_file() {
    let test =
        "mariadb_a_control_character_in_the_password_cannot_add_an_option_to_the_option_file";
    let Some(server) = MariaDb::start(test) else {
        return;
    };
    let sidecar = Sidecar::init(None);
    assert_injecting_passwords_are_refused(&sidecar, &server.uri(None));
    sidecar
        .run_with(
            &[
                "backup",
                "--database",
                &format!("main={}", server.uri(None)),
            ],
            &[("NEVERWIPED_DB_PASSWORD_MAIN", ADMIN_PASSWORD)],
        )
        .expect_ok();
}

const HALF_A_DUMP: &str = "--\n-- PostgreSQL database cluster dump\n--\n\nCREATE ROLE admin;\n";

#[test]
fn a_backup_stopped_by_sigterm_mid_dump_reports_the_database_it_did_not_finish() {
    let mut sidecar = Sidecar::init(None);
    let fakes = sidecar.work.path().join("fake-bin");
    fs::create_dir(&fakes).unwrap();
    // The start of a dump, then a file that says so, then a trickle: the run is stopped while
    // the dump is running, and the fake tool ends at its first write after the sidecar is gone.
    let dumping = sidecar.work.path().join("dumping");
    write_script(
        &fakes.join("pg_dumpall"),
        &format!(
            "#!/bin/sh\nprintf -- '{}'\n: > '{}'\nwhile printf -- '--\\n'; do sleep 0.2; done\n",
            HALF_A_DUMP.replace('\n', "\\n"),
            dumping.display()
        ),
    );
    sidecar.path_prefix.push(fakes);
    let result_file = sidecar.work.path().join("stopped.json");
    let mut command = sidecar.command();
    command
        .args([
            "backup",
            "--database",
            "main=postgresql://admin@db.example.com:6000",
        ])
        .arg("--result-file")
        .arg(&result_file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().unwrap();
    // Wait until the dump has started (the tool wrote its first bytes), then stop the run.
    let started = Instant::now();
    while !dumping.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the backup ended ({status}) before the dump started");
        }
        assert!(
            started.elapsed().as_secs() < 60,
            "the dump did not start within a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stopped = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(stopped.elapsed().as_secs() < 30, "the run stopped at once");
    let result = support::sidecar::read_result(&result_file);
    assert!(result.error.unwrap().contains("stopped by SIGTERM"));
    assert_eq!(result.databases.len(), 1, "{:?}", result.databases);
    let database = &result.databases[0];
    assert_eq!(database.name, "main");
    assert!(
        database
            .error
            .as_deref()
            .is_some_and(|e| e.contains("not done")),
        "{database:?}"
    );
    assert_eq!(sidecar.snapshot_count(), 0);
}

#[test]
fn a_dump_tool_that_exits_0_without_its_completion_line_fails_the_backup() {
    let mut sidecar = Sidecar::init(None);
    let fakes = sidecar.work.path().join("fake-bin");
    fs::create_dir(&fakes).unwrap();
    // Half a dump, and the arguments and environment it was given for the checks below.
    let seen = sidecar.work.path().join("seen");
    write_script(
        &fakes.join("pg_dumpall"),
        &format!(
            "#!/bin/sh\necho \"$@\" > '{seen}.args'\nenv > '{seen}.env'\ncat \"$PGPASSFILE\" > '{seen}.pgpass'\n\
             printf -- '{}'\nexit 0\n",
            HALF_A_DUMP.replace('\n', "\\n"),
            seen = seen.display()
        ),
    );
    sidecar.path_prefix.push(fakes);
    let run = sidecar.run_with(
        &[
            "backup",
            "--database",
            "main=postgresql://admin@db.example.com:6000",
        ],
        &[
            ("NEVERWIPED_DB_PASSWORD_MAIN", "s3cr:et"),
            ("PGPASSWORD", "leaked"),
        ],
    );
    let error = run.error();
    assert!(
        error.contains("ends without the line `-- PostgreSQL database cluster dump complete`"),
        "{error}"
    );
    assert_eq!(
        run.result().databases[0].dump_bytes,
        HALF_A_DUMP.len() as u64
    );
    assert_eq!(sidecar.snapshot_count(), 0);

    // The password went through a private PGPASSFILE only: not in the arguments, not in the
    // environment, and the file is gone.
    let args = fs::read_to_string(seen.with_extension("args")).unwrap();
    assert_eq!(
        args.trim(),
        "--host=db.example.com --port=6000 --username=admin --no-password"
    );
    let env = fs::read_to_string(seen.with_extension("env")).unwrap();
    assert!(
        !env.contains("s3cr") && !env.contains("PGPASSWORD="),
        "{env}"
    );
    let pgpass_path = env
        .lines()
        .find_map(|l| l.strip_prefix("PGPASSFILE="))
        .expect("PGPASSFILE is set");
    assert_eq!(
        fs::read_to_string(seen.with_extension("pgpass")).unwrap(),
        "*:*:*:*:s3cr\\:et\n"
    );
    assert!(
        !Path::new(pgpass_path).exists(),
        "the PGPASSFILE is removed after the dump"
    );
}

#[test]
fn postgres_files_and_a_database_restore_together_from_one_snapshot() {
    let test = "postgres_files_and_a_database_restore_together";
    let Some(server) = Postgres::start(test) else {
        return;
    };
    create_postgres_data(&server, 2_000);
    let mut sidecar = Sidecar::init(None);
    sidecar.path_prefix.push(server.bin_dir().to_path_buf());
    let password_file = sidecar.password_file("shop-db", ADMIN_PASSWORD);
    let database = format!("shop-db={}", server.uri(Some("shop")));
    let work = tempfile::tempdir().unwrap();
    let volume = work.path().join("volume");
    fs::create_dir_all(volume.join("uploads")).unwrap();
    fs::write(volume.join("uploads/invoice.pdf"), b"%PDF-1.7 invoice 42").unwrap();
    fs::write(volume.join("config.yaml"), b"shop: open\n").unwrap();
    let volume_arg = volume.to_str().unwrap();
    sidecar
        .run(
            &DatabaseRun::backup()
                .arg(volume_arg)
                .database(&database, &password_file)
                .args()[..],
        )
        .expect_ok();

    let before = postgres_state(&server);
    server.psql("postgres", "DROP DATABASE shop WITH (FORCE)");
    server.psql("postgres", "CREATE DATABASE shop OWNER app");
    let restore_into = |target: &Path, password_file: &str| {
        let target = target.to_str().unwrap();
        let run = DatabaseRun::restore("latest")
            .arg("--target")
            .arg(target)
            .arg("--include")
            .arg(volume_arg)
            .database(&database, password_file);
        sidecar.run(&run.args()[..])
    };
    let files_restored_into = |target: &Path| {
        let restored = target.join(volume.strip_prefix("/").unwrap());
        let read = |name: &str| fs::read(restored.join(name)).unwrap();
        assert_eq!(read("uploads/invoice.pdf"), b"%PDF-1.7 invoice 42");
        assert_eq!(read("config.yaml"), b"shop: open\n");
    };
    let target = work.path().join("target");
    let run = restore_into(&target, &password_file).expect_ok();
    assert_same_state(&before, &postgres_state(&server));
    files_restored_into(&target);
    // The dump was streamed into the server, not written among the files.
    assert!(!target.join("databases").exists());
    let result = run.result();
    assert_eq!(result.databases.len(), 1, "{:?}", result.databases);
    assert_eq!(result.databases[0].error, None);
    assert_eq!(result.files, 3, "two files and one dump: {result:?}");

    // Files and databases restore at the same time: a load that fails stops neither the files
    // nor the run's failure.
    let wrong_password = sidecar.password_file("shop-db", "not-the-password");
    let second = work.path().join("second");
    let error = restore_into(&second, &wrong_password).error();
    assert!(error.contains("password authentication failed"), "{error}");
    files_restored_into(&second);
    assert_same_state(&before, &postgres_state(&server));
}
