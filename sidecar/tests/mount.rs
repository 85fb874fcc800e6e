//! `mount` through the kernel's FUSE (`/dev/fuse`): every file of a mounted snapshot is identical
//! to the source (SHA-256, mode, owner, mtime, symlink targets, hard links), read directly and
//! after a plain `cp -a`; the layout is restic's; the CLI unmounts on SIGTERM, SIGINT or an
//! outside `umount` and leaves no mount behind. Where `/dev/fuse` is missing the tests fail under
//! CI and skip loudly elsewhere (`neverwiped_testkit::missing`).

mod support;
use support::fixtures;

#[path = "mount/keeps_its_word.rs"]
mod keeps_its_word;

use neverwiped::archive::{backup, BackupOptions, Source};
use neverwiped::backend::local::LocalBackend;
use neverwiped::mount::{self, MountOptions};
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::fixtures::{
    assert_same_tree, build_fidelity_tree, init_repository, is_root, PASSWORD,
};
use support::sidecar::bare_command;
use support::RestServer;

/// Whether this machine can mount FUSE file systems; says why not.
fn fuse_or_skip(test: &str) -> bool {
    match fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => true,
        Err(error) => {
            neverwiped_testkit::missing(
                format_args!("/dev/fuse cannot be opened ({error}) for {test}"),
                "FUSE is needed: load the fuse module (modprobe fuse) or give the container /dev/fuse",
            );
            false
        }
    }
}

/// Whether `path` is a mount point now, from the kernel's own table.
fn is_mounted(path: &Path) -> bool {
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = path.to_str().unwrap();
    table
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted))
}

/// The source plus many folders, to list more than one page of a directory.
fn build_source(root: &Path) {
    build_fidelity_tree(root);
    for folder in 0..150 {
        let dir = root.join(format!("many/folder-{folder:03}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a.txt"), format!("file a of folder {folder}\n")).unwrap();
        fs::write(dir.join("b.json"), format!("{{\"folder\": {folder}}}\n")).unwrap();
    }
}

