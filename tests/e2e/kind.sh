#!/usr/bin/env bash
# tests/e2e/kind.sh -- neverwiped end to end on a real Kubernetes cluster (kind, k3d, or any).
#
# What it proves: a volume backed up by the operator's Job into a restic REST server in the
# cluster, then restored by a Restore into a new PVC, comes back identical -- the SHA-256 of every
# file and the metadata of every entry (type, mode, owner, size, mtime, symlink target) match.
#
# Steps:
#   1. A cluster: a new kind cluster "neverwiped-e2e" (default), a new k3d cluster, or the current
#      kubectl context (E2E_CLUSTER=existing).
#   2. Images: builds the operator and sidecar images from this checkout with
#      scripts/build-images.sh (the images CI tests) and loads them into kind/k3d -- or uses E2E_OPERATOR_IMAGE / E2E_SIDECAR_IMAGE as given
#      (E2E_BUILD=0; with E2E_CLUSTER=existing they must be pullable by the cluster).
#   3. Install: `helm install` of charts/neverwiped when that chart exists; otherwise
#      `kubectl apply -f crds/` and tests/e2e/operator.yaml (RBAC + a 2-replica Deployment).
#   4. rest-server (the reference restic REST server) as a Deployment and Service.
#   5. Namespace e2e: a PVC "data" filled by a pod with files of many sizes, nested directories,
#      modes, owners, times and a symlink; a repository initialised by a one-off sidecar Job.
#   6. A BackupPlan with a manual trigger; waits for status.lastRun.result == Succeeded.
#   7. A Restore of the latest snapshot into a new PVC "data-restored"; waits for Succeeded.
#   8. A checker pod mounts both PVCs and compares checksums and metadata (both PVCs must be
#      mountable on one node: a one-node kind or k3d cluster, or a storage class without node
#      affinity).
#   9. Deletes the cluster it created (E2E_KEEP=1 keeps it; E2E_CLUSTER=existing is kept and
#      only the namespaces the script created are deleted).
#
# Requirements: bash, kubectl, docker with buildx (to build, and for kind/k3d), kind or k3d, helm
# (only when charts/neverwiped exists); to build, what scripts/build-images.sh needs (mmdebstrap,
# cargo, Debian's mirrors). Network access to pull restic/rest-server for the cluster.
#
# Environment (all optional):
#   E2E_CLUSTER          kind (default) | k3d | existing
#   E2E_CLUSTER_NAME     neverwiped-e2e
#   E2E_BUILD            1 (default): build the images; 0: use the two below as they are
#   E2E_OPERATOR_IMAGE   neverwiped/operator:dev
#   E2E_SIDECAR_IMAGE    neverwiped/sidecar:dev
#   E2E_COPY_METHOD      Auto (default) | Direct | Snapshot (needs a CSI driver with snapshots)
#   E2E_STORAGE_CLASS    the PVCs' StorageClass (default: the cluster's default class)
#   E2E_REST_SERVER_IMAGE restic/rest-server:0.13.0
#   E2E_TIMEOUT_SECS     600: how long each wait may take
#   E2E_HELM_ARGS        extra arguments for `helm install` (e.g. the chart's image values)
#   E2E_KEEP             1 keeps the cluster and namespaces for a look afterwards
#
# Usage: tests/e2e/kind.sh            (from anywhere; exits non-zero on the first failure and
#                                       prints the operator's and the Jobs' logs)

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CLUSTER=${E2E_CLUSTER:-kind}
CLUSTER_NAME=${E2E_CLUSTER_NAME:-neverwiped-e2e}
BUILD=${E2E_BUILD:-1}
OPERATOR_IMAGE=${E2E_OPERATOR_IMAGE:-neverwiped/operator:dev}
SIDECAR_IMAGE=${E2E_SIDECAR_IMAGE:-neverwiped/sidecar:dev}
COPY_METHOD=${E2E_COPY_METHOD:-Auto}
STORAGE_CLASS=${E2E_STORAGE_CLASS:-}
REST_SERVER_IMAGE=${E2E_REST_SERVER_IMAGE:-restic/rest-server:0.13.0}
TIMEOUT_SECS=${E2E_TIMEOUT_SECS:-600}
TIMEOUT="${TIMEOUT_SECS}s"
KEEP=${E2E_KEEP:-0}
SYSTEM_NS=neverwiped-system
NS=e2e
# A repository of its own per run, so a kept cluster can run the script again.
REPOSITORY="rest:http://rest-server.${SYSTEM_NS}.svc.cluster.local:8000/e2e-$(date +%s)"

