#!/usr/bin/env python3
"""Checks the invariants of the image recipes without building them.

    python3 tests/images/check_dockerfiles.py

The root Dockerfile (targets `operator` and `sidecar`) is parsed with dockerfile-parse (PyPI)
and checked against the workspace it builds and scripts/build-images.sh:

- multi-stage, without a `# syntax=` line (it would make BuildKit pull a frontend image);
- every base image is pinned by a tag that is not `latest` (a digest may follow);
- nothing is fetched outside a package manager that checks signatures or checksums: no ADD of a
  URL, no curl or wget, `cargo build --locked`, every extra apt source `Signed-By` a keyring;
- BINARIES picks `build-compile` or `build-prebuilt` as the stage `build`, PG_APT_SOURCE picks
  `pg-apt-pgdg` or `pg-apt-debian-unstable`; every choice has its stage;
- build-compile is the static build docs/images.md describes (`+crt-static`, `--release
  --target`), with the same RUSTFLAGS as tests/images/static-build.sh and scripts/build-images.sh
  (which builds the prebuilt binaries), for the package and binary names of the Cargo manifests,
  and copies every workspace member; build-prebuilt takes both binaries from .image-binaries/;
- each target copies exactly the workspace's binary to /usr/local/bin, runs it in exec form,
  and sets a numeric, non-root USER; the sidecar's binary is the name the operator's Jobs run
  (contract/src/cli.rs, SIDECAR_BINARY) and is on the image's PATH;
- the sidecar target installs the database client packages, and docs/images.md names every
  package it installs and the PostgreSQL client's major version;
- scripts/build-images.sh makes the Debian and runtime bases under the names the Dockerfile's
  DEBIAN_IMAGE and RUNTIME_IMAGE default to;
- .dockerignore starts from "exclude everything" and lets in everything the Dockerfile COPYs,
  and no Cargo manifest declares test, bench or example targets (tests/ stays out);
- the images' version label defaults to the workspace version, and the Rust image is at least
  the newest `rust-version` of the workspace.

Exits 0 when every check passes and 1 otherwise. Without the dockerfile_parse module it prints
"SKIPPED: ..." and exits 77; sidecar/tests/images.rs then fails under CI and skips elsewhere.
"""

import re
import shlex
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

try:
    from dockerfile_parse import DockerfileParser
except ImportError:
    print("SKIPPED: the Python module dockerfile_parse is missing")
    sys.exit(77)


class Checks:
    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, condition, what):
        if condition:
            self.passed += 1
        else:
            self.failures.append(what)
        return condition


def read_toml(relative):
    with open(ROOT / relative, "rb") as handle:
        return tomllib.load(handle)


def version_tuple(text):
    return tuple(int(part) for part in text.split("."))


class Stage:
    def __init__(self, name, image, instructions):
        self.name = name
        self.image = image
        self.instructions = instructions

    def values(self, instruction):
        return [value for kind, value in self.instructions if kind == instruction]


def substitute(text, variables):
    """Expands $NAME and ${NAME} from `variables`, leaving unknown ones as they are."""

    def expand(match):
        name = match.group(1) or match.group(2)
        return variables.get(name, match.group(0))

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", expand, text)


def arg_default(value):
    name, _, default = value.partition("=")
    return name.strip(), default.strip().strip('"')


def parse(path):
    """The stages of a Dockerfile, with ARG defaults expanded in FROM lines and in each stage."""
    parser = DockerfileParser(path=str(path))
    global_args = {}
    stages = []
    stage_args = {}
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "COMMENT":
            continue
        if instruction == "FROM":
            words = [w for w in value.split() if not w.startswith("--platform")]
            image = substitute(words[0], global_args)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stage_args = {}
            stages.append(Stage(name, image, []))
            continue
        if instruction == "ARG":
            name, default = arg_default(value)
            if not stages:
                global_args[name] = default
                continue
            # An ARG in a stage re-declares a global one, or declares its own default.
            stage_args[name] = default if default else global_args.get(name, "")
        if not stages:
            continue
        variables = {k: v for k, v in stage_args.items() if v}
        stages[-1].instructions.append((instruction, substitute(value, variables)))
    return parser, global_args, stages


def copy_parts(value):
    """(flags, sources, destination) of a COPY/ADD value in shell form."""
    words = shlex.split(value)
    flags = [w for w in words if w.startswith("--")]
    rest = [w for w in words if not w.startswith("--")]
    return flags, rest[:-1], rest[-1]


