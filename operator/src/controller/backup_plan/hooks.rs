//! The hook Jobs of a run that reads CSI VolumeSnapshots: its pre Job starts the run, its post
//! Job starts once (when the snapshots are ready or failed, or at once when the pre hooks failed),
//! and the run's record shows both Jobs' hooks and the pause between them. Where they are is read
//! from the Jobs at each reconcile, so a restarted operator goes on where the run was.

use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use neverwiped_contract::streams::{HookPhase, HookResult};

use super::decision::PlanDecision;
use super::resolve::ReadyPlan;
use crate::api::{BackupPlan, RunOutcome, RunRecord};
use crate::conditions::Reason;
use crate::controller::{pod_of, Settings};
use crate::job::{hook_phase_of, hooks_deadline, hooks_job, HooksRun, LABEL_RUN};
use crate::status::streams::{failed_hook, hook_records, paused_between};
use crate::status::{job_end, JobEnd};
use crate::volumes::SnapshotRunInfo;

/// Where one hook Job of a run is.
#[derive(Debug, Clone, PartialEq)]
pub enum HookJob {
    /// Not created.
    Absent,
    /// Created, not finished. A pod that cannot start is not failed early, as backup pods are:
    /// the Job's short deadline stops it, so it never runs a hook after its run moved on.
    Running(String),
    Ended {
        name: String,
        end: Box<JobEnd>,
    },
}

impl HookJob {
    fn end(&self) -> Option<&JobEnd> {
        match self {
            HookJob::Ended { end, .. } => Some(end),
            _ => None,
        }
    }

    /// The hooks its sidecar reported running.
    fn results(&self) -> &[HookResult] {
        let result = self.end().and_then(|end| end.result.as_ref());
        result.map(|r| r.hooks.as_slice()).unwrap_or_default()
    }
}

/// A run's pre and post hook Jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct RunHooks {
    pub pre: HookJob,
    pub post: HookJob,
}

impl RunHooks {
    /// The hook Jobs of `run` among the plan's `hook_jobs`, read with their pods.
    pub fn of(run: &str, hook_jobs: &[&Job], pods: &[Pod]) -> RunHooks {
        let find = |phase: HookPhase| {
            let job = hook_jobs.iter().find(|job| {
                hook_phase_of(job) == Some(phase)
                    && job.labels().get(LABEL_RUN).map(String::as_str) == Some(run)
            });
            match job {
                None => HookJob::Absent,
                Some(job) => match job_end(job, pod_of(job, pods)) {
                    None => HookJob::Running(job.name_any()),
                    Some(end) => HookJob::Ended {
                        name: job.name_any(),
                        end: Box::new(end),
                    },
                },
            }
        };
        RunHooks {
            pre: find(HookPhase::Pre),
            post: find(HookPhase::Post),
        }
    }

    /// Whether the run brackets its snapshots with hook Jobs (it started with its pre Job).
    pub fn used(&self) -> bool {
        self.pre != HookJob::Absent || self.post != HookJob::Absent
    }

    /// Whether the pre Job ended well: the snapshots may be taken.
    pub fn pre_succeeded(&self) -> bool {
        self.pre.end().is_some_and(|end| end.outcome.is_success())
    }

    /// Whether the pre Job failed (or is gone while the post Job exists): no snapshot is taken.
    pub fn pre_failed(&self) -> bool {
        match &self.pre {
            HookJob::Absent => self.post != HookJob::Absent,
            HookJob::Running(_) => false,
            HookJob::Ended { end, .. } => !end.outcome.is_success(),
        }
    }

    pub fn post_started(&self) -> bool {
        self.post != HookJob::Absent
    }

    pub fn post_ended(&self) -> bool {
        self.post.end().is_some()
    }

