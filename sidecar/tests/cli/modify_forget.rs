//! `forget` keeps and removes what restic's would: the same calendar of snapshots (times, hosts,
//! tags, paths) is made with restic 0.19 and with the sidecar (`backup --time`), and both run
//! `forget --dry-run --json` with the same rules; the kept and removed sets must be equal for every
//! rule, filter and grouping, hand-picked and generated.

use super::exact_names::matches_schema;
use super::support::restic_binary;
use super::{initialised_cheaply, text, Sidecar};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;

const RESTIC_PASSWORD: &str = "restic forget test";
/// A zone with a half-hour offset: periods (days, weeks) must be those of the recorded time.
const ZONE: &str = "Asia/Kolkata";

/// A snapshot as both sides report it: UTC time in seconds, host, sorted tags, sorted paths.
type Key = (i64, String, Vec<String>, Vec<String>);

/// A small deterministic generator (xorshift), so a failing case can be run again.
struct Dice(u64);

impl Dice {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// One snapshot of the calendar: local time (`YYYY-MM-DD HH:MM:SS` in [`ZONE`]), host, tags,
/// which source folder.
struct Planned {
    time: String,
    host: &'static str,
    tags: &'static [&'static str],
    source: usize,
}

/// About 60 snapshots over two and a half years, at uneven intervals from minutes to weeks, so
/// that every period has gaps and crowds.
fn calendar() -> Vec<Planned> {
    let mut dice = Dice(0x5eed_f0f0_1234_5678);
    let mut time = chrono::NaiveDate::from_ymd_opt(2024, 1, 30)
        .unwrap()
        .and_hms_opt(23, 10, 0)
        .unwrap();
    let steps_minutes = [
        17,
        50,
        95,
        60 * 5,
        60 * 23,
        60 * 26,
        60 * 24 * 3,
        60 * 24 * 9,
        60 * 24 * 31,
    ];
    let tag_sets: [&[&str]; 4] = [&[], &["daily"], &["daily", "keep"], &["manual"]];
    (0..60)
        .map(|_| {
            let step = steps_minutes[dice.below(steps_minutes.len() as u64) as usize];
            time += chrono::Duration::minutes(step + dice.below(40) as i64);
            Planned {
                time: time.format("%Y-%m-%d %H:%M:%S").to_string(),
                host: ["alpha", "beta"][dice.below(2) as usize],
                tags: tag_sets[dice.below(4) as usize],
                source: dice.below(2) as usize,
            }
        })
        .collect()
}

fn key_of(snapshot: &serde_json::Value) -> Key {
    let time = chrono::DateTime::parse_from_rfc3339(snapshot["time"].as_str().unwrap())
        .unwrap()
        .timestamp();
    let strings = |value: &serde_json::Value| -> Vec<String> {
        let mut list: Vec<String> = value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        list.sort();
        list
    };
    (
        time,
        snapshot["hostname"].as_str().unwrap().to_owned(),
        strings(&snapshot["tags"]),
        strings(&snapshot["paths"]),
    )
}

/// restic's verdicts: (kept, removed).
fn restic_verdicts(output: &str) -> (BTreeSet<Key>, BTreeSet<Key>) {
    let groups: Vec<serde_json::Value> = serde_json::from_str(output)
        .unwrap_or_else(|e| panic!("restic forget --json is not JSON ({e}): {output}"));
    let mut kept = BTreeSet::new();
    let mut removed = BTreeSet::new();
    for group in &groups {
        for (list, set) in [("keep", &mut kept), ("remove", &mut removed)] {
            for snapshot in group[list].as_array().into_iter().flatten() {
                set.insert(key_of(snapshot));
            }
        }
    }
    (kept, removed)
}

/// The sidecar's verdicts: (kept, removed).
fn our_verdicts(output: &str) -> (BTreeSet<Key>, BTreeSet<Key>) {
    let printed: serde_json::Value = serde_json::from_str(output)
        .unwrap_or_else(|e| panic!("forget --json is not JSON ({e}): {output}"));
    let mut kept = BTreeSet::new();
    let mut removed = BTreeSet::new();
    for group in printed["groups"].as_array().unwrap() {
        for verdict in group["snapshots"].as_array().unwrap() {
            let key = key_of(&verdict["snapshot"]);
            if verdict["keep"].as_bool().unwrap() {
                kept.insert(key);
            } else {
                removed.insert(key);
            }
        }
    }
    (kept, removed)
}

