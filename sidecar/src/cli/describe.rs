//! `describe`: which snapshot a selection means (`latest` of a host, before a time, or an id),
//! and what it recorded of its claims and databases. The operator runs it before a Restore that
//! creates claims from the snapshot or restores all it holds, then restores that very snapshot
//! by id: the claims and the data come from one snapshot.

use super::{select, Outcome};
use anyhow::Result;
use neverwiped::repository::Repository;
use neverwiped_contract::record::RecordedSources;

/// `describe`'s arguments: the selection of `restore`.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// Snapshot id prefix, or "latest".
    pub snapshot: String,
    /// With `latest`: the newest snapshot of this host; with an id, one of another host is
    /// refused.
    #[arg(long)]
    pub host: Option<String>,
    /// With `latest`: the newest snapshot taken before this time (RFC 3339).
    #[arg(long, value_parser = super::durations::parse_time)]
    pub before: Option<chrono::DateTime<chrono::Utc>>,
}

/// Resolves the snapshot and reports its id, time and record: printed, and in the result, whose
/// termination message must carry the record whole (else the run fails and says what to do).
pub async fn describe(repo: &Repository, args: &DescribeArgs, json: bool) -> Result<Outcome> {
    let selection = select::Selection {
        snapshot: &args.snapshot,
        host: args.host.as_deref(),
        before: args.before,
    };
    let (id, snapshot) = select::for_restore(repo, &selection).await?;
    let mut sources = snapshot.sources.clone();
    neverwiped_contract::fit_described_sources(&mut sources)?;
    if json {
        let printed = serde_json::json!({
            "snapshotId": id.to_hex(),
            "snapshotTime": snapshot.time,
            "hostname": snapshot.hostname,
            "sources": sources,
        });
        println!("{printed}");
    } else {
        print_summary(&id.short(), &snapshot.time, &snapshot.hostname, &sources);
    }
    Ok(Outcome {
        snapshot_id: Some(id.to_hex()),
        snapshot_time: Some(snapshot.time.clone()),
        sources: Some(sources),
        ..Outcome::default()
    })
}

/// The snapshot and its record, one line per claim and database.
fn print_summary(id: &str, time: &str, host: &str, sources: &RecordedSources) {
    let escaped = neverwiped::text::escaped;
    println!("snapshot {id} of {} taken at {time}", escaped(host));
    if sources.claims.is_empty() && sources.databases.is_empty() {
        println!("it records no claim and no database");
    }
    for claim in &sources.claims {
        println!(
            "claim {} at {}: {}, storage class {}, {}",
            escaped(&claim.name),
            escaped(&claim.path),
            claim
                .requested_size
                .as_deref()
                .unwrap_or("no size recorded"),
            claim.storage_class_name.as_deref().unwrap_or("the default"),
            claim.access_modes.join(",")
        );
    }
    for database in &sources.databases {
        println!(
            "database {} ({} {}): {}",
            escaped(&database.name),
            database.engine,
            database
                .server_version
                .as_deref()
                .unwrap_or("version unknown"),
            database.databases.join(", ")
        );
    }
}
