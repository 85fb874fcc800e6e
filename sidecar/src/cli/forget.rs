//! `forget`: its arguments (the keep rules are shared with `backup`) and its report.

use super::Outcome;
use anyhow::Result;
use clap::Args;
use neverwiped::format::snapshot::SnapshotPath;
use neverwiped::maintenance::forget::{
    self as forgetting, CalendarSpan, ForgetGroup, ForgetRequest, KeepPolicy, Window, UNLIMITED,
};
use neverwiped::repository::IndexedRepository;
use neverwiped::selection::filter::{parse_tag_list, GroupBy, TagList};
use neverwiped::text;
use neverwiped::views::{raw, SnapshotView};
use serde::Serialize;

/// Retention rules: a snapshot is kept when any rule keeps it.
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Keep rules")]
pub struct KeepArgs {
    /// Keep the newest N snapshots ("unlimited": all).
    #[arg(long, default_value = "0", value_name = "N", value_parser = parse_keep_count)]
    pub keep_last: u32,
    /// Keep the newest snapshot of each of the last N hours that have one ("unlimited": of every
    /// hour).
    #[arg(long, default_value = "0", value_name = "N", value_parser = parse_keep_count)]
    pub keep_hourly: u32,
    /// Keep the newest snapshot of each of the last N days that have one.
    #[arg(long, default_value = "0", value_name = "N", value_parser = parse_keep_count)]
    pub keep_daily: u32,
    /// Keep the newest snapshot of each of the last N weeks (ISO weeks) that have one.
    #[arg(long, default_value = "0", value_name = "N", value_parser = parse_keep_count)]
    pub keep_weekly: u32,
    /// Keep the newest snapshot of each of the last N months that have one.
    #[arg(long, default_value = "0", value_name = "N", value_parser = parse_keep_count)]
    pub keep_monthly: u32,
    /// Keep the newest snapshot of each of the last N years that have one.
    #[arg(long, default_value = "0", value_name = "N", value_parser = parse_keep_count)]
    pub keep_yearly: u32,
    /// Keep every snapshot newer than this span before the group's newest snapshot: years,
    /// months, days and hours, e.g. 1y5m7d2h (m is months).
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub keep_within: Option<CalendarSpan>,
    /// Within this span before the newest snapshot, keep the newest of each hour.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub keep_within_hourly: Option<CalendarSpan>,
    /// Within this span before the newest snapshot, keep the newest of each day.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub keep_within_daily: Option<CalendarSpan>,
    /// Within this span before the newest snapshot, keep the newest of each week.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub keep_within_weekly: Option<CalendarSpan>,
    /// Within this span before the newest snapshot, keep the newest of each month.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub keep_within_monthly: Option<CalendarSpan>,
    /// Within this span before the newest snapshot, keep the newest of each year.
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub keep_within_yearly: Option<CalendarSpan>,
    /// Keep every snapshot that has all of these tags (TAG[,TAG…]; repeatable: any of the lists).
    #[arg(long = "keep-tag", value_name = "TAGS", value_parser = parse_tags)]
    pub keep_tags: Vec<TagList>,
    /// Never forget a snapshot younger than this, whatever the rules say: its age is now minus
    /// the time it records, and one dated in the future is protected. Forgetting one by id
    /// fails. prune also keeps every pack that any index lists for such a snapshot's data. The
    /// forms of --keep-within: 14d, 36h, 1m (m is months).
    #[arg(long, value_name = "SPAN", value_parser = parse_span)]
    pub protect_within: Option<CalendarSpan>,
}

impl KeepArgs {
    /// The protection window, counted back from now.
    pub fn window(&self) -> Option<Window> {
        self.protect_within.map(Window::from_now)
    }

