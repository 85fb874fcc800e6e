#!/usr/bin/env bash
# tests/images/stores/build.sh -- builds the data store images the stream tests run
# (neverwiped-test/redis:dev, neverwiped-test/sqlite:dev, neverwiped-test/etcd:dev) from this
# folder's Dockerfile, on the Debian base scripts/build-images.sh makes. Layers are cached.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
docker image inspect docker.io/library/debian:trixie-20260406-slim >/dev/null 2>&1 ||
  { echo "stores/build.sh: the Debian base is missing; run scripts/build-images.sh first" >&2; exit 1; }
for store in redis sqlite etcd; do
  docker buildx build --quiet --network host --load --target "$store" \
    -t "neverwiped-test/$store:dev" "$here" >/dev/null
  echo "neverwiped-test/$store:dev"
done
