use super::*;

/// Counts `dump` read in pieces of `piece` bytes, as a pipe may hand it over.
fn count(
    engine: Engine,
    database: Option<&str>,
    dump: &str,
    piece: usize,
) -> Option<Vec<(String, String, u64)>> {
    let mut reader = RowCountingReader::new(dump.as_bytes(), engine, database.map(str::to_owned));
    let counted = reader.counted();
    let mut buffer = vec![0; piece];
    while reader.read(&mut buffer).unwrap() > 0 {}
    let tables = counted.tables()?;
    Some(
        tables
            .into_iter()
            .map(|t| (t.database, t.table, t.rows))
            .collect(),
    )
}

fn rows(list: &[(&str, &str, u64)]) -> Option<Vec<(String, String, u64)>> {
    Some(
        list.iter()
            .map(|(d, t, r)| (d.to_string(), t.to_string(), *r))
            .collect(),
    )
}

const PG_DUMPALL: &str = "\
--
-- PostgreSQL database cluster dump
--
CREATE ROLE shop;
\\connect template1
\\connect -reuse-previous=on \"dbname='shop'\"
CREATE TABLE public.orders (id integer, item text);
COPY public.orders (id, item) FROM stdin;
1\tbook
2\ta line\\nbreak and a ( paren
3\t\\N
\\.
COPY \"Sales\".\"Q1 \"\"big\"\"\" (id) FROM stdin;
\\.
\\connect -reuse-previous=on \"dbname='it\\'s\\\\x'\"
COPY public.orders (id, item) FROM stdin;
7\tother database, same table name
\\.
--
-- PostgreSQL database cluster dump complete
--
";

#[test]
fn postgres_rows_are_the_copy_lines_of_each_table_of_each_database() {
    let expected = rows(&[
        ("shop", "public.orders", 3),
        ("shop", "\"Sales\".\"Q1 \"\"big\"\"\"", 0),
        ("it's\\x", "public.orders", 1),
    ]);
    for piece in [1, 2, 7, 64, 1 << 16] {
        assert_eq!(
            count(Engine::Postgres, None, PG_DUMPALL, piece),
            expected,
            "pieces of {piece}"
        );
    }
}

#[test]
fn a_pg_dump_of_one_database_counts_in_the_database_the_uri_names() {
    let dump = "COPY public.t (a) FROM stdin;\n1\n2\n\\.\n-- PostgreSQL database dump complete\n";
    assert_eq!(
        count(Engine::Postgres, Some("shop"), dump, 3),
        rows(&[("shop", "public.t", 2)])
    );
    // The old form of \connect names the database alone.
    let dump = "\\connect \"my db\"\nCOPY public.t FROM stdin;\n1\n\\.\n";
    assert_eq!(
        count(Engine::Postgres, None, dump, 5),
        rows(&[("my db", "public.t", 1)])
    );
}

const MARIADB_DUMP: &str = "\
-- MariaDB dump 10.19
CREATE DATABASE /*!32312 IF NOT EXISTS*/ `shop`;
USE `shop`;
DROP TABLE IF EXISTS `orders`;
CREATE TABLE `orders` (
  `id` int(11) NOT NULL,
  `item` text
);
INSERT INTO `orders` VALUES (1,'a ( paren'),(2,'it\\'s \"(\" \\\\'),(3,NULL);
INSERT INTO `orders` VALUES (4,'x');
CREATE TABLE `empty` (
  `id` int(11)
);
/*!50001 CREATE VIEW `v` AS SELECT 1 AS `id` */;
CREATE TABLE IF NOT EXISTS `odd``name` (`a` int);
INSERT INTO `odd``name` (`a`) VALUES (5),(6);
USE `other`;
CREATE TABLE `orders` (`id` int);
INSERT INTO `orders` VALUES (9);
CREATE TABLE `lines` (`id` int, `note` text);
INSERT INTO `lines` VALUES
(1,'one; (two)'),
(2,'a\\nb'),
(3,NULL);
INSERT INTO `lines` VALUES (4,'x');
USE `mysql`;
CREATE TABLE IF NOT EXISTS `general_log` (`a` int);
INSERT INTO `general_log` VALUES (1);
-- Dump completed on 2026-12-06 10:00:00
";

#[test]
fn mariadb_rows_are_the_tuples_of_each_insert_and_tables_without_inserts_have_none() {
    let expected = rows(&[
        ("shop", "`orders`", 4),
        ("shop", "`empty`", 0),
        ("shop", "`odd``name`", 2),
        ("other", "`orders`", 1),
        ("other", "`lines`", 4),
    ]);
    for piece in [1, 3, 10, 64, 1 << 16] {
        assert_eq!(
            count(Engine::MariaDb, None, MARIADB_DUMP, piece),
            expected,
            "pieces of {piece}"
        );
    }
}

#[test]
fn an_insert_longer_than_the_head_is_counted_as_it_streams() {
    let tuples: Vec<String> = (0..50_000)
        .map(|i| format!("({i},'row {i} (x)')"))
        .collect();
    let dump = format!(
        "CREATE TABLE `big` (`a` int);\nINSERT INTO `big` VALUES {};\n",
        tuples.join(",")
    );
    assert!(dump.len() > 10 * HEAD_BYTES);
    assert_eq!(
        count(Engine::MariaDb, Some("shop"), &dump, 4096),
        rows(&[("shop", "`big`", 50_000)])
    );
}

#[test]
fn a_dump_not_understood_records_no_counts() {
    // An INSERT whose values start past the head.
    let columns = "`c`,".repeat(HEAD_BYTES / 4);
    let dump = format!("INSERT INTO `t` ({columns}) VALUES (1);\n");
    assert_eq!(count(Engine::MariaDb, Some("shop"), &dump, 4096), None);
    // A dump that ends inside an INSERT, or inside a table's rows.
    let dump = "INSERT INTO `t` VALUES\n(1),\n";
    assert_eq!(count(Engine::MariaDb, Some("shop"), dump, 4096), None);
    let dump = "COPY public.t (a) FROM stdin;\n1\n";
    assert_eq!(count(Engine::Postgres, Some("shop"), dump, 4096), None);
    // A COPY line without a table.
    assert_eq!(
        count(Engine::Postgres, Some("shop"), "COPY \"x FROM stdin;\n", 64),
        None
    );
}

#[test]
fn counts_are_given_only_once_the_stream_has_ended() {
    let mut reader = RowCountingReader::new(PG_DUMPALL.as_bytes(), Engine::Postgres, None);
    let counted = reader.counted();
    let mut buffer = [0; 16];
    reader.read_exact(&mut buffer).unwrap();
    assert_eq!(counted.tables(), None);
}