def apt_installs(run):
    """The packages of every `apt-get install` in a RUN command."""
    packages = []
    for command in re.split(r";|&&|\|\|", run):
        words = shlex.split(command, posix=True) if command.strip() else []
        if len(words) >= 2 and words[0] == "apt-get" and "install" in words:
            after = words[words.index("install") + 1 :]
            packages.extend(w for w in after if not w.startswith("-"))
    return packages


def stage_named(stages, name):
    return next((stage for stage in stages if stage.name == name), None)


def check_choice(checks, global_args, stage_names, argument, prefix, choices):
    """A build argument that picks a stage: `FROM <prefix>${ARGUMENT}`, a stage per choice."""
    checks.check(
        global_args.get(argument) in choices,
        f"Dockerfile: {argument} defaults to {global_args.get(argument)!r}, not one of {choices}",
    )
    for choice in choices:
        checks.check(
            f"{prefix}{choice}" in stage_names,
            f"Dockerfile: {argument}={choice} has no stage {prefix}{choice}",
        )


def check_recipe(checks, workspace):
    """The stages every image shares: bases, downloads, the two ways to the binaries."""
    where = "Dockerfile"
    path = ROOT / where
    if not checks.check(path.is_file(), f"{where} does not exist"):
        return None, {}
    parser, global_args, stages = parse(path)
    stage_names = {stage.name for stage in stages if stage.name}
    checks.check(parser.is_multistage and len(stages) >= 4, f"{where}: not a multi-stage build")
    checks.check(
        not re.search(r"^#\s*syntax=", path.read_text(), re.MULTILINE),
        f"{where}: a `# syntax=` line makes BuildKit pull a frontend image",
    )

    # Base images pinned by tag (not latest); stage names may be used as bases.
    for stage in stages:
        image = stage.image
        if image in stage_names or image == "scratch":
            continue
        reference = image.split("@", 1)[0]
        last = reference.rsplit("/", 1)[-1]
        tag = last.split(":", 1)[1] if ":" in last else ""
        checks.check(
            tag != "" and tag != "latest" and "$" not in image,
            f"{where}: base image {image!r} of stage {stage.name!r} is not pinned by a tag",
        )

    # Nothing fetched outside the package managers.
    for stage in stages:
        for instruction, value in stage.instructions:
            if instruction == "ADD":
                _, sources, _ = copy_parts(value)
                checks.check(
                    not any(re.match(r"^[a-z+]+://|^git@", s) for s in sources),
                    f"{where}: ADD of a remote URL in stage {stage.name!r}: {value}",
                )
            if instruction == "RUN":
                checks.check(
                    not re.search(r"\b(curl|wget)\b", value),
                    f"{where}: stage {stage.name!r} downloads with curl/wget: {value[:80]}…",
                )
                if "sources.list" in value or ".sources" in value:
                    checks.check(
                        "Signed-By:" in value or "signed-by=" in value,
                        f"{where}: an apt source of stage {stage.name!r} is not Signed-By a keyring",
                    )

    # The binaries: compiled in the Rust image, or taken prebuilt; `build` is the chosen one.
    check_choice(checks, global_args, stage_names, "BINARIES", "build-", ["compile", "prebuilt"])
    check_choice(checks, global_args, stage_names, "PG_APT_SOURCE", "pg-apt-", ["pgdg", "debian-unstable"])
    build = stage_named(stages, "build")
    checks.check(
        build is not None and build.image == f"build-{global_args.get('BINARIES')}",
        f"{where}: the stage `build` is not `FROM build-${{BINARIES}}`",
    )
    compile_stage = stage_named(stages, "build-compile")
    cargo_runs = [v for v in (compile_stage.values("RUN") if compile_stage else []) if "cargo build" in v]
    if checks.check(len(cargo_runs) == 1, f"{where}: build-compile has no single `cargo build`"):
        run = cargo_runs[0]
        needed = ["--release", "--locked", "--target"]
        for package, binary in workspace["bins"].items():
            needed += [f"-p {package}", f"--bin {binary}"]
        for flag in needed:
            checks.check(flag in run, f"{where}: `cargo build` lacks `{flag}`")
        flags = re.search(r'RUSTFLAGS="([^"]*)"', run)
        if checks.check(flags is not None, f"{where}: the build sets no RUSTFLAGS"):
            checks.check(
                "target-feature=+crt-static" in flags.group(1),
                f"{where}: RUSTFLAGS {flags.group(1)!r} do not link statically (+crt-static)",
            )
            for script, script_flags in workspace["script_rustflags"].items():
                checks.check(
                    flags.group(1) == script_flags,
                    f"{where}: RUSTFLAGS {flags.group(1)!r} differ from {script}'s {script_flags!r}",
                )
        checks.check(
            re.search(r"readelf .*INTERP", run) and re.search(r"readelf .*NEEDED", run),
            f"{where}: the build does not verify that the binaries are static",
        )
    copied = set()
    for instruction, value in compile_stage.instructions if compile_stage else []:
        if instruction == "COPY":
            flags, sources, _ = copy_parts(value)
            if not any(f.startswith("--from") for f in flags):
                copied.update(s.rstrip("/") for s in sources)
    for member in workspace["members"] + ["Cargo.toml", "Cargo.lock"]:
        checks.check(member in copied, f"{where}: build-compile does not COPY {member}")
    prebuilt = stage_named(stages, "build-prebuilt")
    prebuilt_sources = [s for v in (prebuilt.values("COPY") if prebuilt else []) for s in copy_parts(v)[1]]
    for binary in workspace["bins"].values():
        checks.check(
            any(s.startswith(".image-binaries/") and s.endswith(f"/{binary}") for s in prebuilt_sources),
            f"{where}: build-prebuilt does not take {binary} from .image-binaries/",
        )
    copied.update(s.rstrip("/") for s in prebuilt_sources)
    workspace["copied"].update(copied)

    # The Rust image can build the workspace.
    rust_image = global_args.get("RUST_IMAGE", "")
    rust = re.search(r"rust:(\d+\.\d+)", rust_image)
    if checks.check(rust is not None, f"{where}: RUST_IMAGE {rust_image!r} names no Rust version"):
        checks.check(
            version_tuple(rust.group(1)) >= workspace["rust_version"],
            f"{where}: Rust {rust.group(1)} is older than the workspace's rust-version "
            f"{'.'.join(map(str, workspace['rust_version']))}",
        )

    # The build script makes the bases under the names the Dockerfile expects.
    script = (ROOT / "scripts/build-images.sh").read_text()
    for argument in ("DEBIAN_IMAGE", "RUNTIME_IMAGE"):
        checks.check(
            f"{argument}={global_args.get(argument)}" in script,
            f"scripts/build-images.sh does not make {argument} {global_args.get(argument)!r}",
        )
    return stages, global_args