/// The hand-picked rule sets: every option, alone and combined. `SRC0` stands for the first
/// source folder.
fn hand_picked() -> Vec<Vec<String>> {
    let cases: &[&str] = &[
        "--keep-last 3",
        "--keep-hourly 5",
        "--keep-daily 7",
        "--keep-weekly 4",
        "--keep-monthly 6",
        "--keep-yearly 2",
        "--keep-daily 7 --keep-weekly 4 --keep-monthly 12 --keep-yearly 3",
        "--keep-monthly 100",
        "--keep-daily unlimited",
        "--keep-within 1y2m",
        "--keep-within 3d12h",
        "--keep-within 1m",
        "--keep-within 2y1d",
        "--keep-within-hourly 2d",
        "--keep-within-daily 1m",
        "--keep-within-weekly 3m",
        "--keep-within-monthly 1y",
        "--keep-within-yearly 5y",
        "--keep-tag keep",
        "--keep-tag daily,keep --keep-last 1",
        "--keep-tag manual --keep-tag keep",
        "--keep-tag EMPTY --keep-last 2",
        "--keep-last 2 --host alpha",
        "--keep-last 2 --host alpha --host beta",
        "--keep-last 2 --tag daily",
        "--keep-daily 3 --tag daily,keep --tag manual",
        "--keep-weekly 3 --tag EMPTY",
        "--keep-weekly 3 --path SRC0",
        "--keep-monthly 2 --group-by host",
        "--keep-monthly 2 --group-by tags",
        "--keep-last 1 --group-by EMPTY",
        "--keep-daily 5 --group-by host,paths,tags",
        "--keep-hourly 10 --keep-within 2d --group-by paths",
    ];
    cases
        .iter()
        .map(|case| case.split(' ').map(str::to_owned).collect())
        .collect()
}

/// Rule sets drawn at random: one to three keep options, sometimes a filter or a grouping.
fn generated(count: usize) -> Vec<Vec<String>> {
    let mut dice = Dice(0x00c0_ffee_d00d_0001);
    let counted = [
        "--keep-last",
        "--keep-hourly",
        "--keep-daily",
        "--keep-weekly",
        "--keep-monthly",
        "--keep-yearly",
    ];
    let spans = [
        "--keep-within",
        "--keep-within-hourly",
        "--keep-within-daily",
        "--keep-within-weekly",
        "--keep-within-monthly",
        "--keep-within-yearly",
    ];
    let units = ['y', 'm', 'd', 'h'];
    let extras = [
        "",
        "--host beta",
        "--tag daily",
        "--group-by host",
        "--group-by tags,paths",
        "--path SRC0",
    ];
    (0..count)
        .map(|_| {
            let mut args: Vec<String> = Vec::new();
            for _ in 0..=dice.below(3) {
                // Each option once: a repeated one is an error here, restic takes the last.
                let (option, value) = if dice.below(2) == 0 {
                    let option = counted[dice.below(6) as usize];
                    (option, (1 + dice.below(12)).to_string())
                } else {
                    let option = spans[dice.below(6) as usize];
                    let unit = units[dice.below(4) as usize];
                    (option, format!("{}{unit}", 1 + dice.below(20)))
                };
                if !args.iter().any(|arg| arg == option) {
                    args.extend([option.to_owned(), value]);
                }
            }
            let extra = extras[dice.below(extras.len() as u64) as usize];
            args.extend(
                extra
                    .split(' ')
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned),
            );
            args
        })
        .collect()
}

/// `args` with the placeholders replaced: `EMPTY` by an empty argument, `SRC0` by the folder.
fn concrete(args: &[String], source0: &Path) -> Vec<String> {
    args.iter()
        .map(|arg| match arg.as_str() {
            "EMPTY" => String::new(),
            "SRC0" => text(source0).to_owned(),
            other => other.to_owned(),
        })
        .collect()
}

