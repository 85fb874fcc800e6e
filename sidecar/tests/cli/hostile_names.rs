//! Names a workload chose reach a person's terminal only escaped: `ls` quotes them as bash's
//! `$'…'` (one line per entry, whatever the name holds), and warnings and errors escape them.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;

use super::{initialised, text};

/// OSC 52 writes the reader's clipboard; the newline would start a forged line of `ls`.
const CLIPBOARD: &[u8] = b"\x1b]52;c;cm0gLXJmIH4K\x07note\nforged\xff";
const CLIPBOARD_SHOWN: &str = r"$'\x1b]52;c;cm0gLXJmIH4K\x07note\nforged\xff'";

fn without_terminal_controls(what: &str, bytes: &str) {
    assert!(
        !bytes.chars().any(|c| c.is_control() && c != '\n'),
        "{what} holds control characters: {bytes:?}"
    );
}

#[test]
fn ls_quotes_names_with_control_characters_one_line_per_entry() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    fs::write(source.join(OsStr::from_bytes(CLIPBOARD)), b"hi").unwrap();
    fs::write(source.join("plain"), b"plain").unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"\x1b[2J"), source.join("link")).unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let listing = sidecar
        .run(&["ls", "latest", text(&source)])
        .expect_ok()
        .stdout;
    without_terminal_controls("ls", &listing);
    // The folder itself and its three entries.
    assert_eq!(listing.lines().count(), 4, "{listing}");
    let expected = format!("{}/{}", &text(&source)[1..], &CLIPBOARD_SHOWN[2..]);
    assert!(listing.contains(&format!("$'/{expected}")), "{listing}");
    assert!(
        listing.contains(&format!("  {}/plain\n", text(&source))),
        "{listing}"
    );
}

#[test]
fn warnings_and_errors_escape_the_names_they_quote() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    fs::write(source.join("plain"), b"plain").unwrap();
    // A socket is skipped with a warning that names it.
    let socket = source.join(OsStr::from_bytes(b"\x1b[2J\x1b[Hsock\n"));
    let _socket = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let run = sidecar
        .run(&["backup", text(&source), "--log-format", "text"])
        .expect_ok();
    without_terminal_controls("the warnings", &run.stderr);
    assert!(
        run.stderr.contains(r"\x1b[2J\x1b[Hsock\n"),
        "{}",
        run.stderr
    );
    let missing = sidecar
        .run(&[
            OsStr::new("ls"),
            OsStr::new("latest"),
            OsStr::new("--log-format"),
            OsStr::new("text"),
            &source
                .join(OsStr::from_bytes(b"\x1b]0;owned\x07"))
                .into_os_string(),
        ])
        .expect_code(1);
    without_terminal_controls("the error", &missing.stderr);
    assert!(
        missing.stderr.contains(r"\x1b]0;owned\x07"),
        "{}",
        missing.stderr
    );
}
