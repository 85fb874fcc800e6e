//! The application of the worst day: two volumes of files of three owners (private files, 0600,
//! in private folders, 0700, a few megabytes in all) and a PostgreSQL database, each changed
//! night by night, and what a restore must give back: every entry's content hash and metadata,
//! every table's row count and checksum, and the claims as they were.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::support::postgres::Postgres;
use crate::support::volumes::{folder, noise, put, tree};

/// The claims: name, requested size, access mode.
pub const CLAIMS: [(&str, &str, &str); 2] = [
    ("uploads", "1Gi", "ReadWriteOnce"),
    ("catalog", "2Gi", "ReadWriteOncePod"),
];
/// The old cluster's StorageClass, and the new one's.
pub const OLD_CLASS: &str = "fast";
pub const NEW_CLASS: &str = "standard";
/// The owners of the files: each its own private folder.
const OWNERS: [u32; 3] = [1000, 1001, 1002];
/// The tables of the database `shop`.
pub const TABLES: [&str; 2] = ["customers", "orders"];

/// The claim `name` as the application's namespace had it.
pub fn claim(namespace: &str, name: &str, size: &str, access_mode: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {"app": "shop", "app.kubernetes.io/component": name},
            "annotations": {"example.com/team": "payments", "example.com/backup-tier": "gold"},
        },
        "spec": {
            "storageClassName": OLD_CLASS, "accessModes": [access_mode], "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": size}},
        },
    })
}

/// The volume `claim` as it is after night `night` (1 to 3): each owner's private folder with
/// files of that owner; a file rewritten, one added and one removed from night to night.
pub fn write_night(root: &Path, claim: &str, night: u64) {
    folder(root, "", (0, 0), 0o755);
    for (index, owner) in OWNERS.into_iter().enumerate() {
        let seed = 100 * index as u64 + claim.len() as u64;
        let private = format!("user-{owner}");
        let file = |name: &str| format!("{private}/{name}");
        if night == 1 {
            for part in 0..3u64 {
                let bytes = noise(200_000 + 70_000 * part as usize, seed + part);
                put(
                    root,
                    &file(&format!("part-{part}.bin")),
                    &bytes,
                    (owner, owner),
                    0o600,
                );
            }
        }
        let notes = format!("{claim} of user {owner}, night {night}\n").repeat(2_000);
        put(
            root,
            &file("notes.txt"),
            notes.as_bytes(),
            (owner, owner),
            0o600,
        );
        if night >= 2 {
            let bytes = noise(150_000, seed + 10 * night);
            put(
                root,
                &file(&format!("night-{night}.bin")),
                &bytes,
                (owner, owner),
                0o600,
            );
        }
        if night == 3 {
            std::fs::remove_file(root.join(file("part-1.bin"))).expect("a file removed");
        }
        folder(root, &private, (owner, owner), 0o700);
    }
}

/// Every entry of the volume: content hash, type, mode, owner, size and modification time.
pub fn entries(root: &Path) -> BTreeMap<String, String> {
    tree(root)
}

/// The database `shop` as it is after night `night` (1 to 3).
pub fn change_database(database: &Postgres, night: u64) {
    let sql = match night {
        1 => {
            database.sql("postgres", "CREATE DATABASE shop");
            "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text);
             CREATE TABLE orders (id int PRIMARY KEY, customer int REFERENCES customers,
                                  total numeric(10,2), placed timestamptz, note text);
             INSERT INTO customers SELECT i, 'customer ' || i || ' ü''s', 'c' || i || '@example.com'
               FROM generate_series(1, 500) AS i;
             INSERT INTO orders SELECT i, 1 + i % 500, i * 1.25,
                 '2026-01-01'::timestamptz + i * interval '1 hour', repeat('x', i % 40)
               FROM generate_series(1, 3000) AS i;"
        }
        2 => {
            "INSERT INTO orders SELECT i, 1 + i % 500, i * 0.5, '2026-06-01'::timestamptz, NULL
               FROM generate_series(3001, 4000) AS i;
             UPDATE customers SET email = 'new-' || email WHERE id % 7 = 0;"
        }
        _ => {
            "DELETE FROM orders WHERE id % 11 = 0;
             INSERT INTO customers SELECT i, 'late customer ' || i, NULL FROM generate_series(501, 700) AS i;"
        }
    };
    database.sql("shop", sql);
}

/// Each table's row count and a checksum of its rows in key order.
pub fn table_checksums(database: &Postgres) -> BTreeMap<String, String> {
    TABLES
        .iter()
        .map(|table| {
            let query = format!(
                "SELECT count(*) || ' ' || md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), '')) FROM {table} t"
            );
            (table.to_string(), database.sql("shop", &query).trim().to_owned())
        })
        .collect()
}

/// A new, empty volume's root, as a provisioner makes it: root's, 0755.
pub fn empty_volume(root: &Path) {
    folder(root, "", (0, 0), 0o755);
}
