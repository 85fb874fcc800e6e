//! `forget`: remove the snapshots a keep policy does not keep (rules in [`super::retention`]),
//! or exactly the ones named. Their data stays until `prune`.

use crate::backend::ObjectKind;
use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::ids::SnapshotId;
use crate::repository::Repository;
use crate::selection::filter::{GroupBy, GroupKey, SnapshotMatch};
use std::collections::BTreeMap;

pub use super::protect::Window;
pub use super::retention::{apply_policy, CalendarSpan, KeepPolicy, Verdict, UNLIMITED};

/// The snapshots of one group (by default one host and set of paths), with verdicts.
#[derive(Debug)]
pub struct ForgetGroup {
    pub key: GroupKey,
    /// One per snapshot of the group, newest first.
    pub verdicts: Vec<Verdict>,
}

/// What to forget.
#[derive(Debug, Clone, Default)]
pub struct ForgetRequest {
    /// The policy applied to each group; unused when `ids` names snapshots.
    pub policy: KeepPolicy,
    /// Only the snapshots that pass this filter are considered.
    pub only: SnapshotMatch,
    /// What the policy's groups share.
    pub group_by: GroupBy,
    /// Snapshot ids or unique prefixes: exactly these are removed, and no policy applies.
    pub ids: Vec<String>,
    /// Decide and report, remove nothing.
    pub dry_run: bool,
    /// No snapshot inside this window is removed: the policy's verdicts keep it, and naming one
    /// in `ids` fails before anything is removed.
    pub protect: Option<Window>,
}

/// Applies `policy` to each group of snapshots (same host and paths), optionally only those of
/// `host`, and removes the snapshots it does not keep unless `dry_run`; none inside `protect`.
pub async fn forget(
    repo: &Repository,
    policy: &KeepPolicy,
    host: Option<&str>,
    dry_run: bool,
    protect: Option<Window>,
) -> Result<Vec<ForgetGroup>> {
    let request = ForgetRequest {
        policy: policy.clone(),
        only: SnapshotMatch {
            hosts: host.map(str::to_owned).into_iter().collect(),
            ..SnapshotMatch::default()
        },
        dry_run,
        protect,
        ..ForgetRequest::default()
    };
    forget_where(repo, &request).await
}

/// Decides what `request` removes, then removes it unless it is a dry run: the named snapshots,
/// or those of each group its policy does not keep.
pub async fn forget_where(repo: &Repository, request: &ForgetRequest) -> Result<Vec<ForgetGroup>> {
    let mut groups = if request.ids.is_empty() {
        plan_by_policy(repo, request).await?
    } else {
        vec![plan_by_ids(repo, &request.ids).await?]
    };
    if let Some(window) = &request.protect {
        protect_verdicts(&mut groups, window, !request.ids.is_empty())?;
    }
    if !request.dry_run {
        for verdict in groups.iter().flat_map(|g| &g.verdicts).filter(|v| !v.keep) {
            repo.backend()
                .delete(ObjectKind::Snapshots, &verdict.id.to_hex())
                .await?;
        }
    }
    Ok(groups)
}

/// Keeps every snapshot inside `window`; when the snapshots were `named`, refuses instead.
fn protect_verdicts(groups: &mut [ForgetGroup], window: &Window, named: bool) -> Result<()> {
    let verdicts = groups
        .iter_mut()
        .flat_map(|group| group.verdicts.iter_mut());
    for verdict in verdicts.filter(|v| !v.keep && window.protects(&v.snapshot)) {
        if named {
            return Err(Error::Usage(format!(
                "snapshot {} of {} cannot be forgotten: it is younger than the protection \
                 window (--protect-within {}); nothing was removed",
                verdict.id.short(),
                verdict.snapshot.time,
                window.span
            )));
        }
        verdict.keep = true;
        verdict.reasons.push(window.reason());
    }
    Ok(())
}

async fn plan_by_policy(repo: &Repository, request: &ForgetRequest) -> Result<Vec<ForgetGroup>> {
    if request.policy.is_empty() {
        return Err(Error::NoKeepRule);
    }
    let mut groups: BTreeMap<GroupKey, Vec<(SnapshotId, Snapshot)>> = BTreeMap::new();
    for (id, snapshot) in repo.snapshots().await? {
        if request.only.matches(&snapshot) {
            groups
                .entry(request.group_by.key(&snapshot))
                .or_default()
                .push((id, snapshot));
        }
    }
    Ok(groups
        .into_iter()
        .map(|(key, snapshots)| ForgetGroup {
            verdicts: apply_policy(&snapshots, &request.policy),
            key,
        })
        .collect())
}

/// One group of the snapshots `ids` name (or `latest`), each to be removed; an id that names
/// none (or more than one) fails before anything is removed.
async fn plan_by_ids(repo: &Repository, ids: &[String]) -> Result<ForgetGroup> {
    let mut verdicts: Vec<Verdict> = Vec::new();
    for spec in ids {
        let spec = crate::selection::snapshot_spec(spec);
        let (id, snapshot) = repo.find_snapshot(&spec).await?;
        if verdicts.iter().any(|v| v.id == id) {
            continue;
        }
        let time = chrono::DateTime::parse_from_rfc3339(&snapshot.time)
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
        verdicts.push(Verdict {
            id,
            time,
            snapshot,
            keep: false,
            reasons: Vec::new(),
        });
    }
    verdicts.sort_by(|a, b| b.time.cmp(&a.time).then(b.id.cmp(&a.id)));
    Ok(ForgetGroup {
        key: GroupKey::default(),
        verdicts,
    })
}
