//! The rows of each table a dump holds, counted from the dump itself as it streams into the
//! snapshot. Counting the dump (not asking the server beside it) gives the numbers of the very
//! transaction the dump read, so that a restore drill can check a loaded dump against them.
//!
//! Both engines' plain SQL is read line by line, keeping at most [`HEAD_BYTES`] of a line:
//! - PostgreSQL: `COPY name (…) FROM stdin;` opens a table's rows, one per line (the text format
//!   escapes line breaks in values), up to the line `\.`; `pg_dumpall` switches databases with
//!   `\connect`.
//! - MariaDB/MySQL: `CREATE TABLE `name` (` enters a table with no rows yet; each
//!   `INSERT INTO `name` … VALUES (…),(…);` line adds its row tuples, counted outside quoted
//!   strings; `USE `db`;` switches databases.
//!
//! Tables are named as the dump writes them (quoted as SQL quotes them), so that a drill can
//! count the rows of the loaded table with the same name.

use std::io::{self, Read};
use std::sync::{Arc, Mutex};

use super::Engine;
use neverwiped_contract::record::RecordedTable;

/// The most bytes of a line kept to tell what it is: an `INSERT` line is as long as the rows it
/// holds, but its table and the start of its values come first.
const HEAD_BYTES: usize = 64 * 1024;

/// The counts of one dump, filled in once its stream has been read to its end.
#[derive(Debug, Default)]
pub struct CountedRows(Mutex<Option<Vec<RecordedTable>>>);

impl CountedRows {
    /// The tables and their rows; `None` until the dump was read completely, or when a line could
    /// not be understood (the counts would be wrong).
    pub fn tables(&self) -> Option<Vec<RecordedTable>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, tables: Vec<RecordedTable>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(tables);
    }
}

/// A dump stream that counts the rows it passes on.
pub struct RowCountingReader<R> {
    inner: R,
    counter: RowCounter,
    counted: Arc<CountedRows>,
}

impl<R: Read> RowCountingReader<R> {
    /// `database` is the one the dump is of when the dump itself does not say (one database).
    pub fn new(inner: R, engine: Engine, database: Option<String>) -> RowCountingReader<R> {
        RowCountingReader {
            inner,
            counter: RowCounter::new(engine, database.unwrap_or_default()),
            counted: Arc::default(),
        }
    }

    pub fn counted(&self) -> Arc<CountedRows> {
        self.counted.clone()
    }
}

impl<R: Read> Read for RowCountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        if read == 0 {
            // The inner stream ends with `Ok(0)` only once the dump is judged complete.
            if let Some(tables) = self.counter.finish() {
                self.counted.set(tables);
            }
        } else {
            self.counter.feed(&buf[..read]);
        }
        Ok(read)
    }
}

/// What the lines read so far mean.
#[derive(Debug)]
struct RowCounter {
    engine: Engine,
    database: String,
    /// The head of the line being read, and whether the line went on past it.
    head: Vec<u8>,
    head_cut: bool,
    /// PostgreSQL: the table whose `COPY` rows are being read.
    copying: Option<usize>,
    /// MariaDB: the table of the `INSERT` being read (none for the server's own schemas), and
    /// its row tuples, counted as they stream.
    inserting: Option<(Option<usize>, TupleCounter)>,
    tables: Vec<RecordedTable>,
    /// The first line that should have named a table or a database and did not: the counts are
    /// not recorded.
    not_understood: Option<String>,
}

