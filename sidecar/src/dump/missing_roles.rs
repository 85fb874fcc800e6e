//! Roles a `pg_dump` of one database names without creating them: `ALTER … OWNER TO app;`,
//! `GRANT … TO app;`, `REVOKE … FROM app;`. Its own server has them; a drill's fresh server does
//! not, and the load would fail on the first. This filter creates each such role (without any
//! attribute or password) just before the first line that names it, unless it exists.
//! COPY data passes untouched.

use super::postgres::{parse_ident, quote_ident};
use super::script::ScriptFilter;
use std::collections::HashSet;

const DO_TAG: &str = "$neverwiped_missing_role$";

/// The filter: lines of the dump in, with the roles created first, then `inner`.
pub struct MissingRoles {
    /// Roles created or known to exist (the connecting one).
    known: HashSet<String>,
    in_copy: bool,
    pending: Vec<u8>,
    rewritten: Vec<u8>,
    inner: Box<dyn ScriptFilter>,
}

impl MissingRoles {
    pub fn new(connecting_role: &str, inner: Box<dyn ScriptFilter>) -> MissingRoles {
        MissingRoles {
            known: HashSet::from([connecting_role.to_owned()]),
            in_copy: false,
            pending: Vec::new(),
            rewritten: Vec::new(),
            inner,
        }
    }

    fn line(&mut self, line: &[u8]) {
        if self.in_copy {
            self.in_copy = line != b"\\.\n" && line != b"\\.";
        } else if let Ok(text) = std::str::from_utf8(line) {
            let body = text.trim_end_matches(['\n', '\r']);
            self.in_copy = body.starts_with("COPY ") && body.ends_with(" FROM stdin;");
            if let Some(role) = named_role(body).filter(|role| !self.known.contains(role)) {
                let create = format!(
                    "DO {DO_TAG}BEGIN CREATE ROLE {}; EXCEPTION WHEN duplicate_object THEN NULL; END{DO_TAG};\n",
                    quote_ident(&role)
                );
                self.rewritten.extend_from_slice(create.as_bytes());
                self.known.insert(role);
            }
        }
        self.rewritten.extend_from_slice(line);
    }
}

/// The role a statement of pg_dump gives something to or takes it from, if any.
fn named_role(body: &str) -> Option<String> {
    let after = if body.starts_with("ALTER ") {
        body.rsplit_once(" OWNER TO ")?.1
    } else if body.starts_with("GRANT ") {
        body.rsplit_once(" TO ")?.1
    } else if body.starts_with("REVOKE ") {
        body.rsplit_once(" FROM ")?.1
    } else {
        return None;
    };
    // PUBLIC, CURRENT_USER and the like are upper case: not an identifier pg_dump writes.
    let (role, _) = parse_ident(after)?;
    Some(role)
}

impl ScriptFilter for MissingRoles {
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(data);
        let mut start = 0;
        while let Some(newline) = memchr::memchr(b'\n', &self.pending[start..]) {
            let end = start + newline + 1;
            let line = self.pending[start..end].to_vec();
            self.line(&line);
            start = end;
        }
        self.pending.drain(..start);
        self.inner.push(&self.rewritten, out);
        self.rewritten.clear();
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let pending = std::mem::take(&mut self.pending);
        if !pending.is_empty() {
            self.line(&pending);
        }
        self.inner.push(&self.rewritten, out);
        self.rewritten.clear();
        self.inner.finish(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::script::PassThrough;

    fn filtered(dump: &str, piece: usize) -> String {
        let mut filter = MissingRoles::new("drill", Box::new(PassThrough));
        let mut out = Vec::new();
        for chunk in dump.as_bytes().chunks(piece) {
            filter.push(chunk, &mut out);
        }
        filter.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_named_role_is_created_once_before_its_first_line() {
        let dump = "CREATE TABLE public.t (id integer);\n\
                    ALTER TABLE public.t OWNER TO app;\n\
                    COPY public.t (id) FROM stdin;\n\
                    ALTER TABLE x OWNER TO copied;\n\
                    \\.\n\
                    GRANT SELECT ON TABLE public.t TO \"Reader\";\n\
                    GRANT ALL ON SCHEMA public TO PUBLIC;\n\
                    REVOKE ALL ON TABLE public.t FROM app;\n\
                    ALTER TABLE public.u OWNER TO drill;\n";
        for piece in [1, 7, 4096] {
            let out = filtered(dump, piece);
            let created: Vec<&str> = out
                .lines()
                .filter(|l| l.starts_with("DO "))
                .map(|l| {
                    l.split("CREATE ROLE ")
                        .nth(1)
                        .unwrap()
                        .split(';')
                        .next()
                        .unwrap()
                })
                .collect();
            assert_eq!(created, ["\"app\"", "\"Reader\""], "{out}");
            assert!(out.ends_with("ALTER TABLE public.u OWNER TO drill;\n"));
            let app = out.find("CREATE ROLE \"app\"").unwrap();
            assert!(app < out.find("OWNER TO app").unwrap());
        }
    }
}
