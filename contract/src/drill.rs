//! A restore drill: the sidecar's `drill` command line, and what it reports.
//!
//! A drill restores a snapshot into scratch space only, holds every restored file to the
//! snapshot, loads each database dump into a throwaway server started beside it and checks the
//! tables' rows against what the dump step recorded; it measures how long each volume and each
//! database took to come back (the recovery time). The operator runs it on `spec.verify`'s
//! schedule and turns [`DrillStats`] into `status.verify`.

use serde::{Deserialize, Serialize};

use crate::location::RepositoryLocation;

/// Which of a snapshot's files a drill restores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DrillSample {
    /// Every file.
    #[default]
    All,
    /// About `percent` of the files, chosen by their paths' hashes: the share of round `round` is
    /// the next `percent` of the hash space after round `round - 1`'s, so that successive rounds
    /// cover every file within `ceil(100 / percent)` drills (see [`in_sample`]).
    Percent { percent: u8, round: u64 },
}

impl DrillSample {
    /// The share of files as a percentage (100 for [`DrillSample::All`]).
    pub fn percent(self) -> u8 {
        match self {
            DrillSample::All => 100,
            DrillSample::Percent { percent, .. } => percent,
        }
    }
}

/// Whether a file whose path hashes into `bucket` (0 to 99) is in the sample of `sample`: the
/// buckets `[round × percent, round × percent + percent)`, modulo 100.
pub fn in_sample(sample: DrillSample, bucket: u8) -> bool {
    match sample {
        DrillSample::All => true,
        DrillSample::Percent { percent, round } => {
            if percent >= 100 {
                return true;
            }
            let start = (round % 100) * u64::from(percent) % 100;
            let offset = (u64::from(bucket) + 100 - start) % 100;
            offset < u64::from(percent)
        }
    }
}

/// `neverwiped-sidecar drill SNAPSHOT --repo REPO --result-file PATH --scratch DIR [--host H]
/// [--sample-percent P --sample-round N] [--databases]`
///
/// `SNAPSHOT` is `latest` (of `--host`) or a snapshot id or a unique prefix of one. The files go
/// under `DIR/files`; with `--databases` every dump of the snapshot is loaded into a throwaway
/// server whose data directory is under `DIR/databases`. Nothing outside `DIR` is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrillArgs {
    pub snapshot: String,
    /// As for [`crate::cli::BackupArgs::repository`]; only read.
    pub repository: RepositoryLocation,
    pub result_file: String,
    /// The scratch folder: an emptyDir or an ephemeral volume of the drill's pod.
    pub scratch: String,
    pub host: Option<String>,
    pub sample: DrillSample,
    /// `--databases`: load and check the snapshot's database dumps too.
    pub databases: bool,
}

impl DrillArgs {
    /// The arguments after the binary's name, starting with the subcommand.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "drill".to_owned(),
            self.snapshot.clone(),
            "--repo".to_owned(),
            self.repository.to_arg(),
            "--result-file".to_owned(),
            self.result_file.clone(),
            "--scratch".to_owned(),
            self.scratch.clone(),
        ];
        if let Some(host) = &self.host {
            args.push("--host".into());
            args.push(host.clone());
        }
        if let DrillSample::Percent { percent, round } = self.sample {
            args.push("--sample-percent".into());
            args.push(percent.to_string());
            args.push("--sample-round".into());
            args.push(round.to_string());
        }
        if self.databases {
            args.push("--databases".into());
        }
        args
    }
}

/// What a drill restored and checked, and how long each part took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillStats {
    /// The share of files restored (100: all).
    pub sample_percent: u8,
    /// The sample's round (0 when every file was restored).
    #[serde(default)]
    pub sample_round: u64,
    /// Per volume of the snapshot (its recorded claims' paths, or its top folders).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<DrillVolume>,
    /// Per database entry of the snapshot, when `--databases` was given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<DrillDatabase>,
}