started=$(date +%s)
step() { printf '\n==> %s (%ss)\n' "$*" "$(($(date +%s) - started))"; }
die() {
  printf 'FAILED: %s\n' "$*" >&2
  exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is required (see the top of $0)"; }

# Waits until `kubectl get RESOURCE -o jsonpath=PATH` prints SUCCESS; fails at once on FAILURE
# (or after the timeout), saying what it saw.
await_value() {
  local resource=$1 path=$2 success=$3 failure=$4 value=""
  local deadline=$(($(date +%s) + TIMEOUT_SECS))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    value=$(kubectl get "$resource" -n "$NS" -o jsonpath="$path" 2>/dev/null || true)
    if [ "$value" = "$success" ]; then
      return 0
    fi
    if [ -n "$failure" ] && [ "$value" = "$failure" ]; then
      return 1
    fi
    sleep 2
  done
  printf 'timed out after %ss waiting for %s %s to be %s (it is %s)\n' \
    "$TIMEOUT_SECS" "$resource" "$path" "$success" "${value:-empty}" >&2
  return 1
}

created_cluster=0
cleanup() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    printf '\n==> diagnostics\n' >&2
    kubectl get backupplans,restores.neverwiped.io,jobs,pods,pvc -n "$NS" -o wide >&2 || true
    kubectl describe backupplans,restores.neverwiped.io -n "$NS" >&2 || true
    kubectl get events -n "$NS" --sort-by=.lastTimestamp >&2 || true
    kubectl logs -n "$NS" -l neverwiped.io/operation --all-containers --tail=100 >&2 || true
    kubectl logs -n "$SYSTEM_NS" -l app.kubernetes.io/name=neverwiped-operator --tail=100 >&2 || true
  fi
  if [ "$KEEP" = 1 ]; then
    printf 'E2E_KEEP=1: leaving the cluster as it is\n' >&2
  elif [ "$created_cluster" = 1 ]; then
    case "$CLUSTER" in
      kind) kind delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true ;;
      k3d) k3d cluster delete "$CLUSTER_NAME" >/dev/null 2>&1 || true ;;
    esac
  else
    # A plan's finalizer needs the operator: delete the plans while it still runs.
    kubectl delete backupplans.neverwiped.io --all -n "$NS" --timeout=60s >/dev/null 2>&1 || true
    if helm status neverwiped -n "$SYSTEM_NS" >/dev/null 2>&1; then
      helm uninstall neverwiped -n "$SYSTEM_NS" >/dev/null 2>&1 || true
    fi
    kubectl delete clusterrole,clusterrolebinding neverwiped-operator --ignore-not-found \
      >/dev/null 2>&1 || true
    kubectl delete namespace "$NS" "$SYSTEM_NS" --wait=false >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap cleanup EXIT

need kubectl

step "cluster: $CLUSTER"
case "$CLUSTER" in
  kind)
    need kind
    need docker
    if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
      kind create cluster --name "$CLUSTER_NAME" --wait 120s
      created_cluster=1
    fi
    kubectl config use-context "kind-$CLUSTER_NAME" >/dev/null
    ;;
  k3d)
    need k3d
    need docker
    if ! k3d cluster list "$CLUSTER_NAME" >/dev/null 2>&1; then
      k3d cluster create "$CLUSTER_NAME" --wait
      created_cluster=1
    fi
    kubectl config use-context "k3d-$CLUSTER_NAME" >/dev/null
    ;;
  existing) ;;
  *) die "E2E_CLUSTER must be kind, k3d or existing, not $CLUSTER" ;;
