#!/usr/bin/env bash
# scripts/test.sh -- the whole test suite on a fresh Debian machine, with nothing skipped.
#
# Installs and starts what the tests need (Debian packages, the peers through
# ../shared/tools/install-peers.sh, the Python and npm pieces, the real API server, dockerd with
# buildx, a registry on 127.0.0.1:5000, the images through scripts/build-images.sh), then runs
# `cargo fmt --check`, clippy, the shape of every crate (../shared/tools/rust-shape.py) and
# `cargo test --workspace` (the binaries a few side by side: scripts/test-lanes.py,
# NEVERWIPED_TEST_LANES) with NEVERWIPED_REQUIRE_ALL=1 (a test whose dependency is missing fails
# instead of skipping), and ends with each test binary's counts and one line `N passed, F failed,
# S skipped` (scripts/test-summary.py). Exits non-zero when
# anything failed, skipped or did not run.
#
# A second run reuses what is installed and what runs: the services it starts stay up, their
# pids and logs in target/test-services/, until `scripts/test.sh --stop`.
#
# Usage: scripts/test.sh              everything (as root, with ../shared beside the clone)
#        scripts/test.sh --setup      installs and starts everything, runs no check or test
#        scripts/test.sh --packages   only the Debian packages (.ci/run's first step)
#        scripts/test.sh --stop       stops the services a run started
# Logs: target/test-logs/{run,list,skips}.log.

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CARGO_TERM_COLOR=never
SERVICES=$ROOT/target/test-services
LOGS=$ROOT/target/test-logs
started=$(date +%s)
step() { printf '\n==> %s (%ss)\n' "$*" "$(($(date +%s) - started))"; }
die() {
  printf 'test.sh: %s\n' "$*" >&2
  exit 1
}

debian_packages() {
  step "Debian packages: rclone (a second restic REST server), PostgreSQL and MariaDB (tests start their own servers), the container engine, mmdebstrap and a registry (for the images), a C++ compiler (libFuzzer, for the fuzz targets), npm where the machine has none (Grafana's dashboard schema)"
  local packages=(rclone postgresql postgresql-client mariadb-server mariadb-client docker.io mmdebstrap docker-registry g++)
  command -v npm >/dev/null 2>&1 || packages+=(npm)
  local missing=() package
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    # The packages' own services are not needed: policy-rc.d keeps them from starting.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    rm -f /usr/sbin/policy-rc.d
  fi
  promtool_binary
}

# promtool (the alert rules' tests) from Debian's prometheus package: only the binary is
# extracted, the Prometheus service is not installed.
promtool_binary() {
  command -v promtool >/dev/null 2>&1 && return
  step "promtool, from Debian's prometheus package (the binary only)"
  local dir
  dir=$(mktemp -d)
  (cd "$dir" && apt-get download prometheus >/dev/null 2>&1) || { apt-get update -qq && (cd "$dir" && apt-get download prometheus >/dev/null); }
  dpkg-deb -x "$dir"/prometheus_*.deb "$dir/root"
  install -m 0755 "$dir/root/usr/bin/promtool" /usr/local/bin/promtool
  rm -rf "$dir"
  promtool --version | sed -n 1p
}

peers() {
  step "peers: rest-server (the reference restic REST server), restic, kubectl"
  # The script prints tool versions through `| head -1` under pipefail, which now and then dies of
  # SIGPIPE (exit 141) after everything is installed: it is idempotent, so a failed call is tried
  # again.
  local peers_bin="" peers_out attempt
  for attempt in 1 2 3; do
    if peers_out=$(bash ../shared/tools/install-peers.sh); then
      peers_bin=$(printf '%s\n' "$peers_out" | tail -n 1)
      break
    fi
    echo "install-peers.sh failed (attempt $attempt); trying again" >&2
  done
  [ -n "$peers_bin" ] || die "install-peers.sh failed three times"
  export PATH="$peers_bin:$PATH"
  rest-server --version
  rclone --version | sed -n 1p
}

python_and_npm() {
  step "Python modules of the chart and Dockerfile checks (Helm's own engine, Kubernetes schemas), pinned"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    -r tests/chart/requirements.txt -r tests/images/requirements.txt
  python3 -c 'import helm_python; print("helm", helm_python.helm_sdk_version())'

  step "Grafana's dashboard schema (npm @grafana/schema and the TypeScript compiler), pinned"
  local schema=tests/chart/grafana-schema
  # npm keeps its own copy of the lock in node_modules: newer than the lock means installed from it.
  if [ "$schema/node_modules/.package-lock.json" -nt "$schema/package-lock.json" ]; then
    echo "installed"
  else
    npm ci --prefix "$schema" --no-audit --no-fund --loglevel=error
  fi
}

api_server() {
  step "services: real Kubernetes API machinery on loopback (etcd + API server)"
  bash ../shared/tools/real-apiserver.sh up >/dev/null
  eval "$(bash ../shared/tools/real-apiserver.sh env)"
  export KUBECONFIG
  kubectl version 2>/dev/null | sed -n 1,2p
}

container_engine() {
  step "container engine: dockerd without a bridge (containers use the host's network), buildx from Debian unstable"
  if ! docker version >/dev/null 2>&1; then
    dockerd --bridge=none --iptables=false >"$SERVICES/dockerd.log" 2>&1 &
    echo $! >"$SERVICES/dockerd.pid"
    for _ in $(seq 1 100); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
    docker version --format 'engine {{.Server.Version}}' || { cat "$SERVICES/dockerd.log"; exit 1; }
  fi
  bash tests/images/install-buildx.sh
}

