//! `ls -l` in restic's layout and `ls SNAPSHOT FOLDER…` by restic's rules (a folder and its
//! direct entries; all below with `--recursive`), held to restic 0.19 on the same tree.

use super::inspect_common::{build_tree, Restic};
use super::support::restic_binary;
use super::{initialised, text};
use std::ffi::OsStr;

/// restic's mode column (Go's `FileMode` text: `L` for a symlink, `u`/`g`/`t` letters before the
/// permissions) in `ls -l`'s letters, the ones neverwiped prints.
fn as_ls_shows_it(go_mode: &str) -> String {
    let split = go_mode.len() - 9;
    let (letters, permissions) = go_mode.split_at(split);
    let type_letter = match letters {
        l if l.contains('d') => 'd',
        l if l.contains('L') => 'l',
        l if l.contains('p') => 'p',
        l if l.contains('D') && l.contains('c') => 'c',
        l if l.contains('D') => 'b',
        l if l.contains('S') => 's',
        _ => '-',
    };
    let mut shown: Vec<char> = std::iter::once(type_letter)
        .chain(permissions.chars())
        .collect();
    for (letter, at, set) in [('u', 3, 's'), ('g', 6, 's'), ('t', 9, 't')] {
        if letters.contains(letter) {
            shown[at] = if shown[at] == 'x' {
                set
            } else {
                set.to_ascii_uppercase()
            };
        }
    }
    shown.into_iter().collect()
}

/// restic's `ls -l` lines, its header left out, the mode column as `ls -l` writes it.
fn restic_long(restic: &Restic, args: &[&str]) -> Vec<String> {
    let mut all = vec!["ls", "--long", "latest"];
    all.extend(args);
    restic
        .run(&all)
        .lines()
        .filter(|line| !line.starts_with("snapshot "))
        .map(|line| {
            let (mode, rest) = line.split_once(' ').unwrap();
            format!("{} {rest}", as_ls_shows_it(mode))
        })
        .collect()
}

#[test]
fn ls_long_and_folder_listings_match_restic_on_the_same_tree() {
    let test = "ls_long_and_folder_listings_match_restic_on_the_same_tree";
    let Some(restic_path) = restic_binary(test) else {
        return;
    };
    let (work, _repo, sidecar) = initialised();
    // Folders above `stable` change as the repositories and other tests' folders are made: only
    // what is below it is compared.
    let stable = work.path().join("stable");
    let source = stable.join("source");
    build_tree(&source);
    let restic = Restic::init(restic_path, work.path());
    restic.backup(&source, &[]);
    sidecar.run(&["backup", text(&source)]).expect_ok();

    let docs = format!("{}/docs", text(&source));
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec![text(&source)],
        vec![&docs],
        vec![&docs, "--recursive"],
        vec![text(&source), "--recursive"],
    ];
    for case in cases {
        let mut ours = vec!["ls", "-l", "latest"];
        ours.extend(&case);
        let listing = sidecar.run(&ours).expect_ok().stdout;
        let below = |line: &&str| line.contains(text(&stable));
        let theirs: Vec<String> = restic_long(&restic, &case);
        let theirs: Vec<&str> = theirs.iter().map(String::as_str).filter(below).collect();
        assert!(theirs.len() > 3, "{theirs:?}");
        assert_eq!(
            listing.lines().filter(below).collect::<Vec<_>>(),
            theirs,
            "ls -l {case:?} differs from restic's"
        );
    }
    // Symlink targets are shown, quoted as names are.
    let listing = sidecar
        .run(&["ls", "latest", text(&source)])
        .expect_ok()
        .stdout;
    assert!(
        listing.contains(&format!("{}/link -> docs/a.txt\n", text(&source))),
        "{listing}"
    );
    let docs_listing = sidecar.run(&["ls", "latest", &docs]).expect_ok().stdout;
    assert!(
        docs_listing.contains("/docs/dangling -> /nowhere/at all\n"),
        "{docs_listing}"
    );
}

#[test]
fn ls_of_a_folder_not_in_the_snapshot_or_not_absolute_is_refused() {
    let (work, _repo, sidecar) = initialised();
    let source = work.path().join("source");
    build_tree(&source);
    sidecar.run(&["backup", text(&source)]).expect_ok();
    let missing = format!("{}/no-such-folder", text(&source));
    let run = sidecar.run(&["ls", "latest", &missing]).expect_code(1);
    assert!(
        run.error_line()
            .contains("no-such-folder is not in snapshot latest"),
        "{}",
        run.stderr
    );
    let run = sidecar
        .run(&[OsStr::new("ls"), OsStr::new("latest"), OsStr::new("docs")])
        .expect_code(1);
    assert!(
        run.error_line().contains("not an absolute snapshot path"),
        "{}",
        run.stderr
    );
}
