//! A plan volume's `excludeCaches`, `excludeIfPresent` and `excludeLargerThan` in the backup
//! Job's arguments: each scoped to that volume's folder, and nothing for a volume without them.

use super::tests::{plan, settings};
use super::*;
use neverwiped_contract::cli::ScopedSelection;

/// The run of `tests::run`, with scoped options on the `data` volume only.
pub(super) fn run() -> BackupRun {
    let mut run = super::tests::run();
    let data = run
        .volumes
        .iter_mut()
        .find(|v| v.source_claim == "data")
        .expect("the run backs up data");
    data.selection = ScopedSelection {
        exclude_caches: true,
        exclude_if_present: vec![".nobackup".into(), "TAG:$(HOME) sig".into()],
        exclude_larger_than: Some("500M".into()),
    };
    run
}

fn args(run: &BackupRun) -> Vec<String> {
    let job = backup_job(&plan(), run, &settings());
    let pod = job.spec.unwrap().template.spec.unwrap();
    pod.containers[0].args.clone().unwrap()
}

#[test]
fn scoped_options_follow_the_excludes_and_name_their_volume() {
    let args = args(&run());
    let start = args.iter().position(|a| a == "--limit-upload").unwrap();
    let excludes = args.iter().rposition(|a| a == "--exclude").unwrap() + 2;
    assert_eq!(
        args[excludes..start],
        [
            "--exclude-caches-in",
            "/data/data",
            "--exclude-if-present-in",
            "/data/data=.nobackup",
            // Kubernetes would expand `$(HOME)`: it is passed as written.
            "--exclude-if-present-in",
            "/data/data=TAG:$$(HOME) sig",
            "--exclude-larger-than-in",
            "/data/data=500M",
        ]
    );
}

#[test]
fn a_volume_without_them_adds_no_argument() {
    let args = args(&super::tests::run());
    assert!(
        !args.iter().any(|a| a.ends_with("-in")),
        "no scoped option: {args:?}"
    );
}

#[test]
fn each_volume_gets_its_own_scope() {
    let mut run = run();
    let logs = run
        .volumes
        .iter_mut()
        .find(|v| v.source_claim == "logs")
        .unwrap();
    logs.selection.exclude_larger_than = Some("1k".into());
    let args = args(&run);
    let sizes: Vec<&str> = args
        .windows(2)
        .filter(|pair| pair[0] == "--exclude-larger-than-in")
        .map(|pair| pair[1].as_str())
        .collect();
    assert_eq!(sizes, ["/data/data=500M", "/data/logs=1k"]);
}