esac
kubectl version

if [ "$BUILD" = 1 ]; then
  step "images: build $OPERATOR_IMAGE and $SIDECAR_IMAGE"
  need docker
  # The images CI tests: scripts/build-images.sh, then tagged as asked.
  "$ROOT/scripts/build-images.sh" --tag dev
  [ "$OPERATOR_IMAGE" = neverwiped/operator:dev ] || docker tag neverwiped/operator:dev "$OPERATOR_IMAGE"
  [ "$SIDECAR_IMAGE" = neverwiped/sidecar:dev ] || docker tag neverwiped/sidecar:dev "$SIDECAR_IMAGE"
  case "$CLUSTER" in
    kind) kind load docker-image --name "$CLUSTER_NAME" "$OPERATOR_IMAGE" "$SIDECAR_IMAGE" ;;
    k3d) k3d image import --cluster "$CLUSTER_NAME" "$OPERATOR_IMAGE" "$SIDECAR_IMAGE" ;;
    existing) printf 'E2E_CLUSTER=existing: push %s and %s where the cluster can pull them\n' "$OPERATOR_IMAGE" "$SIDECAR_IMAGE" ;;
  esac
fi

step "install the operator"
kubectl create namespace "$SYSTEM_NS" --dry-run=client -o yaml | kubectl apply -f -
if [ -f "$ROOT/charts/neverwiped/Chart.yaml" ]; then
  need helm
  operator_repository=${OPERATOR_IMAGE%:*}
  sidecar_repository=${SIDECAR_IMAGE%:*}
  # shellcheck disable=SC2086 # E2E_HELM_ARGS is a list of arguments.
  helm upgrade --install neverwiped "$ROOT/charts/neverwiped" --namespace "$SYSTEM_NS" --wait \
    --timeout "$TIMEOUT" \
    --set-string "image.repository=$operator_repository,image.tag=${OPERATOR_IMAGE##*:}" \
    --set-string "sidecar.image.repository=$sidecar_repository,sidecar.image.tag=${SIDECAR_IMAGE##*:}" \
    --set-json "policy.privilegedMoverNamespaces=[\"$NS\"]" \
    --set-json "policy.allowedRepositoryPrefixes=[\"${REPOSITORY#rest:}\"]" \
    ${E2E_HELM_ARGS:-}
else
  kubectl apply --server-side -f "$ROOT/crds/"
  kubectl wait --for=condition=Established --timeout=60s \
    crd/backupplans.neverwiped.io crd/restores.neverwiped.io
  sed -e "s|__NAMESPACE__|$SYSTEM_NS|g" \
    -e "s|__OPERATOR_IMAGE__|$OPERATOR_IMAGE|g" \
    -e "s|__SIDECAR_IMAGE__|$SIDECAR_IMAGE|g" \
    -e "s|__TEST_NAMESPACE__|$NS|g" \
    "$ROOT/tests/e2e/operator.yaml" | kubectl apply -f -
  kubectl rollout status deployment/neverwiped-operator -n "$SYSTEM_NS" --timeout="$TIMEOUT"
fi

step "rest-server in the cluster"
kubectl apply -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: rest-server
  namespace: $SYSTEM_NS
spec:
  replicas: 1
  selector:
    matchLabels: {app: rest-server}
  template:
    metadata:
      labels: {app: rest-server}
    spec:
      containers:
        - name: rest-server
          image: $REST_SERVER_IMAGE
          env:
            - {name: DISABLE_AUTHENTICATION, value: "1"}
          ports:
            - {containerPort: 8000}
          volumeMounts:
            - {name: data, mountPath: /data}
      volumes:
        - name: data
          emptyDir: {}
---
apiVersion: v1
kind: Service
metadata:
  name: rest-server
  namespace: $SYSTEM_NS
