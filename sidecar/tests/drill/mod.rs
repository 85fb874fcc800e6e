//! `drill` against real servers and a real repository: a snapshot of two volumes and of
//! PostgreSQL and MariaDB dumps restored into scratch space and checked (the servers run as an
//! unprivileged user when the tests run as root); a damaged pack, a dump that does not load and
//! rows that differ each fail the drill, naming what; a sample's rounds restore every file once.

use super::databases_support::{write_script, MariaDb, Postgres, ADMIN_PASSWORD};
use super::support::sidecar::{DatabaseRun, Run};
use super::Sidecar;
use neverwiped_contract::drill::DrillStats;
use sha2::{Digest, Sha256};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A work folder the servers' unprivileged user can pass through, with a scratch folder in it.
fn work_folder() -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    fs::set_permissions(work.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let scratch = work.path().join("scratch");
    (work, scratch)
}

/// A folder of `count` files of a few kilobytes, in two subfolders.
fn volume(root: &Path, name: &str, count: usize) -> String {
    let dir = root.join(name);
    for i in 0..count {
        let sub = dir.join(format!("part{}", i % 2));
        fs::create_dir_all(&sub).unwrap();
        let content: Vec<u8> = (0..(1000 + i * 37)).map(|b| (b * 7 + i) as u8).collect();
        fs::write(sub.join(format!("file{i}.bin")), content).unwrap();
    }
    dir.to_str().unwrap().to_owned()
}

/// `--claim` of a volume at `path`.
fn claim(path: &str, name: &str) -> String {
    serde_json::json!({"path": path, "name": name}).to_string()
}

fn drill_stats(run: &Run) -> DrillStats {
    run.result()
        .drill
        .clone()
        .unwrap_or_else(|| panic!("no drill in the result: {}", run.stderr))
}

#[track_caller]
fn assert_empty(scratch: &Path) {
    let left: Vec<_> = fs::read_dir(scratch)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "the drill left {left:?}");
}

fn create_shop(server: &Postgres) {
    server.psql("postgres", "CREATE DATABASE shop");
    server.psql(
        "shop",
        // Owned by a role that only a dump of every database creates.
        "CREATE ROLE app; CREATE TABLE orders (id int PRIMARY KEY, note text); \
         INSERT INTO orders SELECT g, 'order ' || g FROM generate_series(1, 3000) g; \
         CREATE TABLE customers (id int PRIMARY KEY); \
         INSERT INTO customers SELECT generate_series(1, 40); \
         ALTER TABLE orders OWNER TO app; GRANT SELECT ON customers TO app;",
    );
}

fn create_stock(server: &MariaDb) {
    server.root_sql(
        "CREATE DATABASE stock; \
         CREATE TABLE stock.items (id INT PRIMARY KEY, name VARCHAR(40)); \
         INSERT INTO stock.items VALUES (1, 'bolt'), (2, 'nut'), (3, 'washer');",
    );
}

