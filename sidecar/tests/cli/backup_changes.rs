//! A backup's result says what it changed against its parent: files new, changed, unmodified and
//! removed, and the new content's bytes before and after compression.

use std::fs;

use super::fixtures::Noise;
use super::{initialised, read_result, text};

#[test]
fn the_result_counts_files_new_changed_unmodified_removed_and_new_bytes() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(source.join("sub")).unwrap();
    fs::write(source.join("keep.txt"), b"this file stays as it is\n").unwrap();
    fs::write(source.join("sub/keep-too.txt"), b"so does this one\n").unwrap();
    fs::write(source.join("change.txt"), b"before\n").unwrap();
    for name in ["gone-1.txt", "gone-2.txt", "sub/gone-3.txt"] {
        fs::write(source.join(name), format!("{name} is removed later\n")).unwrap();
    }
    let result_file = work.path().join("result.json");
    let backup = |source: &std::path::Path| {
        sidecar
            .run(&["backup", text(source), "--result-file", text(&result_file)])
            .expect_ok();
        read_result(&result_file)
            .changes
            .expect("a backup's result carries its changes")
    };
    let first = backup(&source);
    assert!(!first.has_parent, "{first:?}");
    assert_eq!(
        (first.files_new, first.files_changed, first.files_unmodified),
        (6, 0, 0),
        "{first:?}"
    );
    assert_eq!(first.files_removed, 0, "{first:?}");

    // Two files added (one of them random bytes, which do not compress), one changed, three
    // removed (one of them in a subfolder), two left alone.
    let text_bytes = "a line of a log file that repeats\n"
        .repeat(300)
        .into_bytes();
    let noise = Noise::new(38).bytes(200_000);
    let changed = b"after, and longer\n";
    fs::write(source.join("added.log"), &text_bytes).unwrap();
    fs::write(source.join("sub/added.bin"), &noise).unwrap();
    fs::write(source.join("change.txt"), changed).unwrap();
    for name in ["gone-1.txt", "gone-2.txt", "sub/gone-3.txt"] {
        fs::remove_file(source.join(name)).unwrap();
    }
    let second = backup(&source);
    assert!(second.has_parent, "{second:?}");
    assert_eq!(
        (
            second.files_new,
            second.files_changed,
            second.files_unmodified,
            second.files_removed
        ),
        (2, 1, 2, 3),
        "{second:?}"
    );
    // Each new file is one blob (each below the smallest chunk); the unchanged ones add nothing.
    let raw = (text_bytes.len() + noise.len() + changed.len()) as u64;
    assert_eq!(second.new_bytes_raw, raw, "{second:?}");
    // The random bytes and the short file are stored as they are; the text as zstd (level 3)
    // compresses it.
    let text_compressed = zstd::bulk::compress(&text_bytes, 3).unwrap().len() as u64;
    assert!(text_compressed < 200, "{text_compressed}");
    let compressed = noise.len() as u64 + changed.len() as u64 + text_compressed;
    assert_eq!(second.new_bytes_compressed, compressed, "{second:?}");

    // A night that changes nothing: every file unmodified, no new byte.
    let quiet = backup(&source);
    assert_eq!(
        (
            quiet.files_new,
            quiet.files_changed,
            quiet.files_unmodified,
            quiet.files_removed,
            quiet.new_bytes_raw,
            quiet.new_bytes_compressed
        ),
        (0, 0, 5, 0, 0, 0),
        "{quiet:?}"
    );
}
