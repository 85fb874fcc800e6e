#!/usr/bin/env bash
# The operator at scale against a real API server: SCALE_PLANS BackupPlans (default 2000) in
# SCALE_NAMESPACES namespaces (200), all due at once under a limit of SCALE_LIMIT running backups
# (25). The test plays the Job controller (each Job ends SCALE_HOLD_MS after it appears, 2000)
# and prints: time to Ready, backup Jobs running at once, plans Queued at once, the order the Jobs
# started in (by namespace), how long a slot stays empty between a Job's end and the next Job, the
# operator's peak RSS, and, over SCALE_REST_SECONDS (300) at rest, its API requests per plan per
# hour (by its own count and by the API server's, per verb and resource) and its CPU. The operator
# is killed and started again once SCALE_RESTART_AFTER runs (1000; 0: never) are recorded, and
# again at rest: every plan must have exactly one backup Job, and the restart at rest counts what
# one look at every plan costs (the operator's periodic look at a plan at rest is the same). It
# fails unless the claims hold (docs/reference.md, "Scale"): Jobs within the limit, each
# namespace within its share while all wait, one run per plan, no Job after the restart at rest,
# fewer than one API request per plan per hour at rest.
#
#   KUBECONFIG=... bench/scale/run.sh
#   SCALE_PLANS=500 SCALE_NAMESPACES=50 bench/scale/run.sh
#
# Only plans labelled for the run are reconciled (NEVERWIPED_PLAN_SELECTOR), so a shared API
# server's other plans are left alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ -z "${KUBECONFIG:-}" || ! -f "$KUBECONFIG" ]]; then
    echo "KUBECONFIG must name a kubeconfig of the API server to measure against" >&2
    exit 2
fi
export SCALE_PLANS="${SCALE_PLANS:-2000}" SCALE_NAMESPACES="${SCALE_NAMESPACES:-200}"
export SCALE_LIMIT="${SCALE_LIMIT:-25}" SCALE_HOLD_MS="${SCALE_HOLD_MS:-2000}"
export SCALE_REST_SECONDS="${SCALE_REST_SECONDS:-300}" SCALE_RESTART_AFTER="${SCALE_RESTART_AFTER:-1000}"
# The operator binary is built with the test (SCALE_RELEASE=1: in release, as it ships).
exec cargo test ${SCALE_RELEASE:+--release} -p neverwiped-operator --test scale -- --exact plans_due_at_once_run_within_the_limit_in_fair_order --nocapture
