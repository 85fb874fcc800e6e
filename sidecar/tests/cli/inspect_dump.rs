//! `dump SNAPSHOT PATH`: a file's bytes, to standard output or `--target`, equal to the original
//! (a file spanning several packs too); a folder is an archive; a link or a missing path is
//! refused.

use super::support::fixtures::{sha256_file, Noise};
use super::{initialised, text};
use sha2::{Digest, Sha256};
use std::fs;

#[test]
fn dump_writes_a_files_exact_bytes_and_refuses_a_link() {
    let (work, repo, sidecar) = initialised();
    let source = work.path().join("source");
    fs::create_dir_all(source.join("folder")).unwrap();
    // 40 MiB of noise: more than several packs.
    fs::write(source.join("large.bin"), Noise::new(8).bytes(40 << 20)).unwrap();
    fs::write(source.join("folder/small.txt"), b"small\n").unwrap();
    fs::write(source.join("empty"), b"").unwrap();
    std::os::unix::fs::symlink("folder", source.join("link")).unwrap();
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let packs = super::support::fixtures::repository_objects(&repo)
        .iter()
        .filter(|(path, _)| path.starts_with(repo.join("data")))
        .count();
    assert!(packs >= 4, "the large file spans {packs} pack(s)");

    let large = format!("{}/large.bin", text(&source));
    let mut command = sidecar.command();
    let output = command.args(["dump", "latest", &large]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        hex::encode(Sha256::digest(&output.stdout)),
        sha256_file(&source.join("large.bin"))
    );

    let target = work.path().join("out.txt");
    let small = format!("{}/folder/small.txt", text(&source));
    sidecar
        .run(&["dump", "latest", &small, "--target", text(&target)])
        .expect_ok();
    assert_eq!(fs::read(&target).unwrap(), b"small\n");
    let empty = format!("{}/empty", text(&source));
    let run = sidecar.run(&["dump", "latest", &empty]).expect_ok();
    assert!(run.stdout.is_empty());

    // A folder is an archive (compared with restic's in inspect_archive.rs); a link is refused.
    let folder = format!("{}/folder", text(&source));
    let tar = sidecar.run(&["dump", "latest", &folder]).expect_ok();
    assert!(tar.stdout.contains("/folder/small.txt"), "{}", tar.stdout);
    let link = format!("{}/link", text(&source));
    let refused = sidecar.run(&["dump", "latest", &link]).expect_code(1);
    assert!(
        refused.error_line().contains("neither a file nor a folder"),
        "{}",
        refused.stderr
    );
    let missing = format!("{}/missing", text(&source));
    let refused = sidecar.run(&["dump", "latest", &missing]).expect_code(1);
    assert!(
        refused.error_line().contains("is not in snapshot latest"),
        "{}",
        refused.stderr
    );
}