spec:
  selector: {app: rest-server}
  ports:
    - {port: 8000, targetPort: 8000}
EOF
kubectl rollout status deployment/rest-server -n "$SYSTEM_NS" --timeout="$TIMEOUT"

step "namespace $NS: a volume with data, a repository"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
# What an earlier run kept (E2E_KEEP=1) goes first, so the waits below see this run.
kubectl delete restores.neverwiped.io,backupplans.neverwiped.io --all -n "$NS" --timeout=120s
kubectl delete job/init-repository pod/fill pod/compare pvc/data-restored -n "$NS" \
  --ignore-not-found --timeout=120s
# The files below are root's with mode 0600: reading every one needs the privileged mover (root
# with DAC_READ_SEARCH), which the operator allows in this namespace only (the chart's
# policy.privilegedMoverNamespaces), and which needs the Pod Security level "privileged".
kubectl label namespace "$NS" --overwrite pod-security.kubernetes.io/enforce=privileged >/dev/null
storage_class_line=""
if [ -n "$STORAGE_CLASS" ]; then
  storage_class_line="storageClassName: $STORAGE_CLASS"
fi
kubectl apply -n "$NS" -f - <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
  $storage_class_line
---
apiVersion: v1
kind: Pod
metadata:
  name: fill
spec:
  restartPolicy: Never
  containers:
    - name: fill
      image: debian:bookworm-slim
      command:
        - bash
        - -ceu
        - |
          cd /data || exit 1
          find . -mindepth 1 -delete
          mkdir -p docs/deep/er/still photos empty
          for size in 0 1 4095 4096 65537 1048576 5000000; do
            head -c "\$size" /dev/urandom > "docs/random-\$size.bin"
          done
          # Repetitive data, to exercise deduplication and compression.
          for i in \$(seq 1 200); do echo "line \$i of a log that repeats itself"; done > docs/deep/er/still/log.txt
          cp docs/random-1048576.bin photos/copy.bin
          printf 'secret\n' > docs/private.txt && chmod 600 docs/private.txt
          printf 'owned\n' > docs/owned.txt && chown 1000:2000 docs/owned.txt
          printf 'run\n' > docs/script.sh && chmod 755 docs/script.sh
          ln -s deep/er/still/log.txt docs/link-to-log
          ln -s /nowhere docs/dangling
          touch -h -d '2021-03-04 05:06:07' docs/link-to-log
          touch -d '2020-01-02 03:04:05' docs/random-4096.bin docs/deep/er/still
          chmod 750 docs/deep
          sync
      volumeMounts:
        - {name: data, mountPath: /data}
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: data}
EOF
await_value pod/fill '{.status.phase}' Succeeded Failed || die "the pod that fills the volume failed"
kubectl delete pod -n "$NS" fill --wait=true >/dev/null

password=$(head -c 24 /dev/urandom | base64 | tr -d '/+=' | head -c 32)
kubectl create secret generic repository -n "$NS" --from-literal=password="$password" \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -n "$NS" -f - <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: init-repository
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      containers:
        - name: init
          image: $SIDECAR_IMAGE
          imagePullPolicy: IfNotPresent
          command: [neverwiped-sidecar, init, --repo, "$REPOSITORY"]
          env:
            - {name: NEVERWIPED_PASSWORD_FILE, value: /var/run/neverwiped/repository/password}
          volumeMounts:
            - {name: password, mountPath: /var/run/neverwiped/repository, readOnly: true}
      volumes:
        - name: password
          secret:
            secretName: repository
            items: [{key: password, path: password}]
EOF
await_value job/init-repository '{.status.succeeded}' 1 "" || die "the repository could not be initialised"

step "back up: a BackupPlan ($COPY_METHOD) with a manual trigger"
kubectl apply -n "$NS" -f - <<EOF
apiVersion: neverwiped.io/v1alpha1
kind: BackupPlan
metadata:
  name: e2e
