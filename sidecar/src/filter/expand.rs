//! Pattern files as restic reads them: one pattern a line, blank lines and `#` comments skipped,
//! white space trimmed, and environment variables expanded (`$NAME`, `${NAME}`; `$$` is a `$`)
//! with the rules of Go's `os.Expand`. Patterns given on the command line are not expanded.

use std::path::Path;

/// The patterns of a pattern file's text.
pub fn patterns_of_text(text: &str, getenv: &dyn Fn(&str) -> String) -> Vec<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line).trim())
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| expand(line, getenv))
        .collect()
}

/// Reads the patterns of a pattern file, expanding variables from this process's environment.
pub fn read_pattern_file(path: &Path) -> std::io::Result<Vec<String>> {
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the file is not UTF-8 text",
        )
    })?;
    let getenv = |name: &str| {
        if name == "$" {
            "$".to_owned()
        } else {
            std::env::var(name).unwrap_or_default()
        }
    };
    Ok(patterns_of_text(&text, &getenv))
}

/// `$NAME` and `${NAME}` replaced by `getenv(NAME)`; a `$` followed by no name stays.
pub fn expand(line: &str, getenv: &dyn Fn(&str) -> String) -> String {
    let bytes = line.as_bytes();
    let mut expanded = String::with_capacity(line.len());
    let mut copied_up_to = 0;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'$' && at + 1 < bytes.len() {
            expanded.push_str(&line[copied_up_to..at]);
            let (name, width) = shell_name(&line[at + 1..]);
            match name {
                // Bad syntax (`${}`, an unclosed `${`): the characters are dropped.
                None if width > 0 => {}
                None => expanded.push('$'),
                Some(name) => expanded.push_str(&getenv(name)),
            }
            at += width;
            copied_up_to = at + 1;
        }
        at += 1;
    }
    expanded.push_str(&line[copied_up_to.min(line.len())..]);
    expanded
}

fn is_special(byte: u8) -> bool {
    matches!(
        byte,
        b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-' | b'0'..=b'9'
    )
}

/// The variable name at the start of `text` (after a `$`) and how many bytes it takes.
fn shell_name(text: &str) -> (Option<&str>, usize) {
    let bytes = text.as_bytes();
    if bytes[0] == b'{' {
        if bytes.len() > 2 && is_special(bytes[1]) && bytes[2] == b'}' {
            return (Some(&text[1..2]), 3);
        }
        return match bytes.iter().skip(1).position(|&b| b == b'}') {
            Some(0) => (None, 2),
            Some(offset) => (Some(&text[1..offset + 1]), offset + 2),
            None => (None, 1),
        };
    }
    if is_special(bytes[0]) {
        return (Some(&text[..1]), 1);
    }
    let width = bytes
        .iter()
        .take_while(|&&b| b == b'_' || b.is_ascii_alphanumeric())
        .count();
    if width == 0 {
        (None, 0)
    } else {
        (Some(&text[..width]), width)
    }
}

#[cfg(test)]
mod tests {
    use super::{expand, patterns_of_text};

    fn env(name: &str) -> String {
        match name {
            "HOME" => "/home/me".into(),
            "$" => "$".into(),
            _ => String::new(),
        }
    }

    #[test]
    fn variables_expand_as_go_os_expand_does() {
        assert_eq!(expand("$HOME/cache", &env), "/home/me/cache");
        assert_eq!(expand("${HOME}x", &env), "/home/mex");
        assert_eq!(expand("a$$b", &env), "a$b");
        assert_eq!(expand("$UNSET/x", &env), "/x");
        assert_eq!(expand("a$", &env), "a$");
        assert_eq!(expand("a$/b", &env), "a$/b");
        assert_eq!(expand("a${}b", &env), "ab");
        assert_eq!(expand("a${b", &env), "ab");
    }

    #[test]
    fn files_skip_comments_and_blank_lines() {
        let text = "\u{feff}# comment\n\n  *.log  \r\n$HOME/x\n";
        assert_eq!(patterns_of_text(text, &env), vec!["*.log", "/home/me/x"]);
    }
}
