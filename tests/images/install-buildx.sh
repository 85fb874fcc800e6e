#!/usr/bin/env bash
# tests/images/install-buildx.sh -- the docker buildx plugin (BuildKit's client) from Debian
# unstable, for a Debian release whose docker.io has none, without touching the system's apt
# configuration: apt downloads the package into a private folder, dpkg -x unpacks it, and the
# plugin is copied to ~/.docker/cli-plugins/ (where the docker CLI looks for plugins).
#
#   tests/images/install-buildx.sh        # PREFIX defaults to ~/.cache/neverwiped-buildx
#
# Idempotent: does nothing when `docker buildx version` already answers.
set -euo pipefail

if docker buildx version >/dev/null 2>&1; then
  docker buildx version
  exit 0
fi
PREFIX=${PREFIX:-$HOME/.cache/neverwiped-buildx}
SUITE=${BUILDX_SUITE:-sid}
mkdir -p "$PREFIX/apt/lists/partial" "$PREFIX/apt/cache/archives/partial" "$PREFIX/debs" "$PREFIX/root"
echo "deb http://deb.debian.org/debian $SUITE main" > "$PREFIX/apt/sources.list"
apt_opts=(-o Dir::Etc::sourcelist="$PREFIX/apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
          -o Dir::State::Lists="$PREFIX/apt/lists" -o Dir::Cache="$PREFIX/apt/cache"
          -o Dir::State::status="$PREFIX/apt/status" -o APT::Architecture="$(dpkg --print-architecture)"
          -o Debug::NoLocking=1)
: > "$PREFIX/apt/status"   # an empty package status: what this system has installed does not matter
apt-get "${apt_opts[@]}" -qq update
rm -f "$PREFIX"/debs/docker-buildx_*.deb
# The _apt sandbox user may not write to $PREFIX: download unsandboxed, quietly.
(cd "$PREFIX/debs" && apt-get "${apt_opts[@]}" -o APT::Sandbox::User=root -qq download docker-buildx)
dpkg -x "$PREFIX"/debs/docker-buildx_*.deb "$PREFIX/root"
mkdir -p "$HOME/.docker/cli-plugins"
install -m 0755 "$PREFIX/root/usr/libexec/docker/cli-plugins/docker-buildx" "$HOME/.docker/cli-plugins/docker-buildx"
docker buildx version