spec:
  schedule: "30 2 * * *"
  timeZone: UTC
  manualTrigger: "$(date +%s)"
  copyMethod: $COPY_METHOD
  repository:
    url: ${REPOSITORY#rest:}
    passwordSecretRef: {name: repository, key: password}
  volumes:
    - claimName: data
  mover: {mode: Privileged}
  deadline: 30m
EOF
if ! await_value backupplan/e2e '{.status.lastRun.result}' Succeeded Failed; then
  die "the backup did not succeed: $(kubectl get backupplan e2e -n "$NS" -o jsonpath='{.status.lastRun.reason}: {.status.lastRun.message}')"
fi
kubectl get backupplans -A
snapshot=$(kubectl get backupplan e2e -n "$NS" -o jsonpath='{.status.lastRun.snapshotId}')
[ -n "$snapshot" ] || die "the run recorded no snapshot id"
printf 'snapshot %s\n' "$snapshot"

step "restore: the latest snapshot into a new PVC"
# A Restore acts for its creator: this kubeconfig's user, and the groups that grant its rights.
requester=$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')
requester_groups=$(kubectl auth whoami -o go-template='{{range $i, $g := .status.userInfo.groups}}{{if $i}},{{end}}{{$g}}{{end}}')
kubectl apply -n "$NS" -f - <<EOF
apiVersion: neverwiped.io/v1alpha1
kind: Restore
metadata:
  name: e2e
  annotations:
    neverwiped.io/requested-by: "$requester"
    neverwiped.io/requested-by-groups: "$requester_groups"
spec:
  backupPlanName: e2e
  snapshot: latest
  volumes:
    - sourceClaimName: data
      targetClaimName: data-restored
      createClaim:
        storage: 1Gi
EOF
if ! await_value restores.neverwiped.io/e2e '{.status.phase}' Succeeded Failed; then
  die "the restore did not succeed: $(kubectl get restores.neverwiped.io e2e -n "$NS" -o jsonpath='{.status.phase}: {.status.message}')"
fi
kubectl get restores.neverwiped.io -n "$NS"
restored=$(kubectl get restores.neverwiped.io e2e -n "$NS" -o jsonpath='{.status.snapshotId}')
[ "$restored" = "$snapshot" ] || die "restored snapshot $restored, expected $snapshot"

step "compare: every file's SHA-256 and every entry's metadata"
kubectl apply -n "$NS" -f - <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: compare
spec:
  restartPolicy: Never
  containers:
    - name: compare
      image: debian:bookworm-slim
      command:
        - bash
        - -ceu
        - |
          describe() {
            cd "$1" || exit 1
            local skip=(-not -path ./lost+found -not -path './lost+found/*')
            # Every entry but the root: type, mode, owner, mtime; size and symlink target of
            # everything but directories (whose size depends on the file system's history).
            find . -mindepth 1 "${skip[@]}" -type d -exec stat -c '%n|%F|%a|%u:%g|%Y' {} + | sort
            find . -mindepth 1 "${skip[@]}" -not -type d \
              -exec stat -c '%n|%F|%a|%u:%g|%s|%Y|%N' {} + | sort
            # The content of every regular file.
            find . -type f "${skip[@]}" -print0 | sort -z | xargs -0 -r sha256sum
          }
          describe /source > /tmp/source.txt
          describe /restored > /tmp/restored.txt
          wc -l /tmp/source.txt
          if diff -u /tmp/source.txt /tmp/restored.txt; then echo IDENTICAL; else echo DIFFERENT; exit 1; fi
      volumeMounts:
        - {name: source, mountPath: /source, readOnly: true}
        - {name: restored, mountPath: /restored, readOnly: true}
  volumes:
    - name: source
      persistentVolumeClaim: {claimName: data, readOnly: true}
    - name: restored
      persistentVolumeClaim: {claimName: data-restored, readOnly: true}
EOF
compared=0
await_value pod/compare '{.status.phase}' Succeeded Failed && compared=1
kubectl logs -n "$NS" compare
[ "$compared" = 1 ] || die "the restored volume differs from the source"

step "passed: the restored volume is identical to the source"