registry() {
  step "registry on loopback (127.0.0.1:5000), for the images' push"
  if (exec 3<>/dev/tcp/127.0.0.1/5000) 2>/dev/null; then
    echo "answering"
    return
  fi
  mkdir -p "$SERVICES/registry"
  printf '%s\n' 'version: 0.1' 'storage:' '  filesystem:' "    rootdirectory: $SERVICES/registry" \
    'http:' '  addr: 127.0.0.1:5000' >"$SERVICES/registry.yml"
  docker-registry serve "$SERVICES/registry.yml" >"$SERVICES/registry.log" 2>&1 &
  echo $! >"$SERVICES/registry.pid"
  for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/5000) 2>/dev/null && return; sleep 0.2; done
  cat "$SERVICES/registry.log"
  die "the registry does not answer on 127.0.0.1:5000"
}

images() {
  step "images: neverwiped/operator:dev, neverwiped/sidecar:dev and neverwiped/drill:dev (scripts/build-images.sh; bases, binaries and layers cached)"
  nice scripts/build-images.sh --push 127.0.0.1:5000
  docker run --rm --read-only --cap-drop=ALL --entrypoint pg_dump neverwiped/sidecar:dev --version
  docker run --rm --read-only --cap-drop=ALL --entrypoint mariadb-dump neverwiped/sidecar:dev --version
  docker run --rm --read-only --cap-drop=ALL --entrypoint mariadbd neverwiped/drill:dev --version
  step "images: the data stores of the stream tests (tests/images/stores/build.sh)"
  nice tests/images/stores/build.sh
  # The images' own binaries, for sidecar/tests/images.rs: checked, not built a second time.
  NEVERWIPED_STATIC_BINARIES=$ROOT/.image-binaries/$(docker version --format '{{.Server.Arch}}')
  export NEVERWIPED_STATIC_BINARIES
}

lints() {
  step "formatting and lints"
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets --quiet -- -D warnings
  # Every crate's shape: no function over 100 lines, no file over 600, no import cycle, no
  # condition status compared with a string.
  python3 ../shared/tools/rust-shape.py 100 600 api/src contract/src sidecar/src operator/src \
    plugin/src testkit/src
}

# The test binaries build from the moment the compilers are installed, beside the set-up's
# downloads, installs and waits on servers; `suite` waits for them.
build_tests_in_background() {
  step "test binaries: cargo test --workspace --no-run, in the background while the set-up runs"
  mkdir -p "$LOGS"
  cargo test --workspace --no-run --quiet --message-format=json-render-diagnostics \
    >"$LOGS/artifacts.json" 2>"$LOGS/build.log" &
  TEST_BUILD=$!
  # A set-up step that fails ends the run: the build goes with it.
  trap 'kill "$TEST_BUILD" 2>/dev/null || true' EXIT
}

built_tests() {
  if [ -z "${TEST_BUILD:-}" ]; then
    cargo test --workspace --no-run --quiet --message-format=json-render-diagnostics >"$LOGS/artifacts.json"
    return
  fi
  step "test binaries: waiting for the background build"
  wait "$TEST_BUILD" || { cat "$LOGS/build.log"; die "the test binaries do not build"; }
}

suite() {
  step "tests: cargo test --workspace, binaries in lanes (scripts/test-lanes.py), NEVERWIPED_REQUIRE_ALL=1 (a missing dependency fails its test)"
  mkdir -p "$LOGS"
  : >"$LOGS/skips.log"
  export NEVERWIPED_REQUIRE_ALL=1 NEVERWIPED_SKIP_LOG=$LOGS/skips.log
  local tests_status=0 summary_status=0
  built_tests
  # The binaries side by side (most of their time is waiting on servers), output per binary.
  python3 scripts/test-lanes.py "$LOGS/artifacts.json" "$LOGS/run.log" || tests_status=$?
  step "counts: what each test binary holds (cargo test -- --list) against what it ran"
  cargo test --workspace -- --list >"$LOGS/list.log" 2>&1 ||
    { cat "$LOGS/list.log"; die "cannot list the tests"; }
  python3 scripts/test-summary.py "$LOGS/run.log" "$LOGS/list.log" "$LOGS/skips.log" ||
    summary_status=$?
  [ "$tests_status" = 0 ] && [ "$summary_status" = 0 ]
}

stop_services() {
  bash ../shared/tools/real-apiserver.sh stop >/dev/null 2>&1 || true
  local pidfile pid
  for pidfile in "$SERVICES"/*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    # dockerd stops its containers first; wait for it so nothing outlives the run.
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    rm -f "$pidfile"
  done
}

main() {
  case "${1:-}" in
    --packages) debian_packages; return ;;
    --stop) stop_services; return ;;
    --setup | "") ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
  esac
  [ "$(id -u)" = 0 ] || die "run as root: it installs packages, and tests mount, chown and switch users"
  mkdir -p "$SERVICES"
  debian_packages
  [ "${1:-}" = --setup ] || build_tests_in_background
  peers
  python_and_npm
  api_server
  container_engine
  registry
  images
  [ "${1:-}" != --setup ] || return 0
  lints
  suite
}

# Sourced, it only defines the steps (to run one of them by hand).
[ "${BASH_SOURCE[0]}" != "$0" ] || main "$@"