#[test]
fn forget_keeps_and_removes_what_restic_does_for_every_rule_filter_and_grouping() {
    let test = "forget_keeps_and_removes_what_restic_does_for_every_rule_filter_and_grouping";
    let Some(restic) = restic_binary(test) else {
        return;
    };
    if !neverwiped_testkit::require_that(
        Path::new("/usr/share/zoneinfo").join(ZONE).is_file(),
        format_args!("the time zone {ZONE} (tzdata)"),
        "install tzdata",
    ) {
        return;
    }
    let (work, _repo, mut sidecar): (_, _, Sidecar) = initialised_cheaply();
    sidecar.env.push(("TZ".into(), ZONE.into()));
    let sources = [work.path().join("src-one"), work.path().join("src-two")];
    for (n, source) in sources.iter().enumerate() {
        fs::create_dir_all(source).unwrap();
        fs::write(source.join("file"), format!("source {n}\n")).unwrap();
    }
    let restic_repo = work.path().join("restic-repo");
    let restic_command = || {
        let mut command = Command::new(&restic);
        command
            .env("RESTIC_REPOSITORY", &restic_repo)
            .env("RESTIC_PASSWORD", RESTIC_PASSWORD)
            .env("RESTIC_CACHE_DIR", work.path().join("restic-cache"))
            .env("TZ", ZONE);
        command
    };
    let restic_ok = |args: &[String]| {
        let output = restic_command().args(args).output().unwrap();
        assert!(
            output.status.success(),
            "restic {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    restic_ok(&["init".into()]);
    let password_file = work.path().join("restic-password");
    fs::write(&password_file, RESTIC_PASSWORD).unwrap();
    super::inspect_common::cheapen_restic_key(&restic_repo, &password_file);
    for planned in calendar() {
        let mut args: Vec<String> = vec![
            "backup".into(),
            text(&sources[planned.source]).into(),
            "--time".into(),
            planned.time.clone(),
            "--host".into(),
            planned.host.into(),
        ];
        for tag in planned.tags {
            args.extend(["--tag".into(), (*tag).into()]);
        }
        restic_ok(&[args.clone(), vec!["-q".into()]].concat());
        sidecar.run(&[args, vec!["-q".into()]].concat()).expect_ok();
    }

    let mut cases = hand_picked();
    cases.extend(generated(30));
    let mut schema_checked = false;
    for case in &cases {
        let args = concrete(case, &sources[0]);
        let mut forget: Vec<String> = vec!["forget".into(), "--dry-run".into(), "--json".into()];
        forget.extend(args);
        let theirs = restic_verdicts(&restic_ok(&forget));
        let ours = sidecar.run(&forget).expect_ok().stdout;
        if !schema_checked {
            matches_schema("forget.json", &ours, false);
            schema_checked = true;
        }
        let ours = our_verdicts(&ours);
        assert_eq!(ours.0, theirs.0, "kept by {case:?}");
        assert_eq!(ours.1, theirs.1, "removed by {case:?}");
        assert!(!theirs.0.is_empty(), "{case:?} keeps nothing: a weak case");
    }
}

#[test]
fn forget_by_id_removes_exactly_the_snapshots_named_and_refuses_rules_beside_them() {
    let (work, _repo, sidecar) = initialised_cheaply();
    let source = work.path().join("source");
    fs::create_dir_all(&source).unwrap();
    fs::write(source.join("file"), b"content\n").unwrap();
    for day in 1..=4 {
        let time = format!("2026-03-0{day}T10:00:00Z");
        sidecar
            .run(&["backup", text(&source), "--time", &time, "-q"])
            .expect_ok();
    }
    let ids: Vec<String> = sidecar
        .snapshots()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 4);

    let refused = sidecar
        .run(&["forget", &ids[0], "--keep-last", "1"])
        .expect_code(1);
    assert!(
        refused.error_line().contains("cannot be given together"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        sidecar.snapshots().len(),
        4,
        "a refused forget removes nothing"
    );

    // One by its full id, one by a prefix in upper case.
    let prefix = ids[2][..8].to_ascii_uppercase();
    let forgot = sidecar
        .run(&["forget", &ids[1], &prefix, "--json"])
        .expect_ok();
    let printed: serde_json::Value = serde_json::from_str(&forgot.stdout).unwrap();
    assert_eq!(printed["removed"], 2);
    let left: BTreeSet<String> = sidecar
        .snapshots()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left, BTreeSet::from([ids[0].clone(), ids[3].clone()]));

    let unknown = sidecar.run(&["forget", "ffffffffff"]).expect_code(1);
    assert!(
        unknown.error_line().contains("no snapshot matches"),
        "{}",
        unknown.stderr
    );
    assert_eq!(sidecar.snapshots().len(), 2);
}