    /// The hook Job the run waits for now, with its phase.
    pub fn waiting_for(&self) -> Option<(HookPhase, &str)> {
        match (&self.pre, &self.post) {
            (HookJob::Running(pre), _) => Some((HookPhase::Pre, pre)),
            (_, HookJob::Running(post)) => Some((HookPhase::Post, post)),
            _ => None,
        }
    }

    /// Why the pre hooks failed: the failed hook's name, exit and standard error, or the Job's
    /// own end when its sidecar reported no failed hook (its pod failed).
    pub fn pre_failure(&self) -> String {
        let cause =
            failed_hook(self.pre.results(), HookPhase::Pre).unwrap_or_else(|| match &self.pre {
                HookJob::Ended { name, end } => format!(
                    "the pre hook Job {name} failed ({}): {}",
                    end.reason.as_str(),
                    end.message.as_deref().unwrap_or("no message")
                ),
                _ => "the pre hook Job is gone".into(),
            });
        format!("{cause}; no VolumeSnapshot was taken, and the post hooks ran")
    }

    /// Adds both Jobs' hooks and the pause between them to the run's record. A post hook that
    /// failed never fails a run whose data is captured: a succeeded run gets a warning that names
    /// it. Returns the record's reason.
    pub fn record(&self, reason: Reason, record: &mut RunRecord) -> Reason {
        if !self.used() {
            return reason;
        }
        let (pre, post) = (self.pre.results(), self.post.results());
        record.hooks = hook_records(&[pre, post].concat());
        record.paused_seconds = paused_between(pre, post);
        let failed_post = failed_hook(post, HookPhase::Post)
            .or_else(|| self.post_job_failure())
            .filter(|_| record.result == RunOutcome::Succeeded);
        let Some(warning) = failed_post else {
            return reason;
        };
        record.result = RunOutcome::SucceededWithWarnings;
        record.warnings = Some(record.warnings.unwrap_or(0) + 1);
        record.message = Some(format!(
            "{warning}; the snapshot is complete, but the application may still be paused"
        ));
        Reason::SucceededWithWarnings
    }

    /// Why the post Job failed when its sidecar reported no failed hook (its pod failed).
    fn post_job_failure(&self) -> Option<String> {
        let HookJob::Ended { name, end } = &self.post else {
            return None;
        };
        (!end.outcome.is_success()).then(|| {
            format!(
                "the post hook Job {name} failed ({}): {}",
                end.reason.as_str(),
                end.message.as_deref().unwrap_or("no message")
            )
        })
    }
}

/// Whether `plan`'s runs that take VolumeSnapshots bracket them with hook Jobs.
pub fn bracket_snapshots(plan: &BackupPlan) -> bool {
    !plan.spec.hooks.pre.is_empty() || !plan.spec.hooks.post.is_empty()
}

/// Starts the hook Job of `phase` for the run `run` (its name), whose deadline is `left`.
pub fn start(
    plan: &BackupPlan,
    ready: &ReadyPlan,
    (run, info): (&str, &SnapshotRunInfo),
    phase: HookPhase,
    left: SignedDuration,
    settings: &Settings,
    decision: &mut PlanDecision,
) {
    let hooks_run = HooksRun {
        run,
        info,
        phase,
        deadline: hooks_deadline(plan, phase, left),
        mover: &ready.mover.mover,
    };
    decision.create = Some(hooks_job(plan, &hooks_run, &settings.job));
}

/// Deletes the hook Jobs of recorded runs beyond the newest `keep`: their runs' records hold
/// what they did.
pub fn delete_over(hook_jobs: &[&Job], keep: usize, decision: &mut PlanDecision) {
    let history = &decision.status.history;
    let over: Vec<String> = hook_jobs
        .iter()
        .filter(|job| {
            let run = job.labels().get(LABEL_RUN);
            let recorded = history.iter().position(|r| Some(&r.job_name) == run);
            recorded.is_some_and(|position| position >= keep)
        })
        .map(|job| job.name_any())
        .collect();
    for name in over {
        decision.delete_job(name);
    }
}
