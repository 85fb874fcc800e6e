# The neverwiped images, two targets of one recipe. Build context: the repository's root.
#
#   operator  neverwiped-operator, statically linked, on a distroless base, user 65532
#   sidecar   neverwiped-sidecar, statically linked, with pg_dump/psql 18 and mariadb-dump/mariadb
#             on Debian slim, user 65532
#
#   docker buildx build --target sidecar --platform linux/amd64,linux/arm64 \
#       -t ghcr.io/neverwiped/sidecar:0.1.0 .
#
# scripts/build-images.sh builds both on a machine without access to any image registry: it makes
# the base images named below from Debian packages and can take binaries built on the host
# (BINARIES=prebuilt). docs/images.md explains the choices (static glibc rather than musl,
# cross-compiling instead of emulating arm64) and every build argument.
# tests/images/check_dockerfiles.py checks this file.
#
# No `# syntax=` line: that would make BuildKit pull a frontend image; the builder's own Dockerfile
# frontend reads everything used here.

# Base images, pinned by tag; release builds pin them by digest too (--build-arg RUST_IMAGE=...@sha256:...).
ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-trixie
ARG DEBIAN_IMAGE=docker.io/library/debian:trixie-20260406-slim
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian13:nonroot
# Where the binaries come from: `compile` (in the RUST_IMAGE stage below) or `prebuilt` (from
# .image-binaries/<arch>/ in the build context, put there by scripts/build-images.sh after building
# them on the host with the same cargo command and RUSTFLAGS and checking that they are static).
ARG BINARIES=compile
# Where postgresql-client-$PG_MAJOR comes from: `pgdg` (the PostgreSQL project's apt repository) or
# `debian-unstable` (Debian unstable's package of the same client, for networks that reach only
# Debian's mirrors).
ARG PG_APT_SOURCE=pgdg

