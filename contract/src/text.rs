//! Names and messages made safe for a terminal, shared by every front end (the sidecar's CLI, the
//! kubectl plugin) and by the operator's status messages.
//!
//! A workload chooses its file names, and they reach an admin's terminal through `ls`, warnings
//! and status. A control character there is an instruction to the terminal (OSC 52 writes the
//! clipboard, cursor moves and erases rewrite what was printed above, a newline forges a line),
//! so every text shown to a person goes through one of these functions:
//!
//! - [`quoted`] for a name (a path, a link target): shown unchanged when it is printable UTF-8,
//!   otherwise in bash's ANSI-C quoting, `$'…'`, which a shell turns back into the exact bytes.
//! - [`escaped`] for free text that quotes names (a warning, an error, a status message): each
//!   control character as `\n`, `\t`, `\r` or `\xHH`, a backslash as `\\`.

use std::borrow::Cow;

/// Whether `c` is a C0 control character, DEL or a C1 control character (U+0080–U+009F).
fn is_control(c: char) -> bool {
    c.is_control()
}

/// Pushes the escape of the control character or raw byte `byte`.
fn push_escape(out: &mut String, byte: u8) {
    match byte {
        b'\n' => out.push_str("\\n"),
        b'\t' => out.push_str("\\t"),
        b'\r' => out.push_str("\\r"),
        byte => out.push_str(&format!("\\x{byte:02x}")),
    }
}

/// Pushes `c` escaped: a control character as the escapes of its UTF-8 bytes (a C1 character is
/// two bytes, `\xc2\x9b`), a backslash (and, in `$'…'`, a single quote) with a backslash.
fn push_char(out: &mut String, c: char, in_quotes: bool) {
    if is_control(c) {
        let mut utf8 = [0u8; 4];
        for &byte in c.encode_utf8(&mut utf8).as_bytes() {
            push_escape(out, byte);
        }
    } else if c == '\\' || (in_quotes && c == '\'') {
        out.push('\\');
        out.push(c);
    } else {
        out.push(c);
    }
}

/// Escapes `bytes` into `out`: valid UTF-8 character by character, every invalid byte as `\xHH`.
fn push_all(out: &mut String, bytes: &[u8], in_quotes: bool) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(out, c, in_quotes);
        }
        for &byte in chunk.invalid() {
            push_escape(out, byte);
        }
    }
}

/// Cuts `text` to at most `max_len` bytes, at a character's boundary.
pub fn truncate_at_char_boundary(text: &mut String, max_len: usize) {
    if text.len() <= max_len {
        return;
    }
    let mut cut = max_len;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
}

/// A name (a path, a link target, any bytes a workload chose) for a terminal: unchanged when it
/// is valid UTF-8 without control characters and does not start with `$'`; otherwise quoted as
/// bash's `$'…'`, in which `\n`, `\t`, `\r`, `\xHH`, `\\` and `\'` stand for the bytes of the
/// name. Pasted into bash, zsh or ksh, the quoted form is the exact name again.
pub fn quoted(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        if !text.chars().any(is_control) && !text.starts_with("$'") {
            return Cow::Borrowed(text);
        }
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    out.push_str("$'");
    push_all(&mut out, bytes, true);
    out.push('\'');
    Cow::Owned(out)
}

/// Free text for a terminal or a status message (a warning, an error, a result's message): each
/// control character as `\n`, `\t`, `\r` or `\xHH` (of its UTF-8 bytes), each backslash as `\\`,
/// so the text is one line that says exactly what it was.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| is_control(c) || c == '\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    push_all(&mut out, text.as_bytes(), false);
    Cow::Owned(out)
}

/// A status message for a terminal. The operator stores its messages [`escaped`]; whoever may write
/// status may also store raw text. So control characters are escaped as [`escaped`] does, and
/// backslashes are left alone: the operator's escapes show once (`\x1b`, not `\\x1b`), and a
/// control character written by hand still cannot reach the terminal.
pub fn escaped_status(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_control(c) {
            let mut utf8 = [0u8; 4];
            for &byte in c.encode_utf8(&mut utf8).as_bytes() {
                push_escape(&mut out, byte);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escaped`] for bytes that may not be UTF-8: each invalid byte as `\xHH`.
pub fn escaped_bytes(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => escaped(text),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 8);
            push_all(&mut out, bytes, false);
            Cow::Owned(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_message_escaped_by_the_operator_is_escaped_once_for_a_terminal() {
        let written = "warning: cannot read \x1b]52;c;aGk=\x07 in C:\\data";
        let stored = escaped(written);
        // Shown as stored: no backslash doubled again.
        assert_eq!(escaped_status(&stored), stored);
        // A raw control character written into status by hand is still escaped.
        assert_eq!(escaped_status("a\u{1b}[2Jb\\c"), "a\\x1b[2Jb\\c");
    }

    /// Undoes bash's `$'…'` for the escapes [`quoted`] writes.
    fn unquote(shown: &str) -> Vec<u8> {
        let Some(inner) = shown
            .strip_prefix("$'")
            .and_then(|rest| rest.strip_suffix('\''))
        else {
            return shown.as_bytes().to_vec();
        };
        let mut bytes = Vec::new();
        let mut rest = inner.as_bytes();
        while let Some((&first, tail)) = rest.split_first() {
            if first != b'\\' {
                bytes.push(first);
                rest = tail;
                continue;
            }
            let (byte, used) = match tail[0] {
                b'n' => (b'\n', 1),
                b't' => (b'\t', 1),
                b'r' => (b'\r', 1),
                b'x' => {
                    let hex = std::str::from_utf8(&tail[1..3]).unwrap();
                    (u8::from_str_radix(hex, 16).unwrap(), 3)
                }
                other => (other, 1),
            };
            bytes.push(byte);
            rest = &tail[used..];
        }
        bytes
    }

    #[test]
    fn a_printable_name_is_shown_as_it_is() {
        for name in ["/data/app/conf.yaml", "café ü 日本", "it's a\\b", "$x"] {
            assert_eq!(quoted(name.as_bytes()), name);
        }
    }

    #[test]
    fn control_characters_and_invalid_bytes_are_quoted_and_come_back_exactly() {
        let names: [&[u8]; 6] = [
            b"\x1b]52;c;cm0gLXJmIH4K\x07",
            b"two\nlines",
            b"\x1b[2J\x1b[Hclean",
            "c1 \u{9b}31m and \u{85}".as_bytes(),
            b"bad \xff\xfe utf-8 'quoted' \\x41 \x7f",
            b"$'already quoted'",
        ];
        for name in names {
            let shown = quoted(name);
            assert!(shown.starts_with("$'"), "{shown}");
            assert!(!shown.chars().any(char::is_control), "{shown:?}");
            assert_eq!(unquote(&shown), name, "{shown}");
        }
        assert_eq!(
            quoted(b"a\x1b]52;c;x\x07\n\xff"),
            r"$'a\x1b]52;c;x\x07\n\xff'"
        );
        assert_eq!(quoted("\u{9b}".as_bytes()), r"$'\xc2\x9b'");
    }

    #[test]
    fn free_text_becomes_one_line_without_control_characters() {
        assert_eq!(
            escaped("cannot read /data/x: denied"),
            "cannot read /data/x: denied"
        );
        assert_eq!(
            escaped("cannot read /data/\x1b[2J\nok: denied \\"),
            r"cannot read /data/\x1b[2J\nok: denied \\"
        );
        assert_eq!(escaped_bytes(b"a\xffb"), r"a\xffb");
        assert_eq!(escaped("\u{85}"), r"\xc2\x85");
    }
}