impl RowCounter {
    fn new(engine: Engine, database: String) -> RowCounter {
        RowCounter {
            engine,
            database,
            head: Vec::new(),
            head_cut: false,
            copying: None,
            inserting: None,
            tables: Vec::new(),
            not_understood: None,
        }
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let line_end = memchr::memchr(b'\n', data);
            let (part, rest) = match line_end {
                Some(at) => (&data[..at], &data[at + 1..]),
                None => (data, &data[data.len()..]),
            };
            self.take_part(part);
            if line_end.is_some() {
                self.end_line();
            }
            data = rest;
        }
    }

    /// A piece of the current line (without its line break).
    fn take_part(&mut self, part: &[u8]) {
        if let Some((_, tuples)) = &mut self.inserting {
            tuples.feed(part);
            return;
        }
        let kept = part.len().min(HEAD_BYTES.saturating_sub(self.head.len()));
        self.head.extend_from_slice(&part[..kept]);
        self.head_cut |= part.len() > kept;
        if self.engine != Engine::Postgres && kept > 0 && self.start_insert_once_named(false) {
            if let Some((_, tuples)) = &mut self.inserting {
                tuples.feed(&part[kept..]);
            }
        }
    }

    /// MariaDB: once the head holds `INSERT INTO name … VALUES`, the rest of the statement
    /// streams into the tuple counter: one line of megabytes (`mysqldump`), or one line per
    /// tuple (`mariadb-dump` 10.11 and later). Returns whether it started.
    fn start_insert_once_named(&mut self, line_ended: bool) -> bool {
        let Some(after) = self.head.strip_prefix(b"INSERT INTO ") else {
            return false;
        };
        let Some(values) = memchr::memmem::find(after, b" VALUES") else {
            return false;
        };
        let rest = &after[values + b" VALUES".len()..];
        if !(rest.starts_with(b" ") || rest.starts_with(b"(") || rest.is_empty() && line_ended) {
            return false;
        }
        let Some(name) = mariadb_identifier(after) else {
            self.not_understood(&self.head.clone());
            return false;
        };
        let mut tuples = TupleCounter::default();
        tuples.feed(rest);
        let index = self.table(name);
        self.inserting = Some((index, tuples));
        true
    }

    fn end_line(&mut self) {
        let mariadb = self.engine != Engine::Postgres;
        if mariadb && self.inserting.is_none() && !self.head_cut {
            // `INSERT INTO name VALUES` alone on its line: the tuples follow.
            self.start_insert_once_named(true);
        }
        match &self.inserting {
            Some((index, tuples)) if tuples.ended => {
                if let Some(index) = index {
                    self.tables[*index].rows += tuples.tuples;
                }
                self.inserting = None;
            }
            // The statement goes on on the next line.
            Some(_) => {}
            None => {
                let head = std::mem::take(&mut self.head);
                match mariadb {
                    false => self.postgres_line(&head),
                    true => self.mariadb_line(&head),
                }
                self.head = head;
            }
        }
        self.head.clear();
        self.head_cut = false;
    }

    fn postgres_line(&mut self, line: &[u8]) {
        if let Some(index) = self.copying {
            match line == b"\\." {
                true => self.copying = None,
                false => self.tables[index].rows += 1,
            }
        } else if let Some(rest) = line.strip_prefix(b"COPY ") {
            match postgres_table(rest) {
                Some(name) => self.copying = self.table(name),
                None => self.not_understood(line),
            }
        } else if let Some(rest) = line.strip_prefix(b"\\connect ") {
            match postgres_connect(rest) {
                Some(database) => self.database = database,
                None => self.not_understood(line),
            }
        }
    }

    fn mariadb_line(&mut self, line: &[u8]) {
        if let Some(rest) = line.strip_prefix(b"CREATE TABLE ") {
            // The `mysql` schema's log tables are written `IF NOT EXISTS`.
            let rest = rest.strip_prefix(b"IF NOT EXISTS ").unwrap_or(rest);
            match mariadb_identifier(rest) {
                Some(name) => {
                    self.table(name);
                }
                None => self.not_understood(line),
            }
        } else if let Some(rest) = line.strip_prefix(b"USE ") {
            match mariadb_identifier(rest).and_then(|quoted| unquote(&quoted, '`')) {
                Some(database) => self.database = database,
                None => self.not_understood(line),
            }
        } else if line.starts_with(b"INSERT INTO ") {
            // An INSERT line whose values were never found within its head.
            self.not_understood(line);
        }
    }

    fn not_understood(&mut self, line: &[u8]) {
        if self.not_understood.is_none() {
            let head = &line[..line.len().min(120)];
            self.not_understood = Some(neverwiped_contract::text::escaped_bytes(head).into_owned());
        }
    }

    /// The index of `name` in the current database, entered with no rows when new; none for a
    /// table of MariaDB's own schemas (the server keeps them, a dump may leave their rows out).
    fn table(&mut self, name: String) -> Option<usize> {
        let database = &self.database;
        if self.engine != Engine::Postgres
            && super::mariadb::SYSTEM_SCHEMA_NAMES.contains(&database.as_str())
        {
            return None;
        }
        let known = (self.tables.iter()).position(|t| &t.database == database && t.table == name);
        Some(known.unwrap_or_else(|| {
            self.tables.push(RecordedTable {
                database: self.database.clone(),
                table: name,
                rows: 0,
            });
            self.tables.len() - 1
        }))
    }

    /// The counts, unless some line was not understood (or the dump ended inside a table's rows).
    fn finish(&mut self) -> Option<Vec<RecordedTable>> {
        if !self.head.is_empty() || self.inserting.is_some() {
            self.end_line();
        }
        let problem = match (&self.not_understood, self.copying, &self.inserting) {
            (Some(line), _, _) => format!("this line was not understood: {line}"),
            (None, Some(index), _) => {
                format!("it ends inside the rows of {}", self.tables[index].table)
            }
            (None, None, Some(_)) => "it ends inside an INSERT".to_owned(),
            (None, None, None) => return Some(std::mem::take(&mut self.tables)),
        };
        tracing::warn!("the dump's row counts are not recorded: {problem}");
        None
    }
}