def check_image(checks, stages, package, target, workspace):
    """The stage `target`: exactly the workspace's binary, exec form, numeric non-root user."""
    where = f"Dockerfile, target {target}"
    final = stage_named(stages, target)
    if not checks.check(final is not None, f"Dockerfile has no target {target}"):
        return None
    bin_name = workspace["bins"][package]
    destination = f"/usr/local/bin/{bin_name}"
    final_copies = [copy_parts(v) for v in final.values("COPY")]
    from_build = [c for c in final_copies if "--from=build" in c[0]]
    checks.check(
        len(from_build) == 1 and from_build[0][2] == destination and from_build[0][1][0].endswith(f"/{bin_name}"),
        f"{where}: does not copy {bin_name} from the build stage to {destination}",
    )
    checks.check(
        not any(not c[0] for c in final_copies),
        f"{where}: copies files from the build context",
    )
    entrypoints = final.values("ENTRYPOINT")
    checks.check(
        len(entrypoints) == 1 and entrypoints[0].strip() == f'["{destination}"]',
        f"{where}: ENTRYPOINT is {entrypoints!r}, expected exec form [\"{destination}\"]",
    )
    users = final.values("USER")
    user = users[-1].strip() if users else ""
    match = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    checks.check(
        match is not None and int(match.group(1)) != 0 and (match.group(2) is None or int(match.group(2)) != 0),
        f"{where}: the final USER is {user!r}, expected a numeric non-root uid:gid",
    )
    labels = " ".join(final.values("LABEL"))
    checks.check(
        f'org.opencontainers.image.version="{workspace["version"]}"' in labels,
        f"{where}: the version label does not default to the workspace version {workspace['version']}",
    )
    return final


