//! The worst day: a cluster, its application's namespace, its BackupPlan, its claims, its
//! operator, its CRDs and its API server's etcd data all gone, and the application restored on a
//! new cluster from the repository alone, by the runbook's own commands.
//!
//! What is real and what is played:
//! - Each cluster is a private instance of the test API server (`real-apiserver.sh`, found through
//!   `REAL_APISERVER_SH`, with its own folder, ports and etcd), which evaluates RBAC for every user
//!   but the admin. No kubelet, scheduler or controller runs: the test plays the Job controller
//!   and the kubelet by running each Job's pod as a container of the sidecar image
//!   (`support::kubelet`), with a host folder as each claim's volume, and the Deployment
//!   controller by running the operator's pod as a container of the operator's image.
//! - "helm install" is the chart rendered by Helm's own engine (`tests/chart/check_chart.py`; there
//!   is no helm binary) and what it renders applied; the kinds this API server does not serve are
//!   played (the Deployment) or left out (Service, admission policies): `worst_day::release`.
//! - The gate is rest-server with a login; the databases are real PostgreSQL servers on loopback.
//!
//! Cluster 1: the chart, a namespace `shop`, a plan `nightly` over two claims (files of three
//! owners, 0600 in 0700 folders) and a PostgreSQL database, three nights of backups with changes
//! in between. Then the namespace, the plan, the claims, the operator, the CRDs and the API
//! server with its etcd data are deleted, and the database server and the volumes' disks too.
//!
//! Cluster 2, from nothing: the chart installed with the runbook's admin values, the namespaces
//! made by the runbook's admin block, and real users each with a Role in their own namespace only
//! running the runbook's blocks verbatim (docs/restore-runbook.md, `<!-- runbook: NAME -->`):
//! the Secrets from files and one Restore of everything into `shop-restored` (claims created as
//! recorded, storage class mapped), a clone into `shop-staging` from the same snapshot, a clone
//! into `intruder` that the admin's policy refuses, and one file restored in place.
//!
//! Needs a container engine with `neverwiped/operator:dev` and `neverwiped/sidecar:dev`
//! (`scripts/build-images.sh`), the API server's script, Helm's engine (python3 with
//! `tests/chart/requirements.txt`), rest-server, kubectl and PostgreSQL. Without them the test
//! skips loudly; under CI it fails (`neverwiped_testkit::require_that`). It needs the process's
//! `KUBECONFIG` for its own API servers, so it is a test binary of its own.

mod support;

#[path = "worst_day/cluster.rs"]
mod cluster;
#[path = "worst_day/cluster_one.rs"]
mod cluster_one;
#[path = "worst_day/cluster_two.rs"]
mod cluster_two;
#[path = "worst_day/release.rs"]
mod release;
#[path = "worst_day/runbook.rs"]
mod runbook;
#[path = "worst_day/shop.rs"]
mod shop;

use std::path::PathBuf;

use support::containers::{programs_or_skip, OPERATOR_IMAGE, SIDECAR_IMAGE_DEV};
use support::kubelet::engine_or_skip;

/// Every part the day needs, or `None` (after a recorded skip; a failure under CI).
fn parts_or_skip() -> Option<PathBuf> {
    let script = cluster::script_or_skip()?;
    let present = engine_or_skip(&[OPERATOR_IMAGE.as_str(), SIDECAR_IMAGE_DEV.as_str()])
        && programs_or_skip(&[
            "rest-server",
            "kubectl",
            "initdb",
            "postgres",
            "psql",
            "sha256sum",
        ]);
    present.then_some(script)
}

#[tokio::test]
async fn the_application_comes_back_on_a_new_cluster_from_the_repository_alone() {
    let Some(script) = parts_or_skip() else {
        return;
    };
    let started = std::time::Instant::now();
    let gate = cluster_one::Gate::start();
    let Some(last_night) = cluster_one::three_nights_on_cluster_one(&script, &gate).await else {
        return;
    };
    eprintln!("cluster 1 backed up and gone after {:?}", started.elapsed());
    let Some(mut day) = cluster_two::Day::on_a_new_cluster(&script, &gate).await else {
        return;
    };
    let snapshot = day.the_cluster_is_gone(&last_night).await;
    day.move_to_staging(&last_night, &snapshot).await;
    day.a_clone_the_policy_forbids().await;
    day.restore_one_file(&last_night, &snapshot).await;
    eprintln!("the worst day took {:?}", started.elapsed());
}
