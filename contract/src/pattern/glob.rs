//! One path component against one glob, with the rules of Go's `filepath.Match` (which restic
//! uses for every component of a pattern): `*` is any run of characters, `?` one character,
//! `[a-z]` / `[^a-z]` a class, `\x` the character `x`. Characters are UTF-8 code points; a byte
//! that is not valid UTF-8 counts as one character.

/// A component glob that is not well formed (an unclosed `[`, a trailing `\`, an empty class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPattern;

/// The code point at the start of `bytes` and its length; an invalid byte is U+FFFD of length 1.
fn decode(bytes: &[u8]) -> (char, usize) {
    let end = bytes.len().min(4);
    for len in 1..=end {
        if let Ok(text) = std::str::from_utf8(&bytes[..len]) {
            if let Some(c) = text.chars().next() {
                return (c, len);
            }
        }
    }
    (char::REPLACEMENT_CHARACTER, 1)
}

/// Whether `name` matches `glob`; an error when the glob is not well formed, whatever the name.
pub fn matches(glob: &[u8], name: &[u8]) -> Result<bool, BadPattern> {
    let mut rest_of_glob = glob;
    let mut name = name;
    'chunks: while !rest_of_glob.is_empty() {
        let (star, chunk, rest) = next_chunk(rest_of_glob);
        rest_of_glob = rest;
        if star && chunk.is_empty() {
            // A trailing `*` takes the rest (a component holds no `/`).
            return Ok(true);
        }
        let last = rest_of_glob.is_empty();
        let attempt = match_chunk(chunk, name);
        if let Ok(Some(after)) = attempt {
            if after.is_empty() || !last {
                name = after;
                continue;
            }
        }
        attempt?;
        if star {
            for skip in 1..=name.len() {
                match match_chunk(chunk, &name[skip..]) {
                    Ok(Some(after)) if !last || after.is_empty() => {
                        name = after;
                        continue 'chunks;
                    }
                    Ok(_) => {}
                    Err(bad) => return Err(bad),
                }
            }
        }
        // No match: the rest of the glob must still be well formed.
        while !rest_of_glob.is_empty() {
            let (_, chunk, rest) = next_chunk(rest_of_glob);
            rest_of_glob = rest;
            match_chunk(chunk, b"")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Splits off the leading stars and the run up to the next star outside a class.
fn next_chunk(glob: &[u8]) -> (bool, &[u8], &[u8]) {
    let stars = glob.iter().take_while(|&&b| b == b'*').count();
    let glob = &glob[stars..];
    let mut in_class = false;
    let mut end = 0;
    while end < glob.len() {
        match glob[end] {
            b'\\' if end + 1 < glob.len() => end += 1,
            b'[' => in_class = true,
            b']' => in_class = false,
            b'*' if !in_class => break,
            _ => {}
        }
        end += 1;
    }
    (stars > 0, &glob[..end], &glob[end..])
}

/// Matches `chunk` (no star outside a class) at the start of `name`: what is left of the name,
/// or `None`. The whole chunk is checked for form even after the name stopped matching.
fn match_chunk<'n>(chunk: &[u8], name: &'n [u8]) -> Result<Option<&'n [u8]>, BadPattern> {
    let mut chunk = chunk;
    let mut name = name;
    let mut failed = false;
    while let Some(&first) = chunk.first() {
        if !failed && name.is_empty() {
            failed = true;
        }
        match first {
            b'[' => {
                let mut current = '\0';
                if !failed {
                    let (c, len) = decode(name);
                    current = c;
                    name = &name[len..];
                }
                let (in_class, rest) = match_class(&chunk[1..], current)?;
                chunk = rest;
                failed |= !in_class;
            }
            b'?' => {
                if !failed {
                    name = &name[decode(name).1..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                let literal = if first == b'\\' {
                    chunk = &chunk[1..];
                    *chunk.first().ok_or(BadPattern)?
                } else {
                    first
                };
                if !failed {
                    failed = name[0] != literal;
                    name = &name[1..];
                }
                chunk = &chunk[1..];
            }
        }
    }
    Ok((!failed).then_some(name))
}

/// A class after its `[`: whether `c` is in it, and the glob after its `]`.
fn match_class(class: &[u8], c: char) -> Result<(bool, &[u8]), BadPattern> {
    let (negated, mut class) = match class.first() {
        Some(b'^') => (true, &class[1..]),
        _ => (false, class),
    };
    let mut found = false;
    let mut ranges = 0;
    loop {
        if class.first() == Some(&b']') && ranges > 0 {
            return Ok((found != negated, &class[1..]));
        }
        let (low, rest) = class_char(class)?;
        let (high, rest) = match rest.first() {
            Some(b'-') => class_char(&rest[1..])?,
            _ => (low, rest),
        };
        class = rest;
        found |= low <= c && c <= high;
        ranges += 1;
    }
}

/// One character of a class (maybe escaped); the class must go on after it.
fn class_char(class: &[u8]) -> Result<(char, &[u8]), BadPattern> {
    let class = match class.first() {
        None | Some(b'-') | Some(b']') => return Err(BadPattern),
        Some(b'\\') => &class[1..],
        Some(_) => class,
    };
    if class.is_empty() {
        return Err(BadPattern);
    }
    let (c, len) = decode(class);
    if c == char::REPLACEMENT_CHARACTER && len == 1 {
        return Err(BadPattern);
    }
    let rest = &class[len..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((c, rest))
}

#[cfg(test)]
mod tests {
    use super::{matches, BadPattern};

    fn m(glob: &str, name: &str) -> Result<bool, BadPattern> {
        matches(glob.as_bytes(), name.as_bytes())
    }

    #[test]
    fn stars_questions_and_classes_match_as_in_go() {
        assert_eq!(m("*.txt", "a.txt"), Ok(true));
        assert_eq!(m("*.txt", "a.txt.gz"), Ok(false));
        assert_eq!(m("a*b*c", "axxbyyc"), Ok(true));
        assert_eq!(m("a*b", "ab"), Ok(true));
        assert_eq!(m("?", "é"), Ok(true));
        assert_eq!(m("[a-c]x", "bx"), Ok(true));
        assert_eq!(m("[^a-c]x", "bx"), Ok(false));
        assert_eq!(m("\\*", "*"), Ok(true));
        assert_eq!(m("\\*", "a"), Ok(false));
        assert_eq!(m("[]a]", "a"), Err(BadPattern));
        assert_eq!(m("[", "a"), Err(BadPattern));
        assert_eq!(m("a\\", "a"), Err(BadPattern));
        assert_eq!(m("x[", "a"), Err(BadPattern));
        assert_eq!(m("[a-", "a"), Err(BadPattern));
        assert_eq!(m("*", ""), Ok(true));
        assert_eq!(m("", ""), Ok(true));
        assert_eq!(m("", "a"), Ok(false));
    }
}
