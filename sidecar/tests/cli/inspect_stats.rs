//! `stats`: the restore size, the files by contents and the blobs per file as restic 0.19's
//! `stats --mode restore-size|files-by-contents|blobs-per-file` counts them on the same
//! snapshots, and the raw data as the index's sums for the blobs the snapshots reference.

use super::exact_names::matches_schema;
use super::inspect_common::{build_tree, Restic};
use super::support::restic_binary;
use super::{initialised, text};
use std::fs;

/// The JSON `stats` prints with `args`.
fn stats(sidecar: &super::Sidecar, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["stats", "--json"];
    all.extend(args);
    let printed = sidecar.run(&all).expect_ok().stdout;
    matches_schema("stats.json", &printed, false);
    serde_json::from_str(&printed).unwrap()
}

#[test]
fn restore_size_counts_what_restic_counts_and_raw_data_what_is_stored() {
    let test = "restore_size_counts_what_restic_counts_and_raw_data_what_is_stored";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, repo, sidecar) = initialised();
    let stable = work.path().join("stable");
    let source = stable.join("source");
    build_tree(&source);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    fs::write(
        source.join("docs/later.txt"),
        b"written between the backups\n",
    )
    .unwrap();
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();

    for args in [vec!["latest"], vec![], vec!["--path", text(&source)]] {
        let ours = stats(&sidecar, &args);
        let mut theirs_args = vec!["stats", "--json", "--mode", "restore-size"];
        theirs_args.extend(&args);
        let theirs: serde_json::Value = serde_json::from_str(&restic.run(&theirs_args)).unwrap();
        assert_eq!(ours["totalSize"], theirs["total_size"], "stats {args:?}");
        assert_eq!(
            ours["totalFileCount"], theirs["total_file_count"],
            "stats {args:?}"
        );
        assert_eq!(ours["snapshotsCount"], theirs["snapshots_count"]);
    }
    same_by_contents_as_restic(&restic, &sidecar, &stable);

    // Raw data: both snapshots reference every blob of the repository, so the sums are the
    // index's.
    let raw = stats(&sidecar, &["--mode", "raw-data"]);
    let repository = neverwiped::repository::Repository::open(
        std::sync::Arc::new(neverwiped::backend::local::LocalBackend::new(&repo)),
        super::PASSWORD.as_bytes(),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (blobs, stored, uncompressed) = runtime.block_on(async {
        let mut sums = (0u64, 0u64, 0u64);
        for (_, file) in repository.await.unwrap().index_files().await.unwrap() {
            for pack in &file.packs {
                for blob in &pack.blobs {
                    sums.0 += 1;
                    sums.1 += u64::from(blob.length);
                    sums.2 += u64::from(blob.raw_length);
                }
            }
        }
        sums
    });
    assert_eq!(raw["totalBlobCount"], blobs, "{raw}");
    assert_eq!(raw["totalSize"], stored, "{raw}");
    assert_eq!(raw["totalUncompressedSize"], uncompressed, "{raw}");
    // The tree's text compresses, its noise does not: some of the data is compressed.
    let progress = raw["compressionProgress"].as_f64().unwrap();
    assert!(progress > 0.0 && progress < 100.0, "{raw}");
    assert!(raw["compressionRatio"].as_f64().unwrap() > 1.0, "{raw}");
    // The first snapshot alone lacks the file written later.
    let first = sidecar.snapshots()[0]["id"].as_str().unwrap()[..8].to_owned();
    let first_raw = stats(&sidecar, &["--mode", "raw-data", &first]);
    assert!(
        first_raw["totalBlobCount"].as_u64().unwrap() < blobs,
        "{first_raw}"
    );
}

/// `files-by-contents` and `blobs-per-file` give restic's figures: sizes and file counts on the
/// tree of every kind of entry (whose large files each program cuts into its own chunks), and
/// the blob count too on snapshots (tagged `small`) of files below both programs' smallest
/// chunk: repeated contents, an empty file, a hard link, a file changed between two backups.
fn same_by_contents_as_restic(restic: &Restic, sidecar: &super::Sidecar, stable: &std::path::Path) {
    let small = stable.join("small");
    fs::create_dir_all(small.join("d/e")).unwrap();
    fs::write(small.join("a"), b"same\n").unwrap();
    fs::write(small.join("d/a2"), b"same\n").unwrap();
    fs::write(small.join("empty"), b"").unwrap();
    fs::write(small.join("noise"), super::Noise::new(9).bytes(100_000)).unwrap();
    fs::hard_link(small.join("noise"), small.join("d/e/hard")).unwrap();
    std::os::unix::fs::symlink("a", small.join("link")).unwrap();
    for (round, text_of_x) in [b"first\n".as_slice(), b"second\n"].iter().enumerate() {
        fs::write(small.join("x"), text_of_x).unwrap();
        fs::write(small.join(format!("d/new{round}")), text_of_x).unwrap();
        restic.backup(&small, &["--tag", "small"]);
        sidecar
            .run(&["backup", text(&small), "--tag", "small"])
            .expect_ok();
    }
    let small_only: Vec<&str> = vec!["--tag", "small"];
    let cases: [(Vec<&str>, bool); 4] = [
        (vec![], false),
        (vec!["latest"], false),
        (small_only.clone(), true),
        ([small_only.as_slice(), &["latest"]].concat(), true),
    ];
    for mode in ["files-by-contents", "blobs-per-file"] {
        for (args, blobs_compared) in &cases {
            let mut all = vec!["--mode", mode];
            all.extend(args);
            let ours = stats(sidecar, &all);
            let mut theirs_args = vec!["stats", "--json"];
            theirs_args.extend(&all);
            let theirs: serde_json::Value =
                serde_json::from_str(&restic.run(&theirs_args)).unwrap();
            let what = format!("stats {all:?}: ours {ours}, restic {theirs}");
            assert_eq!(ours["totalSize"], theirs["total_size"], "{what}");
            assert_eq!(ours["totalFileCount"], theirs["total_file_count"], "{what}");
            assert_eq!(ours["snapshotsCount"], theirs["snapshots_count"], "{what}");
            if *blobs_compared && mode == "blobs-per-file" {
                assert_eq!(ours["totalBlobCount"], theirs["total_blob_count"], "{what}");
            }
        }
    }
}