#[test]
fn drill_restores_volumes_and_loads_postgres_and_mariadb_dumps_then_leaves_nothing() {
    let test = "drill_restores_volumes_and_loads_dumps";
    let Some(postgres) = Postgres::start(test) else {
        return;
    };
    let Some(mariadb) = MariaDb::start(test) else {
        return;
    };
    create_shop(&postgres);
    create_stock(&mariadb);
    let mut sidecar = Sidecar::init(None);
    sidecar.path_prefix.push(postgres.bin_dir().to_path_buf());
    let (work, scratch) = work_folder();
    let (orders, uploads) = (
        volume(work.path(), "orders", 30),
        volume(work.path(), "up", 5),
    );
    let pg_password = sidecar.password_file("shop", ADMIN_PASSWORD);
    let maria_password = sidecar.password_file("stock", ADMIN_PASSWORD);
    let one_password = sidecar.password_file("shop-only", ADMIN_PASSWORD);
    let backup = DatabaseRun::backup()
        .arg(&orders)
        .arg(&uploads)
        .arg("--claim")
        .arg(&claim(&orders, "orders"))
        .arg("--claim")
        .arg(&claim(&uploads, "uploads"))
        .database(&format!("shop={}", postgres.uri(None)), &pg_password)
        .database(
            &format!("shop-only={}", postgres.uri(Some("shop"))),
            &one_password,
        )
        .database(
            &format!("stock={}", mariadb.uri(Some("stock"))),
            &maria_password,
        );
    sidecar.run(&backup.args()).expect_ok();

    let scratch_arg = scratch.to_str().unwrap();
    let run = sidecar.run(&["drill", "latest", "--scratch", scratch_arg, "--databases"]);
    let run = run.expect_ok();
    let stats = drill_stats(&run);
    assert_eq!(
        (stats.sample_percent, stats.volumes.len()),
        (100, 2),
        "{stats:?}"
    );
    assert_eq!(stats.volumes[0].path, orders);
    assert_eq!(stats.volumes[0].files, 30);
    for volume in &stats.volumes {
        assert!(volume.bytes > 0 && volume.secs > 0.0, "{volume:?}");
        assert_eq!(volume.mismatched, 0, "{volume:?}");
    }
    assert_eq!(stats.databases.len(), 3, "{stats:?}");
    for database in &stats.databases {
        assert_eq!(database.error, None, "{database:?}");
        assert!(database.bytes > 0 && database.secs > 0.0, "{database:?}");
        assert!(database.tables_checked > 0, "{database:?}");
    }
    let engines: Vec<&str> = stats.databases.iter().map(|d| d.engine.as_str()).collect();
    assert_eq!(engines, ["postgresql", "postgresql", "mariadb"]);
    assert!(run.stdout.contains("recovery time"), "{}", run.stdout);
    assert_empty(&scratch);
}

/// The pack files of the repository at `repo`.
fn packs(repo: &Path) -> Vec<PathBuf> {
    let mut packs = Vec::new();
    for dir in fs::read_dir(repo.join("data")).unwrap() {
        for pack in fs::read_dir(dir.unwrap().path()).unwrap() {
            packs.push(pack.unwrap().path());
        }
    }
    packs
}

#[test]
fn drill_of_a_damaged_pack_names_the_files_and_still_reports_the_other_volume() {
    let sidecar = Sidecar::init(None);
    let (work, scratch) = work_folder();
    let good = volume(work.path(), "good", 10);
    sidecar.run(&["backup", &good]).expect_ok();
    let before = packs(Path::new(&sidecar.repo));
    let bad = work.path().join("bad");
    fs::create_dir_all(&bad).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(bad.join("big.bin"), big).unwrap();
    let bad = bad.to_str().unwrap().to_owned();
    let backup = ["backup", &good, &bad, "--claim", &claim(&good, "good")];
    sidecar
        .run(&[&backup[..], &["--claim", &claim(&bad, "bad")]].concat())
        .expect_ok();
    // The largest new pack holds the big file's data: damage its middle.
    let mut added: Vec<PathBuf> = packs(Path::new(&sidecar.repo))
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    added.sort_by_key(|p| fs::metadata(p).unwrap().len());
    let pack = added.last().expect("a new pack");
    let mut bytes = fs::read(pack).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 64]
        .iter_mut()
        .for_each(|b| *b ^= 0xff);
    fs::set_permissions(pack, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(pack, bytes).unwrap();

    let scratch_arg = scratch.to_str().unwrap();
    let run = sidecar
        .run(&["drill", "latest", "--scratch", scratch_arg])
        .expect_code(14);
    let error = run.result().error.clone().unwrap_or_default();
    assert!(error.contains("big.bin"), "{error}");
    let stats = drill_stats(&run);
    assert_eq!(stats.volumes.len(), 2, "{stats:?}");
    assert_eq!(
        (stats.volumes[0].files, stats.volumes[0].mismatched),
        (10, 0)
    );
    assert!(stats.volumes[1].mismatched > 0, "{stats:?}");
    assert_empty(&scratch);
}

/// A `pg_dump` that writes `body` as a dump of one database, with pg_dump's first and last lines.
fn fake_pg_dump(dir: &Path, body: &str) {
    fs::create_dir_all(dir).unwrap();
    let script = format!(
        "#!/bin/sh\ncat <<'EOF'\n--\n-- PostgreSQL database dump\n--\n\n{body}\n--\n-- PostgreSQL database dump complete\n--\n\nEOF\n"
    );
    write_script(&dir.join("pg_dump"), &script);
}