def main():
    checks = Checks()
    cargo = read_toml("Cargo.toml")
    members = cargo["workspace"]["members"]
    bins = {}
    declared = []
    rust_versions = [version_tuple(cargo["workspace"]["package"]["rust-version"])]
    for member in members:
        manifest = read_toml(f"{member}/Cargo.toml")
        package = manifest["package"]
        rust_version = package.get("rust-version")
        if isinstance(rust_version, str):
            rust_versions.append(version_tuple(rust_version))
        # The images hold the `neverwiped-*` binaries; kubectl-neverwiped runs on the user's
        # machine, not in a pod (it is only copied, as every member must be for cargo).
        for binary in manifest.get("bin", []):
            if binary["name"].startswith("neverwiped-"):
                bins[package["name"]] = binary["name"]
        # .dockerignore keeps tests/ out of the build context: a target declared there would
        # make cargo fail to read the manifest in the image build.
        for section in ("test", "bench", "example"):
            for target in manifest.get(section, []):
                declared.append(f"{member}/Cargo.toml declares a [[{section}]] target ({target.get('name')})")
    script_flags = {}
    for script in ("tests/images/static-build.sh", "scripts/build-images.sh"):
        found = re.search(r'RUSTFLAGS="([^"]*)"', (ROOT / script).read_text())
        checks.check(found is not None, f"{script} sets no RUSTFLAGS")
        script_flags[script] = found.group(1) if found else None
    workspace = {
        "members": members,
        "bins": bins,
        "version": cargo["workspace"]["package"]["version"],
        "rust_version": max(rust_versions),
        "script_rustflags": script_flags,
        "copied": set(),
    }
    for target in declared:
        checks.check(False, f"{target}; check that .dockerignore lets its file into the build context")
    checks.check(
        bins.get("neverwiped-operator") and bins.get("neverwiped-sidecar"),
        f"the workspace's binaries are not neverwiped-operator and neverwiped-sidecar: {bins}",
    )

    stages, _ = check_recipe(checks, workspace)
    sidecar = None
    if stages:
        check_image(checks, stages, "neverwiped-operator", "operator", workspace)
        sidecar = check_image(checks, stages, "neverwiped-sidecar", "sidecar", workspace)

    if sidecar is not None:
        # The binary the operator's Jobs run by name is the one the image puts on its PATH.
        contract = (ROOT / "contract/src/cli.rs").read_text()
        name = re.search(r'SIDECAR_BINARY: &str = "([^"]+)"', contract)
        if checks.check(name is not None, "contract/src/cli.rs: SIDECAR_BINARY not found"):
            checks.check(
                name.group(1) == bins.get("neverwiped-sidecar"),
                f"the operator's Jobs run {name.group(1)!r}, the image holds {bins.get('neverwiped-sidecar')!r}",
            )
        paths = [v for v in sidecar.values("ENV") if v.startswith("PATH=")]
        path = paths[-1][len("PATH=") :].split(":") if paths else []
        checks.check(
            "/usr/local/bin" in path,
            "Dockerfile, target sidecar: the image's PATH does not hold /usr/local/bin, where the binary is",
        )
        # The database clients, and the docs that name them.
        packages = [p for run in sidecar.values("RUN") for p in apt_installs(run)]
        postgres = [p for p in packages if re.fullmatch(r"postgresql-client-\d+", p)]
        checks.check(len(postgres) == 1, f"the sidecar target installs no single postgresql-client-N: {packages}")
        checks.check("mariadb-client" in packages, f"the sidecar target does not install mariadb-client: {packages}")
        if postgres:
            major = postgres[0].rsplit("-", 1)[1]
            checks.check(
                any(p.startswith(f"/usr/lib/postgresql/{major}/bin") for p in path),
                f"the sidecar target: PATH does not start the search at PostgreSQL {major}'s binaries",
            )
        images_doc = ROOT / "docs/images.md"
        if checks.check(images_doc.is_file(), "docs/images.md does not exist"):
            doc = images_doc.read_text()
            for package in packages:
                checks.check(
                    f"`{package}`" in doc,
                    f"docs/images.md does not name the package `{package}` that the sidecar image installs",
                )
            if postgres:
                checks.check(
                    f"pg_dump {major}" in doc,
                    f"docs/images.md does not say which pg_dump (pg_dump {major}) the image has",
                )

    # .dockerignore: an allowlist that lets in what the Dockerfiles copy.
    ignore_path = ROOT / ".dockerignore"
    if checks.check(ignore_path.is_file(), ".dockerignore does not exist"):
        lines = [
            line.strip()
            for line in ignore_path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        checks.check(lines[:1] == ["*"], ".dockerignore does not start by excluding everything (`*`)")
        allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
        for source in sorted(workspace["copied"]):
            checks.check(
                source.split("/")[0] in allowed,
                f".dockerignore keeps {source} out of the build context, but a Dockerfile copies it",
            )
        for excluded in ("target", ".git"):
            checks.check(excluded not in allowed, f".dockerignore lets {excluded} into the build context")

    for failure in checks.failures:
        print(f"FAILED: {failure}")
    print(f"{checks.passed} checks passed, {len(checks.failures)} failed")
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
