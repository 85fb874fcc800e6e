//! A restore is planned and restored a batch of entries at a time, so that its memory does not
//! grow with the number of files. Every batch size must give back the same tree: a directory
//! whose entries span batches, hard links to a file of an earlier batch, directories' metadata
//! set at the very end.

mod support;

use neverwiped::archive::{backup, BackupOptions, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::restore::{restore, RestoreOptions};
use std::sync::Arc;
use support::fixtures::{assert_same_tree, build_fidelity_tree, init_repository as init, is_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_batch_size_restores_every_kind_of_entry_identically() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_fidelity_tree(&source);
    // A directory of many small files, to be cut across batches.
    std::fs::create_dir(source.join("many")).unwrap();
    for number in 0..50 {
        std::fs::write(
            source.join(format!("many/{number:02}")),
            format!("small file {number}\n").repeat(number),
        )
        .unwrap();
    }
    let repo = init(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let report = backup(
        &repo,
        BackupOptions::new(vec![Source::Path(source.clone())]),
    )
    .await
    .unwrap();
    for batch_entries in [1, 2, 3, 7, 64] {
        let target = work.path().join(format!("target-{batch_entries}"));
        let mut options = RestoreOptions::new(&target);
        options.batch_entries = batch_entries;
        let restored = restore(&repo, report.snapshot.tree, &options)
            .await
            .unwrap_or_else(|e| panic!("batches of {batch_entries}: {e}"));
        assert_eq!(
            restored.files, report.snapshot.summary.files,
            "batches of {batch_entries}"
        );
        assert_same_tree(
            &source,
            &target.join(source.strip_prefix("/").unwrap()),
            is_root(),
        );
    }
}