/// The entries of a folder, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Where the source lies in a snapshot folder: below it by its absolute path.
fn inside(snapshot_dir: &Path, source: &Path) -> PathBuf {
    snapshot_dir.join(source.strip_prefix("/").unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_snapshot_is_the_source_byte_for_byte_in_restics_layout() {
    if !fuse_or_skip("a_mounted_snapshot_is_the_source_byte_for_byte_in_restics_layout") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_source(&source);
    let repo = init_repository(Arc::new(LocalBackend::new(work.path().join("repo")))).await;
    let mut options = BackupOptions::new(vec![Source::Path(source.clone())]);
    options.hostname = "shop/db".into();
    options.tags = vec!["plan=db".into()];
    let first = backup(&repo, options).await.unwrap();
    // The second snapshot differs from the first in one file.
    let before = fs::read(source.join("small.txt")).unwrap();
    let mtime = fs::metadata(source.join("small.txt"))
        .unwrap()
        .modified()
        .unwrap();
    fs::write(
        source.join("small.txt"),
        b"changed after the first snapshot\n",
    )
    .unwrap();
    fs::File::options()
        .write(true)
        .open(source.join("small.txt"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let mut options = BackupOptions::new(vec![Source::Path(source.clone())]);
    options.hostname = "shop/db".into();
    options.tags = vec!["plan=db".into()];
    options.parent = neverwiped::archive::ParentChoice::None;
    let second = backup(&repo, options).await.unwrap();

    let mountpoint = work.path().join("mnt");
    fs::create_dir(&mountpoint).unwrap();
    let cache_bytes = 8 * 1024 * 1024;
    let handle = mount::serve(
        repo.clone(),
        &mountpoint,
        MountOptions {
            cache_bytes,
            ..MountOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(is_mounted(&mountpoint));
    assert_eq!(names(&mountpoint), ["hosts", "ids", "snapshots", "tags"]);

    // restic's layout: a folder per time, `latest` the newest, by host, tag and short id.
    let times = names(&mountpoint.join("snapshots"));
    assert_eq!(times.len(), 3, "{times:?}");
    assert_eq!(times[2], "latest");
    let latest = fs::read_link(mountpoint.join("snapshots/latest")).unwrap();
    assert_eq!(
        latest,
        Path::new(&times[1]),
        "latest is the newer of the two"
    );
    for folder in ["hosts/shop/db", "tags/plan=db"] {
        assert_eq!(names(&mountpoint.join(folder)), times, "{folder}");
    }
    let first_id = first.snapshot_id.short();
    let second_id = second.snapshot_id.short();
    let mut ids = vec![first_id.clone(), second_id.clone()];
    ids.sort();
    assert_eq!(names(&mountpoint.join("ids")), ids);

    // Every file, read through the kernel, is the source's: content and metadata.
    let latest_source = inside(&mountpoint.join("snapshots/latest"), &source);
    assert_same_tree(&source, &latest_source, is_root());
    assert_same_tree(
        &source,
        &inside(&mountpoint.join("ids").join(&second_id), &source),
        is_root(),
    );
    // The older snapshot holds the older content.
    let older = inside(&mountpoint.join("ids").join(&first_id), &source);
    assert_eq!(fs::read(older.join("small.txt")).unwrap(), before);
    let older_by_time = inside(&mountpoint.join("hosts/shop/db").join(&times[0]), &source);
    assert_eq!(fs::read(older_by_time.join("small.txt")).unwrap(), before);

    // A plain `cp -a` of the mounted snapshot gives back the source.
    let copy = work.path().join("copy");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&latest_source)
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        copied.status.success(),
        "cp -a failed: {}",
        String::from_utf8_lossy(&copied.stderr)
    );
    assert_same_tree(&source, &copy, is_root());

    // Read-only: nothing can be written, created or removed.
    let write = fs::OpenOptions::new()
        .write(true)
        .open(latest_source.join("small.txt"));
    assert_eq!(write.unwrap_err().raw_os_error(), Some(libc::EROFS));
    let create = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(latest_source.join("new-file"));
    assert_eq!(create.unwrap_err().raw_os_error(), Some(libc::EROFS));
    assert!(fs::remove_file(latest_source.join("small.txt")).is_err());

    // Content that is gone from the repository is an I/O error for its file, not other bytes.
    // The file (9 MiB) is larger than the cache and this snapshot's copy was never read.
    for pack in fixtures::walk(&work.path().join("repo/data")) {
        if pack.is_file() {
            fs::remove_file(pack).unwrap();
        }
    }
    let lost = fs::read(older.join("dir/large.bin"));
    assert_eq!(lost.unwrap_err().raw_os_error(), Some(libc::EIO));

    handle.unmount().await.unwrap();
    assert!(!is_mounted(&mountpoint), "the mount is gone");
    assert!(
        names(&mountpoint).is_empty(),
        "the mount point is empty again"
    );
}

/// The sidecar's `mount`, from the usual repository settings and password file.
fn start_cli_mount(
    repo: &str,
    password_file: &Path,
    gate: &[(&str, String)],
    mountpoint: &Path,
) -> Child {
    let mut command = bare_command();
    command
        .arg("--repo")
        .arg(repo)
        .arg("mount")
        .arg(mountpoint)
        .env("NEVERWIPED_PASSWORD_FILE", password_file)
        .env("NEVERWIPED_LOG_FORMAT", "text")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in gate {
        command.env(name, value);
    }
    command.spawn().expect("start neverwiped-sidecar mount")
}

/// Waits until the mount shows its snapshots; panics with the sidecar's output after a minute.
fn wait_for_mount(child: &mut Child, mountpoint: &Path) {
    let started = Instant::now();
    while !mountpoint.join("snapshots/latest").exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let output = std::mem::replace(child, Command::new("true").spawn().unwrap());
            let output = output.wait_with_output().unwrap();
            panic!(
                "mount exited with {status}: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no mount after a minute"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for the sidecar to end (at most a minute); its exit code and standard error.
fn wait_for_exit(child: Child) -> (Option<i32>, String) {
    let started = Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("mount did not end within a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn run_ok(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_cli_mount_serves_the_gates_repository_and_unmounts_on_sigterm_sigint_sighup_and_umount() {
    if !fuse_or_skip(
        "the_cli_mount_serves_the_gates_repository_and_unmounts_on_sigterm_sigint_and_umount",
    ) {
        return;
    }
    let Some(server) = RestServer::start_with_login("cli_mount") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("source");
    build_source(&source);
    let password_file = work.path().join("password");
    fs::write(&password_file, PASSWORD).unwrap();
    let gate_password = work.path().join("gate-password");
    fs::write(&gate_password, server.password().unwrap()).unwrap();
    let gate = [
        (
            "NEVERWIPED_GATE_USERNAME",
            server.username().unwrap().to_owned(),
        ),
        (
            "NEVERWIPED_GATE_PASSWORD_FILE",
            gate_password.to_str().unwrap().to_owned(),
        ),
    ];
    let repo = format!("rest:{}", server.repo_url("mounted"));
    let sidecar = |args: &[&str]| {
        let mut command = bare_command();
        command
            .arg("--repo")
            .arg(&repo)
            .args(args)
            .env("NEVERWIPED_PASSWORD_FILE", &password_file);
        for (name, value) in &gate {
            command.env(name, value);
        }
        command
    };
    run_ok(&mut sidecar(&["init"]));
    run_ok(&mut sidecar(&[
        "backup",
        "--host",
        "shop/db",
        source.to_str().unwrap(),
    ]));

    let mountpoint = work.path().join("mnt");
    fs::create_dir(&mountpoint).unwrap();
    for (stop, exit_code) in [
        ("SIGTERM", 143),
        ("SIGINT", 130),
        ("SIGHUP", 129),
        ("umount", 0),
    ] {
        let mut child = start_cli_mount(&repo, &password_file, &gate, &mountpoint);
        wait_for_mount(&mut child, &mountpoint);
        assert!(is_mounted(&mountpoint));
        let latest = inside(&mountpoint.join("hosts/shop/db/latest"), &source);
        assert_same_tree(&source, &latest, is_root());
        match stop {
            "umount" => run_ok(Command::new("umount").arg(&mountpoint)),
            signal => run_ok(
                Command::new("kill")
                    .arg(format!("-{}", &signal[3..]))
                    .arg(child.id().to_string()),
            ),
        }
        let (code, stderr) = wait_for_exit(child);
        assert_eq!(
            code,
            Some(exit_code),
            "mount stopped by {stop} exits {exit_code}:\n{stderr}"
        );
        // A clean end says nothing is wrong: no error line, no failed unmount.
        assert!(
            !stderr.contains("ERROR") && !stderr.contains("Unmount failed"),
            "{stop} logs no error:\n{stderr}"
        );
        assert!(
            !is_mounted(&mountpoint),
            "{stop} leaves no mount behind:\n{stderr}"
        );
        assert!(
            names(&mountpoint).is_empty(),
            "{stop}: the mount point is empty again"
        );
        assert!(
            !stderr.contains(server.password().unwrap()),
            "no secret in the output"
        );
    }
    // A mount in use (a process works inside it) cannot be unmounted: SIGTERM detaches it, so
    // that it is gone from the mount table at once, and the command still ends.
    let mut child = start_cli_mount(&repo, &password_file, &gate, &mountpoint);
    wait_for_mount(&mut child, &mountpoint);
    let mut inside_it = Command::new("sleep")
        .arg("60")
        .current_dir(mountpoint.join("snapshots/latest"))
        .spawn()
        .unwrap();
    run_ok(
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string()),
    );
    let (code, stderr) = wait_for_exit(child);
    inside_it.kill().unwrap();
    inside_it.wait().unwrap();
    assert_eq!(
        code,
        Some(143),
        "a busy mount stopped by SIGTERM exits 143:\n{stderr}"
    );
    assert!(
        !is_mounted(&mountpoint),
        "the busy mount was detached:\n{stderr}"
    );
    assert!(stderr.contains("is in use: detaching it"), "{stderr}");

    // The lock of the mount is gone with it: an exclusive operation can run.
    run_ok(&mut sidecar(&["prune"]));
}

#[test]
fn mount_help_names_the_layout_and_its_own_options_before_the_global_ones() {
    let mut command = bare_command();
    command.args(["mount", "--help"]);
    let help = support::sidecar::run(command).expect_ok().stdout;
    for wanted in [
        "snapshots/TIME/",
        "hosts/HOST/TIME/",
        "--host",
        "--tag",
        "--cache",
        "--allow-other",
        "--allow-non-empty",
    ] {
        assert!(
            help.contains(wanted),
            "mount --help lacks {wanted:?}:\n{help}"
        );
    }
    let own = help.find("\nOptions:").expect("own options");
    let global = help.find("\nGlobal options:").expect("global options");
    assert!(own < global, "its own options come first:\n{help}");
    // No mount point: a usage error (exit 1, as every failed run), before anything is opened.
    let mut command = bare_command();
    command.args(["--repo", "/nonexistent", "mount"]);
    let run = support::sidecar::run(command);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("<MOUNTPOINT>"), "{run:?}");
}