#[test]
fn drill_of_a_dump_that_does_not_load_or_loads_other_rows_fails_in_the_servers_words() {
    let test = "drill_of_a_dump_that_does_not_load";
    let Some(postgres) = Postgres::start(test) else {
        return;
    };
    postgres.psql("postgres", "CREATE DATABASE shop");
    let mut sidecar = Sidecar::init(None);
    let (work, scratch) = work_folder();
    let fake = work.path().join("fake");
    sidecar.path_prefix.push(fake.clone());
    sidecar.path_prefix.push(postgres.bin_dir().to_path_buf());
    let password = sidecar.password_file("shop", ADMIN_PASSWORD);
    let entry = format!("shop={}", postgres.uri(Some("shop")));
    let backup = DatabaseRun::backup().database(&entry, &password);
    let scratch_arg = scratch.to_str().unwrap();
    let drill = ["drill", "latest", "--scratch", scratch_arg, "--databases"];

    fake_pg_dump(&fake, "CREATE TABLE broken (id integer,;");
    sidecar.run(&backup.args()).expect_ok();
    let run = sidecar.run(&drill);
    assert_ne!(run.code, 0, "{}", run.stderr);
    let error = run.result().error.clone().unwrap_or_default();
    assert!(
        error.contains("database shop: the dump did not load"),
        "{error}"
    );
    assert!(
        error.contains("syntax error"),
        "the server's words: {error}"
    );
    let stats = drill_stats(&run);
    assert!(stats.databases[0]
        .error
        .as_ref()
        .unwrap()
        .contains("syntax error"));
    assert_empty(&scratch);

    // Three rows dumped, one removed by a later statement of the dump.
    fake_pg_dump(
        &fake,
        "CREATE TABLE public.items (id integer);\n\
         COPY public.items (id) FROM stdin;\n1\n2\n3\n\\.\n\n\
         DELETE FROM public.items WHERE id = 1;",
    );
    sidecar.run(&backup.args()).expect_ok();
    let run = sidecar.run(&drill).expect_code(14);
    let error = run.result().error.clone().unwrap_or_default();
    assert!(
        error.contains("public.items: 2 rows, the dump held 3"),
        "{error}"
    );
    assert_eq!(drill_stats(&run).databases[0].tables_checked, 1);
    assert_empty(&scratch);
}

/// The sample bucket of a snapshot path, by the rule the drill documents.
fn bucket(path: &str) -> u64 {
    let digest = Sha256::digest(path.as_bytes());
    u64::from_be_bytes(digest[..8].try_into().unwrap()) % 100
}

#[test]
fn drill_samples_of_a_quarter_restore_every_file_once_in_four_rounds() {
    let sidecar = Sidecar::init(None);
    let (work, scratch) = work_folder();
    let files = 120;
    let dir = volume(work.path(), "many", files);
    sidecar.run(&["backup", &dir]).expect_ok();
    let scratch_arg = scratch.to_str().unwrap();
    let mut buckets = [0u64; 4];
    for i in 0..files {
        let path = format!("{dir}/part{}/file{i}.bin", i % 2);
        buckets[(bucket(&path) / 25) as usize] += 1;
    }
    let mut total = 0;
    for round in 0..4u64 {
        let args = ["drill", "latest", "--scratch", scratch_arg];
        let round_arg = round.to_string();
        let sample = ["--sample-percent", "25", "--sample-round", &round_arg];
        let run = sidecar.run(&[&args[..], &sample[..]].concat()).expect_ok();
        let stats = drill_stats(&run);
        assert_eq!((stats.sample_percent, stats.sample_round), (25, round));
        let restored: u64 = stats.volumes.iter().map(|v| v.files).sum();
        assert_eq!(restored, buckets[round as usize], "round {round}");
        assert!(
            (10..=55).contains(&restored),
            "round {round}: {restored} of {files}"
        );
        total += restored;
        assert_empty(&scratch);
    }
    assert_eq!(total, files as u64);
}
