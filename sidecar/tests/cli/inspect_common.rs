//! What the tests of the reading commands (`ls`, `snapshots`, `find`, `diff`, `stats`, `dump`)
//! share: a tree with every kind of entry, and restic beside the sidecar on the same tree.

use super::support::fixtures::{is_root, set_mtime, walk, Noise};
use super::text;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tree of files of several sizes and modes, nested folders, a sticky and an empty folder,
/// symlinks, a FIFO, hard links and — as root — foreign owners and a character device, every
/// time fixed (whole seconds apart).
pub fn build_tree(root: &Path) {
    fs::create_dir_all(root.join("docs/notes/old")).unwrap();
    fs::create_dir_all(root.join("photos/2024")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    fs::write(root.join("README.md"), b"read me\n").unwrap();
    fs::write(root.join("docs/a.txt"), b"first file\n").unwrap();
    fs::write(root.join("docs/B.TXT"), b"upper case name\n").unwrap();
    fs::write(root.join("docs/notes/todo.txt"), b"todo\n").unwrap();
    fs::write(root.join("docs/notes/old/todo.txt"), b"old todo\n").unwrap();
    fs::write(root.join("docs/notes/empty.txt"), b"").unwrap();
    let mut noise = Noise::new(34);
    fs::write(root.join("photos/2024/img1.jpg"), noise.bytes(300_000)).unwrap();
    fs::write(root.join("photos/2024/img2.JPG"), noise.bytes(2_500_000)).unwrap();
    fs::write(root.join("photos/index.html"), b"<html></html>\n").unwrap();
    fs::write(root.join("run.sh"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(root.join("private"), b"secret").unwrap();
    fs::set_permissions(root.join("private"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(root.join("sticky")).unwrap();
    fs::set_permissions(root.join("sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::write(root.join("docs/hard"), b"one inode, two names\n").unwrap();
    fs::hard_link(root.join("docs/hard"), root.join("photos/hard")).unwrap();
    std::os::unix::fs::symlink("docs/a.txt", root.join("link")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at all", root.join("docs/dangling")).unwrap();
    nix::unistd::mkfifo(
        &root.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o640),
    )
    .unwrap();
    if is_root() {
        std::os::unix::fs::chown(root.join("private"), Some(1234), Some(5678)).unwrap();
        std::os::unix::fs::lchown(root.join("link"), Some(4321), Some(8765)).unwrap();
        nix::sys::stat::mknod(
            &root.join("null-device"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
    }
    set_times(root);
}

/// Gives every entry below `root` (and `root`) its own fixed time, children before folders.
pub fn set_times(root: &Path) {
    let mut paths = walk(root);
    paths.push(root.to_path_buf());
    for (index, path) in paths.iter().enumerate().rev() {
        set_mtime(path, 1_700_000_000 + index as i64 * 3600, 500_000_000);
    }
}

/// restic 0.19 with its own repository in `work/restic-repo`, times in UTC.
pub struct Restic {
    binary: PathBuf,
    repo: PathBuf,
    password_file: PathBuf,
}

impl Restic {
    /// Initialises a restic repository below `work`.
    pub fn init(binary: PathBuf, work: &Path) -> Restic {
        let password_file = work.join("restic-password");
        fs::write(&password_file, "restic test password\n").unwrap();
        let restic = Restic {
            binary,
            repo: work.join("restic-repo"),
            password_file,
        };
        restic.run(&["init"]);
        cheapen_restic_key(&restic.repo, &restic.password_file);
        restic
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .env_clear()
            .env("TZ", "UTC")
            .env("RESTIC_REPOSITORY", &self.repo)
            .env("RESTIC_PASSWORD_FILE", &self.password_file)
            .env("RESTIC_CACHE_DIR", self.repo.with_extension("cache"));
        command
    }

    /// Runs restic, which must succeed; returns its standard output.
    pub fn run(&self, args: &[&str]) -> String {
        let output = self.command().args(args).output().expect("run restic");
        assert!(
            output.status.success(),
            "restic {args:?}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).expect("restic prints UTF-8 here")
    }

    /// Backs up `source` (an absolute path) with the extra arguments given.
    pub fn backup(&self, source: &Path, extra: &[&str]) {
        let mut args = vec!["backup", "--quiet", text(source)];
        args.extend(extra);
        self.run(&args);
    }
}

/// Wraps the master key of a restic repository anew (`keys/`: its only key object) under scrypt
/// with N = 1024, r = 1, p = 1, in restic's key format (AES-256-CTR, Poly1305-AES). restic `init`
/// calibrates its scrypt to take half a second, which every later command pays again; the tests
/// run restic up to a hundred times on one repository. The master key, and so every stored byte,
/// is unchanged; restic only reads the parameters from the key object.
const CHEAP_KEY: &str = r#"
import base64, hashlib, json, os, sys
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.poly1305 import Poly1305
repo, password = sys.argv[1], open(sys.argv[2], "rb").read().strip()
def derive(salt, n, r, p):
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=2**31 - 1, dklen=64)
def mac(user, iv, data):
    aes = Cipher(algorithms.AES(user[32:48]), modes.ECB()).encryptor()
    return Poly1305.generate_tag(user[48:64] + aes.update(iv) + aes.finalize(), data)
def ctr(key, iv, data):
    aes = Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor()
    return aes.update(data) + aes.finalize()
keys = os.path.join(repo, "keys")
(name,) = os.listdir(keys)
key = json.load(open(os.path.join(keys, name)))
user = derive(base64.b64decode(key["salt"]), key["N"], key["r"], key["p"])
sealed = base64.b64decode(key["data"])
iv, data, tag = sealed[:16], sealed[16:-16], sealed[-16:]
assert mac(user, iv, data) == tag, "the password does not open the key"
master = ctr(user[:32], iv, data)
salt, iv = os.urandom(64), os.urandom(16)
key.update(N=1024, r=1, p=1, salt=base64.b64encode(salt).decode())
user = derive(salt, 1024, 1, 1)
data = ctr(user[:32], iv, master)
key["data"] = base64.b64encode(iv + data + mac(user, iv, data)).decode()
body = json.dumps(key).encode()
with open(os.path.join(keys, hashlib.sha256(body).hexdigest()), "wb") as new:
    new.write(body)
os.remove(os.path.join(keys, name))
"#;

/// Gives the restic repository at `repo` a key that is cheap to derive (see [`CHEAP_KEY`]);
/// `password_file` holds its password.
pub fn cheapen_restic_key(repo: &Path, password_file: &Path) {
    let output = Command::new("python3")
        .args(["-c", CHEAP_KEY])
        .arg(repo)
        .arg(password_file)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "rewrapping restic's key (needs Python's cryptography module): {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