impl DrillStats {
    /// The recovery time: the wall seconds of every part, one after the other as a restore would
    /// take them.
    pub fn recovery_secs(&self) -> f64 {
        let volumes: f64 = self.volumes.iter().map(|v| v.secs).sum();
        let databases: f64 = self.databases.iter().map(|d| d.secs).sum();
        volumes + databases
    }

    /// Shortens every database error longer than `limit` bytes; false when none was.
    pub fn shorten_errors(&mut self, limit: usize) -> bool {
        let mut shortened = false;
        for error in self.databases.iter_mut().filter_map(|d| d.error.as_mut()) {
            if error.len() > limit {
                crate::text::truncate_at_char_boundary(error, limit);
                error.push_str(" …");
                shortened = true;
            }
        }
        shortened
    }
}

/// One volume of a drill: restored, then read back and held to the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillVolume {
    /// The volume's path in the snapshot, e.g. `/data/orders`.
    pub path: String,
    /// Regular files restored.
    pub files: u64,
    /// Bytes of their content.
    pub bytes: u64,
    /// Wall seconds of the restore and the reading back.
    pub secs: f64,
    /// Files that differ from the snapshot in content or metadata, or could not be restored.
    #[serde(default)]
    pub mismatched: u64,
}

/// One database entry of a drill: its dump loaded into a throwaway server and its tables
/// counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillDatabase {
    /// The entry's name (the dump is under `/databases/NAME/` in the snapshot).
    pub name: String,
    /// `postgresql`, `mariadb` or `mysql`.
    pub engine: String,
    /// Bytes of dump loaded.
    pub bytes: u64,
    /// Wall seconds from the server's start to the last table counted.
    pub secs: f64,
    /// Tables whose rows were counted against the record.
    #[serde(default)]
    pub tables_checked: u64,
    /// Why this entry failed: the server's error for a dump that does not load, or the tables
    /// whose rows differ. None when it passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successive_rounds_cover_every_bucket_once_per_cycle() {
        for percent in [1u8, 3, 7, 10, 25, 33, 50, 99] {
            let rounds = 100u64.div_ceil(u64::from(percent));
            for bucket in 0..100u8 {
                let hits = (0..rounds)
                    .filter(|&round| in_sample(DrillSample::Percent { percent, round }, bucket))
                    .count();
                assert!(hits >= 1, "{percent}%: bucket {bucket} never drilled");
                let per_round = (0..100u8)
                    .filter(|&b| in_sample(DrillSample::Percent { percent, round: 5 }, b))
                    .count();
                assert_eq!(per_round, usize::from(percent));
            }
        }
    }

    #[test]
    fn all_and_full_percent_take_every_file() {
        for bucket in 0..100 {
            assert!(in_sample(DrillSample::All, bucket));
            assert!(in_sample(
                DrillSample::Percent {
                    percent: 100,
                    round: 7
                },
                bucket
            ));
        }
    }

    #[test]
    fn arguments_name_the_sample_only_when_it_is_partial() {
        let mut args = DrillArgs {
            snapshot: "latest".into(),
            repository: RepositoryLocation::parse("rest:https://gate.example/r").unwrap(),
            result_file: "/dev/termination-log".into(),
            scratch: "/scratch".into(),
            host: Some("shop/orders".into()),
            sample: DrillSample::All,
            databases: true,
        };
        assert_eq!(
            args.to_args(),
            [
                "drill",
                "latest",
                "--repo",
                "rest:https://gate.example/r",
                "--result-file",
                "/dev/termination-log",
                "--scratch",
                "/scratch",
                "--host",
                "shop/orders",
                "--databases"
            ]
        );
        args.sample = DrillSample::Percent {
            percent: 10,
            round: 3,
        };
        args.databases = false;
        let joined = args.to_args().join(" ");
        assert!(
            joined.ends_with("--sample-percent 10 --sample-round 3"),
            "{joined}"
        );
    }
}