    pub fn policy(&self) -> KeepPolicy {
        KeepPolicy {
            last: self.keep_last,
            hourly: self.keep_hourly,
            daily: self.keep_daily,
            weekly: self.keep_weekly,
            monthly: self.keep_monthly,
            yearly: self.keep_yearly,
            within: self.keep_within,
            within_hourly: self.keep_within_hourly,
            within_daily: self.keep_within_daily,
            within_weekly: self.keep_within_weekly,
            within_monthly: self.keep_within_monthly,
            within_yearly: self.keep_within_yearly,
            tags: self.keep_tags.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// Snapshots to remove (ids or unique prefixes, or latest): exactly these, and no keep rule
    /// may be given with them.
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,
    /// Apply the rules to each group of snapshots with the same of these: host, paths and/or
    /// tags, separated by commas ('' for one group of all).
    #[arg(long, value_name = "KEYS", default_value = "host,paths")]
    pub group_by: GroupBy,
    /// Show what would be removed and why, remove nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    #[command(flatten)]
    pub keep: KeepArgs,
    #[command(flatten)]
    pub only: super::filters::SnapshotFilterArgs,
}

fn parse_keep_count(text: &str) -> Result<u32, String> {
    match text.trim() {
        "unlimited" | "-1" => Ok(UNLIMITED),
        number => number
            .parse::<u32>()
            .map_err(|_| format!("{text:?} is not a count: give a number such as 7, or unlimited")),
    }
}

fn parse_span(text: &str) -> Result<CalendarSpan, String> {
    text.parse()
}

fn parse_tags(text: &str) -> Result<TagList, String> {
    Ok(parse_tag_list(text))
}

/// One group as `forget --json` prints it (`docs/schema/forget.json`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GroupView {
    host: Option<String>,
    paths: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paths_raw: Option<Vec<Option<String>>>,
    tags: Option<Vec<String>>,
    snapshots: Vec<VerdictView>,
}

#[derive(Serialize)]
struct VerdictView {
    snapshot: SnapshotView,
    keep: bool,
    reasons: Vec<String>,
}

impl GroupView {
    fn new(group: &ForgetGroup) -> GroupView {
        let paths = group.key.paths.as_ref();
        let any_raw = paths.is_some_and(|paths| paths.iter().any(|p| raw(&p.0).is_some()));
        GroupView {
            host: group.key.host.clone(),
            paths: paths.map(|paths| paths.iter().map(SnapshotPath::display).collect()),
            paths_raw: paths
                .filter(|_| any_raw)
                .map(|paths| paths.iter().map(|p| raw(&p.0)).collect()),
            tags: group.key.tags.clone(),
            snapshots: group
                .verdicts
                .iter()
                .map(|verdict| VerdictView {
                    snapshot: SnapshotView::new(&verdict.id, &verdict.snapshot),
                    keep: verdict.keep,
                    reasons: verdict.reasons.clone(),
                })
                .collect(),
        }
    }
}

fn print_group(group: &ForgetGroup, dry_run: bool) {
    let mut heading = Vec::new();
    if let Some(host) = &group.key.host {
        heading.push(format!("host {}", text::escaped(host)));
    }
    if let Some(paths) = &group.key.paths {
        let quoted: Vec<String> = paths
            .iter()
            .map(|p| text::quoted(&p.0).into_owned())
            .collect();
        heading.push(format!("paths {}", quoted.join(" ")));
    }
    if let Some(tags) = &group.key.tags {
        heading.push(format!("tags {}", text::escaped(&tags.join(","))));
    }
    if heading.is_empty() {
        heading.push("all snapshots".into());
    }
    println!("{}", heading.join(" "));
    for verdict in &group.verdicts {
        let action = match (verdict.keep, dry_run) {
            (true, _) => "keep",
            (false, true) => "would remove",
            (false, false) => "removed",
        };
        println!(
            "  {} {} {:<12} {}",
            verdict.id.short(),
            verdict.time.format("%Y-%m-%d %H:%M"),
            action,
            text::escaped(&verdict.reasons.join(", "))
        );
    }
}

pub async fn forget(repo: &IndexedRepository, args: &ForgetArgs, json: bool) -> Result<Outcome> {
    let policy = args.keep.policy();
    if !args.ids.is_empty() && !policy.is_empty() {
        anyhow::bail!(
            "snapshot ids and --keep-* rules cannot be given together: name the snapshots to \
             remove, or give the rules that choose them"
        );
    }
    let request = ForgetRequest {
        policy,
        only: args.only.selection()?,
        group_by: args.group_by,
        ids: args.ids.clone(),
        dry_run: args.dry_run,
        protect: args.keep.window(),
    };
    // The shared lock the runbook names: no prune runs while snapshots are removed. A dry run
    // removes nothing and takes none.
    let lock = match args.dry_run {
        true => None,
        false => Some(neverwiped::locking::acquire(repo, false, "forget").await?),
    };
    let groups = forgetting::forget_where(repo, &request).await;
    if let Some(lock) = lock {
        lock.release().await?;
    }
    let groups = groups?;
    let verdicts = || groups.iter().flat_map(|group| &group.verdicts);
    let removed = verdicts().filter(|v| !v.keep).count() as u64;
    if json {
        let groups: Vec<GroupView> = groups.iter().map(GroupView::new).collect();
        let printed = serde_json::json!({
            "dryRun": args.dry_run,
            "removed": removed,
            "kept": verdicts().filter(|v| v.keep).count(),
            "groups": groups,
        });
        println!("{printed}");
    } else {
        for group in &groups {
            print_group(group, args.dry_run);
        }
        let done = if args.dry_run {
            "would be removed"
        } else {
            "removed"
        };
        println!("{removed} snapshot(s) {done}");
    }
    let host = match args.only.hosts.as_slice() {
        [host] => Some(host.as_str()),
        _ => None,
    };
    // Like the size in other results, a failure to list them is logged, not fatal.
    let host_snapshots = match host {
        Some(host) => neverwiped::selection::host_snapshots(repo, host)
            .await
            .inspect_err(|error| tracing::warn!(%error, "cannot list the snapshots of the host"))
            .ok(),
        None => None,
    };
    Ok(Outcome {
        snapshots_forgotten: Some(removed),
        host_snapshots,
        ..Outcome::default()
    })
}
