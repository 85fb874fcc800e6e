//! What a workload plants in its own snapshot must not reach the admin's machine or terminal:
//! `download` as root makes no device file or FIFO, keeps no set-user-ID, set-group-ID or sticky
//! bit and no owner unless asked to, and `ls` escapes control characters in names.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::support::{Persona, RestServer, TestNamespace};
use super::{back_up, failed, plan_object, plugin, succeeded, PASSWORD};

/// What a root container can write on its volume: a world-writable block device for the first
/// disk, a set-user-ID shell, a set-group-ID folder, a sticky folder, a FIFO, files owned by
/// someone else, and names that carry terminal escape sequences.
fn planted_tree(root: &Path) {
    let data = root.join("planted");
    std::fs::create_dir_all(data.join("shared")).unwrap();
    std::fs::create_dir_all(data.join("group")).unwrap();
    let disk = data.join("disk");
    nix::sys::stat::mknod(
        &disk,
        nix::sys::stat::SFlag::S_IFBLK,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(8, 0),
    )
    .unwrap();
    std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(0o666)).unwrap();
    nix::unistd::mkfifo(
        &data.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let shell = data.join("shell");
    std::fs::write(&shell, b"#!/bin/sh\nexec /bin/sh -p\n").unwrap();
    let owner = Some(nix::unistd::Uid::from_raw(4321));
    let group = Some(nix::unistd::Gid::from_raw(4321));
    nix::unistd::chown(&shell, owner, group).unwrap();
    std::fs::set_permissions(&shell, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(data.join("group"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    std::fs::set_permissions(data.join("shared"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // OSC 52 writes the reader's clipboard; the newline would start a forged line of `ls`.
    let clipboard = std::ffi::OsStr::from_bytes(b"\x1b]52;c;cm0gLXJmIH4K\x07note\nforged\xff");
    std::fs::write(data.join(clipboard), b"hi").unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_download_as_root_plants_no_device_set_user_id_file_or_foreign_owner() {
    if !super::support::api_server_or_skip() {
        return;
    }
    let Some(server) = RestServer::start() else {
        return;
    };
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test plants device files: run it as root"
    );
    super::support::apply_crds();
    let namespace = TestNamespace::create("plugin-planted");
    let ns = namespace.name.as_str();
    let Some(kubeconfig) = Persona::Download.kubeconfig(&namespace) else {
        return;
    };
    server.create_plan_secrets(&namespace, PASSWORD);
    let url = server.url("planted");
    namespace.create_object(&plan_object("nightly", &url));
    let source = tempfile::tempdir().unwrap();
    planted_tree(source.path());
    let data = source.path().join("planted");
    let host = format!("{ns}/nightly");
    back_up(
        &format!("rest:{url}"),
        &server,
        &host,
        std::slice::from_ref(&data),
    )
    .await;
    let data_path = data.to_str().unwrap();

    // By default: contents, plain modes, the downloader's own owner; each skip said.
    let target = tempfile::tempdir().unwrap();
    let to = target.path().join("safe");
    let output = plugin(
        &kubeconfig,
        ns,
        &[
            "download",
            "nightly",
            "latest",
            data_path,
            "--to",
            to.to_str().unwrap(),
        ],
    );
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    succeeded(output);
    let down = to.join(data.strip_prefix("/").unwrap());
    assert!(
        std::fs::symlink_metadata(down.join("disk")).is_err(),
        "{said}"
    );
    assert!(
        std::fs::symlink_metadata(down.join("pipe")).is_err(),
        "{said}"
    );
    assert!(said.contains("skipped the block device"), "{said}");
    assert!(said.contains("skipped the FIFO"), "{said}");
    let shell = std::fs::metadata(down.join("shell")).unwrap();
    assert_eq!(shell.mode() & 0o7777, 0o755);
    assert_eq!((shell.uid(), shell.gid()), (0, 0));
    assert_eq!(
        std::fs::read(down.join("shell")).unwrap(),
        std::fs::read(data.join("shell")).unwrap()
    );
    let group = std::fs::metadata(down.join("group")).unwrap();
    assert_eq!(group.mode() & 0o7777, 0o775);
    let shared = std::fs::metadata(down.join("shared")).unwrap();
    assert_eq!(shared.mode() & 0o7777, 0o777);
    assert!(said.contains("set-user-ID"), "{said}");
    assert!(!said.as_bytes().contains(&0x1b), "{said:?}");

    // Asked for: as backed up, as a restore of a system does it.
    let exact = target.path().join("exact");
    succeeded(plugin(
        &kubeconfig,
        ns,
        &[
            "download",
            "nightly",
            "latest",
            data_path,
            "--to",
            exact.to_str().unwrap(),
            "--keep-owners-and-special-files",
        ],
    ));
    let down = exact.join(data.strip_prefix("/").unwrap());
    let disk = std::fs::symlink_metadata(down.join("disk")).unwrap();
    assert_eq!(disk.rdev(), nix::sys::stat::makedev(8, 0));
    assert_eq!(disk.mode() & 0o7777, 0o666);
    let shell = std::fs::metadata(down.join("shell")).unwrap();
    assert_eq!(shell.mode() & 0o7777, 0o4755);
    assert_eq!((shell.uid(), shell.gid()), (4321, 4321));
    assert_eq!(
        std::fs::metadata(down.join("shared")).unwrap().mode() & 0o7777,
        0o1777
    );

    // ls: one line per entry, the name's control characters and invalid bytes escaped.
    let listed = succeeded(plugin(
        &kubeconfig,
        ns,
        &["ls", "nightly", "latest", data_path],
    ));
    assert!(
        !listed.iter().any(|&b| b == 0x1b || b == 0x07),
        "{}",
        String::from_utf8_lossy(&listed)
    );
    let listed = String::from_utf8(listed).unwrap();
    assert!(
        listed.contains(r"planted/\x1b]52;c;cm0gLXJmIH4K\x07note\nforged\xff"),
        "{listed}"
    );
    assert_eq!(listed.lines().count(), 7, "{listed}");

    // The names of missing files are escaped in errors too.
    let missing = failed(plugin(
        &kubeconfig,
        ns,
        &["cat", "nightly", "latest", "/nowhere/\x1b[2J"],
    ));
    assert!(!missing.contains('\x1b'), "{missing}");
}