# ---------------------------------------------------------------------------------------------
# Compile: on the build machine's own platform, cross-compiling to the target's when they differ.
FROM --platform=$BUILDPLATFORM ${RUST_IMAGE} AS build-compile
ARG TARGETARCH
ARG BUILDARCH
WORKDIR /src
# A C toolchain and static C library for the target: ring and zstd-sys compile C code.
RUN set -eux; \
    case "$TARGETARCH" in \
      amd64) triple=x86_64-unknown-linux-gnu; gnu=x86_64-linux-gnu; cross_pkgs="gcc-x86-64-linux-gnu libc6-dev-amd64-cross" ;; \
      arm64) triple=aarch64-unknown-linux-gnu; gnu=aarch64-linux-gnu; cross_pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;; \
      *) echo "unsupported TARGETARCH: $TARGETARCH (amd64 and arm64 are built)" >&2; exit 1 ;; \
    esac; \
    if [ "$TARGETARCH" = "$BUILDARCH" ]; then cross_pkgs="gcc libc6-dev"; cc=gcc; else cc="$gnu-gcc"; fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends $cross_pkgs binutils; \
    rm -rf /var/lib/apt/lists/*; \
    rustup target add "$triple"; \
    upper=$(echo "$triple" | tr 'a-z-' 'A-Z_'); lower=$(echo "$triple" | tr '-' '_'); \
    { echo "export TRIPLE=$triple"; \
      echo "export CARGO_TARGET_${upper}_LINKER=$cc"; \
      echo "export CC_${lower}=$cc"; } > /etc/neverwiped-build.env

COPY Cargo.toml Cargo.lock ./
COPY api api
COPY contract contract
COPY sidecar sidecar
COPY operator operator
COPY plugin plugin
COPY testkit testkit

# Statically linked against glibc (crt-static): no libc needed in the image, glibc's fast
# multi-threaded allocator kept. Build scripts and proc macros stay dynamic because --target is
# given. Both binaries in one cargo run, so the shared crates are compiled once.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    set -eux; \
    . /etc/neverwiped-build.env; \
    RUSTFLAGS="-C target-feature=+crt-static" \
      cargo build --release --locked --target "$TRIPLE" \
        -p neverwiped-operator --bin neverwiped-operator -p neverwiped-sidecar --bin neverwiped-sidecar; \
    for name in neverwiped-operator neverwiped-sidecar; do \
      binary="target/$TRIPLE/release/$name"; \
      if readelf --program-headers "$binary" | grep -q INTERP || readelf --dynamic "$binary" | grep -q NEEDED; then \
        echo "$binary is not statically linked" >&2; exit 1; \
      fi; \
      install -D -m 0755 "$binary" "/out/$name"; \
    done

# Prebuilt: the two binaries from the build context, one folder per target architecture.
FROM scratch AS build-prebuilt
ARG TARGETARCH
COPY .image-binaries/${TARGETARCH}/neverwiped-operator .image-binaries/${TARGETARCH}/neverwiped-sidecar /out/

FROM build-${BINARIES} AS build

# ---------------------------------------------------------------------------------------------
# The apt configuration that makes postgresql-client-$PG_MAJOR installable, in /apt-config/ as it
# goes below /etc/apt/.

# The PostgreSQL project's repository. Its signing key is taken from Debian's own
# postgresql-common package (so it arrives through Debian's signed archive, not a download) and
# checked against its fingerprint.
FROM ${DEBIAN_IMAGE} AS pg-apt-pgdg
ARG PGDG_KEY_FINGERPRINT=B97B0AFCAA1A47F044F244A07FCC7D46ACCC4CF8
WORKDIR /pgdg
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends gpg; \
    apt-get download postgresql-common; \
    dpkg-deb --extract postgresql-common_*.deb extracted; \
    export GNUPGHOME=/pgdg/gnupg; mkdir -m 0700 "$GNUPGHOME"; \
    gpg --batch --import extracted/usr/share/postgresql-common/pgdg/apt.postgresql.org.asc; \
    gpg --batch --with-colons --list-keys "$PGDG_KEY_FINGERPRINT" | grep -qx "fpr:::::::::${PGDG_KEY_FINGERPRINT}:"; \
    mkdir -p /apt-config/keyrings /apt-config/sources.list.d; \
    gpg --batch --export "$PGDG_KEY_FINGERPRINT" > /apt-config/keyrings/apt.postgresql.org.gpg; \
    . /etc/os-release; \
    printf '%s\n' \
      'Types: deb' \
      'URIs: https://apt.postgresql.org/pub/repos/apt' \
      "Suites: ${VERSION_CODENAME}-pgdg" \
      'Components: main' \
      'Signed-By: /etc/apt/keyrings/apt.postgresql.org.gpg' \
      > /apt-config/sources.list.d/postgresql.sources

# Debian unstable, signed by Debian's archive keys, pinned below the release so that apt takes
# from it only the PostgreSQL client and its libpq5 (at the release's priority, so the newer
# version wins: the client needs the libpq of its own major version). Its Release file
# is signed, but valid for a week only: a mirror frozen at a date (a snapshot, a closed network's
# copy) would be refused after that, so the validity period is not checked for this source.
FROM ${DEBIAN_IMAGE} AS pg-apt-debian-unstable
RUN set -eux; \
    mkdir -p /apt-config/sources.list.d /apt-config/preferences.d; \
    printf '%s\n' \
      'Types: deb' \
      'URIs: http://deb.debian.org/debian' \
      'Suites: unstable' \
      'Components: main' \
      'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
      'Check-Valid-Until: no' \
      > /apt-config/sources.list.d/postgresql.sources; \
    printf '%s\n' \
      'Package: *' \
      'Pin: release a=unstable' \
      'Pin-Priority: 100' \
      '' \
      'Package: postgresql-client-* libpq5' \
      'Pin: release a=unstable' \
      'Pin-Priority: 500' \
      > /apt-config/preferences.d/postgresql.pref

FROM pg-apt-${PG_APT_SOURCE} AS pg-apt

# ---------------------------------------------------------------------------------------------
# The operator: the binary, CA certificates and time zones of the distroless base, user 65532.
FROM ${RUNTIME_IMAGE} AS operator
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="neverwiped-operator" \
      org.opencontainers.image.description="Reconciles neverwiped BackupPlan and Restore resources into backup and restore Jobs." \
      org.opencontainers.image.source="https://github.com/neverwiped/neverwiped-k8s" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/neverwiped-operator /usr/local/bin/neverwiped-operator
# /healthz, /readyz and /metrics (NEVERWIPED_HTTP_ADDR).
EXPOSE 8080
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/neverwiped-operator"]

# ---------------------------------------------------------------------------------------------
# The sidecar: the data mover and the database client tools it runs for dumps and restores.
#   - PostgreSQL: postgresql-client-18. pg_dump and pg_dumpall 18 dump servers 9.2 to 18, so one
#     client covers PostgreSQL 13 to 18.
#   - MariaDB and MySQL: Debian's mariadb-client (mariadb-dump, mariadb) for MariaDB 10.x and
#     11.x, and MySQL 8 (the client plugin for caching_sha2_password is included).
FROM ${DEBIAN_IMAGE} AS sidecar
ARG VERSION=0.1.0
# The PostgreSQL client's major version: the newest, which dumps every older server.
ARG PG_MAJOR=18
LABEL org.opencontainers.image.title="neverwiped-sidecar" \
      org.opencontainers.image.description="The neverwiped data mover, with pg_dump 18 and mariadb-dump for database dumps." \
      org.opencontainers.image.source="https://github.com/neverwiped/neverwiped-k8s" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=pg-apt /apt-config/ /etc/apt/
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates "postgresql-client-${PG_MAJOR}" mariadb-client; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/*; \
    "/usr/lib/postgresql/${PG_MAJOR}/bin/pg_dump" --version; \
    mariadb-dump --version; \
    groupadd --gid 65532 neverwiped; \
    useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin neverwiped
# The real PostgreSQL binaries first: no version-picking wrapper between the sidecar and pg_dump.
ENV PATH=/usr/lib/postgresql/${PG_MAJOR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY --from=build /out/neverwiped-sidecar /usr/local/bin/neverwiped-sidecar
# A non-root user by default. The operator's Jobs set the user themselves: root with only
# DAC_READ_SEARCH to read volumes, root with CHOWN, DAC_OVERRIDE and FOWNER to restore them,
# 65532 without capabilities for databases; always with a read-only root filesystem and /tmp
# on an emptyDir.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/neverwiped-sidecar"]
CMD ["--help"]

# ---------------------------------------------------------------------------------------------
# The drill: the sidecar with the servers a restore drill loads each dump into, started as
# throwaway processes in the drill's scratch space (neverwiped-sidecar drill --databases).
#   - PostgreSQL: postgresql-$PG_SERVER_MAJOR: 18 from the PostgreSQL project's repository
#     (PG_APT_SOURCE=pgdg), the server of the client the sidecar dumps with; Debian unstable's 18
#     needs a newer C library than this base has, so with PG_APT_SOURCE=debian-unstable
#     scripts/build-images.sh builds it with trixie's 17 (a dump of an 18 server may then not
#     load: drill such servers with a pgdg image).
#   - MariaDB and MySQL: Debian's mariadb-server.
# No cluster is created at install time: a drill makes its own with initdb and
# mariadb-install-db, under the scratch folder, as the pod's user.
FROM sidecar AS drill
ARG VERSION=0.1.0
ARG PG_SERVER_MAJOR=18
LABEL org.opencontainers.image.title="neverwiped-drill" \
      org.opencontainers.image.description="The neverwiped data mover with PostgreSQL and MariaDB servers, for restore drills." \
      org.opencontainers.image.version="${VERSION}"
USER root
RUN set -eux; \
    mkdir -p /etc/postgresql-common; \
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf; \
    apt-get update; \
    # postgresql-common of the same source as the client's postgresql-client-common (its
    # dependency, of the same version).
    common=postgresql-common; \
    if grep -qs 'a=unstable' /etc/apt/preferences.d/postgresql.pref; then \
      common=postgresql-common/unstable; \
    fi; \
    apt-get install -y --no-install-recommends "postgresql-${PG_SERVER_MAJOR}" "$common" mariadb-server; \
    apt-get clean; \
    rm -rf /var/lib/apt/lists/* /var/lib/mysql/* /var/lib/postgresql/*; \
    "/usr/lib/postgresql/${PG_SERVER_MAJOR}/bin/initdb" --version; \
    "/usr/lib/postgresql/${PG_SERVER_MAJOR}/bin/postgres" --version; \
    mariadbd --version; \
    command -v mariadb-install-db
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/neverwiped-sidecar"]
CMD ["--help"]
