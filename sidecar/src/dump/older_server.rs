//! A PostgreSQL dump written by a newer `pg_dump` restored into an older server.
//!
//! The sidecar carries one client (pg_dump 18) for servers 13 to 18. Since version 17 pg_dump
//! writes `SET transaction_timeout = 0;` in the header of every database's script; a server
//! before 17 does not know the setting and refuses it, and psql (with `ON_ERROR_STOP`) stops
//! there. The setting only disables a timeout, which an older server does not have: for such a
//! server the line is left out. Everything else passes unchanged, and the rows of `COPY` blocks
//! are never looked at (a row may hold any text, that line's too).

use super::script::ScriptFilter;

/// The statement servers before PostgreSQL 17 refuse, as pg_dump writes it.
const TRANSACTION_TIMEOUT_LINE: &[u8] = b"SET transaction_timeout = 0;\n";

/// The first server version (as `server_version_num`) that knows `transaction_timeout`.
pub const TRANSACTION_TIMEOUT_SINCE: u32 = 170_000;

/// Leaves out, outside `COPY` data, the statements an older server refuses; then hands the
/// script to `inner` (the filter the restore needs anyway).
pub struct OlderServerFilter {
    inner: Box<dyn ScriptFilter>,
    in_copy_data: bool,
    /// The start of a line that has not ended yet.
    pending: Vec<u8>,
    /// What passed this filter, for `inner`.
    passed: Vec<u8>,
}

impl OlderServerFilter {
    pub fn new(inner: Box<dyn ScriptFilter>) -> OlderServerFilter {
        OlderServerFilter {
            inner,
            in_copy_data: false,
            pending: Vec::new(),
            passed: Vec::new(),
        }
    }

    /// One whole line (with its newline, except perhaps the last of the dump).
    fn line(&mut self, line: &[u8]) {
        if self.in_copy_data {
            // `\.` ends the rows of a `COPY … FROM stdin;`.
            self.in_copy_data = line != b"\\.\n";
        } else if line == TRANSACTION_TIMEOUT_LINE {
            return;
        } else {
            self.in_copy_data = line.starts_with(b"COPY ") && line.ends_with(b" FROM stdin;\n");
        }
        self.passed.extend_from_slice(line);
    }

    fn hand_on(&mut self, out: &mut Vec<u8>) {
        self.inner.push(&self.passed, out);
        self.passed.clear();
    }
}

impl ScriptFilter for OlderServerFilter {
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let mut rest = data;
        while let Some(newline) = memchr::memchr(b'\n', rest) {
            let (head, tail) = rest.split_at(newline + 1);
            if self.pending.is_empty() {
                self.line(head);
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(head);
                self.line(&line);
            }
            rest = tail;
        }
        self.pending.extend_from_slice(rest);
        self.hand_on(out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let last = std::mem::take(&mut self.pending);
        if !last.is_empty() {
            self.line(&last);
        }
        self.hand_on(out);
        self.inner.finish(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::script::PassThrough;

    fn filtered(script: &str, piece: usize) -> String {
        let mut filter = OlderServerFilter::new(Box::new(PassThrough));
        let mut out = Vec::new();
        for chunk in script.as_bytes().chunks(piece) {
            filter.push(chunk, &mut out);
        }
        filter.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_transaction_timeout_is_left_out_and_copy_rows_pass_untouched_in_any_pieces() {
        let script = "SET statement_timeout = 0;\nSET transaction_timeout = 0;\n\
                      COPY public.notes (body) FROM stdin;\nSET transaction_timeout = 0;\n\\.\n\
                      \\connect shop\nSET transaction_timeout = 0;\nSELECT 1;";
        let expected = "SET statement_timeout = 0;\n\
                        COPY public.notes (body) FROM stdin;\nSET transaction_timeout = 0;\n\\.\n\
                        \\connect shop\nSELECT 1;";
        for piece in [1, 2, 7, 64, 4096] {
            assert_eq!(filtered(script, piece), expected, "pieces of {piece} bytes");
        }
    }

    #[test]
    fn other_settings_and_look_alikes_pass() {
        let script = "SET transaction_timeout = 5;\n-- SET transaction_timeout = 0;\n";
        assert_eq!(filtered(script, 3), script);
    }
}
