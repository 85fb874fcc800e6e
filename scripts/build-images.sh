#!/usr/bin/env bash
# scripts/build-images.sh -- builds neverwiped/operator:dev and neverwiped/sidecar:dev from the
# repository's Dockerfile on a machine that can reach Debian's mirrors but no image registry.
#
#   1. Base images, made locally from Debian packages under the names the Dockerfile expects
#      (skipped when an image of that name is already there):
#        docker.io/library/debian:trixie-20260406-slim   mmdebstrap --variant=minbase trixie | docker import
#        gcr.io/distroless/static-debian13:nonroot       CA certificates, time zones, /etc/passwd with
#                                                        nonroot (65532) and /tmp, from that Debian image
#   2. The binaries: built here with the Dockerfile's cargo command and RUSTFLAGS (static glibc),
#      checked to be static, and handed to the Dockerfile's `prebuilt` stage (BINARIES=prebuilt).
#      With --compile the Dockerfile compiles them itself in RUST_IMAGE (which must then exist).
#   3. Both targets of the Dockerfile with BuildKit (`docker buildx build`, the engine's own
#      builder), PostgreSQL's client from Debian unstable (PG_APT_SOURCE=debian-unstable) unless
#      --pgdg is given.
#   4. With --push REGISTRY (e.g. 127.0.0.1:5000): tags and pushes REGISTRY/neverwiped/<image>:<tag>.
#
# Usage: scripts/build-images.sh [--tag dev] [--push REGISTRY] [--compile] [--pgdg]
# Environment: CARGO_TARGET_DIR as cargo reads it; NEVERWIPED_BUILD_JOBS (cargo -j);
#              DEBIAN_MIRROR (http://deb.debian.org/debian).
# Needs: docker with the buildx plugin, mmdebstrap (for the Debian base), cargo and rustc
# (for the host build), readelf. Builds run with `--network host`: the engine may have no bridge.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TAG=dev
PUSH=""
BINARIES=prebuilt
PG_APT_SOURCE=debian-unstable
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --push) PUSH=$2; shift 2 ;;
    --compile) BINARIES=compile; shift ;;
    --pgdg) PG_APT_SOURCE=pgdg; shift ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "build-images: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

DEBIAN_IMAGE=docker.io/library/debian:trixie-20260406-slim
RUNTIME_IMAGE=gcr.io/distroless/static-debian13:nonroot
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

started=$(date +%s)
step() { printf '==> %s (%ss)\n' "$*" "$(($(date +%s) - started))" >&2; }
die() {
  printf 'build-images: %s\n' "$*" >&2
  exit 1
}
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

docker buildx version >/dev/null 2>&1 || die "the docker buildx plugin is missing (docs/images.md, \"Building\")"

if have_image "$DEBIAN_IMAGE"; then
  step "base $DEBIAN_IMAGE: present"
else
  step "base $DEBIAN_IMAGE: mmdebstrap trixie from $MIRROR"
  command -v mmdebstrap >/dev/null || die "mmdebstrap is needed to make $DEBIAN_IMAGE"
  # Like Debian's slim images: no documentation or manual pages, no translations.
  mmdebstrap --quiet --variant=minbase --format=tar \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    trixie - "$MIRROR" |
    docker import --change 'CMD ["bash"]' - "$DEBIAN_IMAGE" >/dev/null
fi

if have_image "$RUNTIME_IMAGE"; then
  step "base $RUNTIME_IMAGE: present"
else
  step "base $RUNTIME_IMAGE: from $DEBIAN_IMAGE's ca-certificates and tzdata"
  # What the distroless static image holds that the operator uses: CA certificates, time zones,
  # the nonroot user and group (65532) and a world-writable /tmp. No shell, no libc.
  docker buildx build --network host --load -t "$RUNTIME_IMAGE" - >/dev/null <<EOF
FROM $DEBIAN_IMAGE AS files
RUN set -eux; apt-get update; apt-get install -y --no-install-recommends ca-certificates tzdata; \
    mkdir -p /root-fs/etc/ssl/certs /root-fs/usr/share /root-fs/tmp /root-fs/home/nonroot; \
    cp /etc/ssl/certs/ca-certificates.crt /root-fs/etc/ssl/certs/; \
    cp -a /usr/share/zoneinfo /root-fs/usr/share/; \
    printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
      'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > /root-fs/etc/passwd; \
    printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' > /root-fs/etc/group; \
    chmod 1777 /root-fs/tmp; chown 65532:65532 /root-fs/home/nonroot
FROM scratch
COPY --from=files /root-fs/ /
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
EOF
fi

build_args=(--build-arg "BINARIES=$BINARIES" --build-arg "PG_APT_SOURCE=$PG_APT_SOURCE")
# The drill's PostgreSQL server: Debian unstable's 18 needs a newer C library than trixie's.
[ "$PG_APT_SOURCE" = debian-unstable ] && build_args+=(--build-arg "PG_SERVER_MAJOR=17")
if [ "$BINARIES" = prebuilt ]; then
  arch=$(docker version --format '{{.Server.Arch}}')
  triple=$(rustc -vV | sed -n 's/^host: //p')
  target_dir=${CARGO_TARGET_DIR:-$ROOT/target}
  jobs=()
  [ -n "${NEVERWIPED_BUILD_JOBS:-}" ] && jobs=(-j "$NEVERWIPED_BUILD_JOBS")
  step "binaries: cargo build --release --target $triple (static, as the Dockerfile builds them)"
  # Exactly the Dockerfile's RUSTFLAGS (tests/images/check_dockerfiles.py checks that they agree).
  RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build "${jobs[@]}" --quiet --release --locked --target "$triple" \
    -p neverwiped-operator --bin neverwiped-operator -p neverwiped-sidecar --bin neverwiped-sidecar
  staged=$ROOT/.image-binaries/$arch
  mkdir -p "$staged"
  for name in neverwiped-operator neverwiped-sidecar; do
    binary=$target_dir/$triple/release/$name
    if readelf --program-headers "$binary" | grep -q INTERP || readelf --dynamic "$binary" | grep -q NEEDED; then
      die "$binary is not statically linked"
    fi
    # A copy only when it changed, so that BuildKit's cache of the layers above holds.
    cmp -s "$binary" "$staged/$name" || install -m 0755 "$binary" "$staged/$name"
  done
fi

for target in operator sidecar drill; do
  image=neverwiped/$target:$TAG
  step "image $image (target $target, BINARIES=$BINARIES, PG_APT_SOURCE=$PG_APT_SOURCE)"
  docker buildx build --network host --load "${build_args[@]}" --target "$target" -t "$image" "$ROOT"
  if [ -n "$PUSH" ]; then
    docker tag "$image" "$PUSH/$image"
    docker push --quiet "$PUSH/$image" >/dev/null
    step "pushed $PUSH/$image"
  fi
done
step "done: neverwiped/operator:$TAG neverwiped/sidecar:$TAG neverwiped/drill:$TAG"