/// Counts the `(…)` tuples of an `INSERT`'s values as they stream, up to the `;` that ends the
/// statement: parentheses and semicolons inside quoted strings (`'…'` or `"…"`, with backslash
/// escapes, as the dump tools write them) do not count.
#[derive(Debug, Default)]
struct TupleCounter {
    tuples: u64,
    depth: u32,
    quote: Option<u8>,
    escaped: bool,
    ended: bool,
}

impl TupleCounter {
    fn feed(&mut self, data: &[u8]) {
        for &byte in data {
            if self.ended {
                return;
            }
            if let Some(quote) = self.quote {
                match (self.escaped, byte) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b) if b == quote => self.quote = None,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'\'' | b'"' => self.quote = Some(byte),
                b'(' => {
                    if self.depth == 0 {
                        self.tuples += 1;
                    }
                    self.depth += 1;
                }
                b')' => self.depth = self.depth.saturating_sub(1),
                b';' if self.depth == 0 => self.ended = true,
                _ => {}
            }
        }
    }
}

/// The table of `COPY name (…) FROM stdin;` (or `COPY name FROM stdin;`), as written.
fn postgres_table(rest: &[u8]) -> Option<String> {
    let end = quoted_name_end(rest, b'"', b"  (")?;
    let name = std::str::from_utf8(&rest[..end]).ok()?;
    (!name.is_empty()).then(|| name.to_owned())
}

/// The database of `\connect NAME` or `\connect -reuse-previous=on "dbname='NAME'"`.
fn postgres_connect(rest: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(rest).ok()?.trim();
    if let Some(at) = text.find("dbname='") {
        // A connection string's value: `\'` stands for a quote, `\\` for a backslash.
        let mut name = String::new();
        let mut chars = text[at + "dbname='".len()..].chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => name.push(chars.next()?),
                '\'' => return Some(name),
                c => name.push(c),
            }
        }
        return None;
    }
    // `\connect NAME`, or `\connect "NAME"` for a name that needs quotes.
    let name = text.strip_prefix("-reuse-previous=on ").unwrap_or(text);
    match name.starts_with('"') {
        true => unquote(name, '"'),
        false => Some(name.to_owned()),
    }
}

/// The leading `` `name` `` of `rest`, as written (backquoted, `` `` `` inside).
fn mariadb_identifier(rest: &[u8]) -> Option<String> {
    if rest.first() != Some(&b'`') {
        return None;
    }
    let end = quoted_name_end(rest, b'`', b" ;(")?;
    std::str::from_utf8(&rest[..end]).ok().map(str::to_owned)
}

/// Where a (possibly qualified, possibly quoted) name at the start of `text` ends: at the first
/// of `stops` outside quotes, or at the end.
fn quoted_name_end(text: &[u8], quote: u8, stops: &[u8]) -> Option<usize> {
    let mut quoted = false;
    for (at, &byte) in text.iter().enumerate() {
        if byte == quote {
            // A doubled quote inside quotes toggles twice: it stays quoted.
            quoted = !quoted;
        } else if !quoted && stops.contains(&byte) {
            return Some(at);
        }
    }
    (!quoted).then_some(text.len())
}

/// `"a""b"` → `a"b` (or with backquotes).
fn unquote(quoted: &str, quote: char) -> Option<String> {
    let inner = quoted.strip_prefix(quote)?.strip_suffix(quote)?;
    Some(inner.replace(&format!("{quote}{quote}"), &quote.to_string()))
}

#[cfg(test)]
#[path = "rows_tests.rs"]
mod tests;
