//! restic's rest-server on a loopback port over a folder, and the gate pair the never-wiped tests
//! need: an `--append-only` server with the tenant's login and a full one with the admin's, on
//! one data folder, behind one [`GateFront`] URL.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, program, GateFront};

/// How long rest-server may take to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// A Basic-auth login: user name and password.
#[derive(Clone, Copy, Debug)]
pub struct Login<'a> {
    pub username: &'a str,
    pub password: &'a str,
}

/// A running rest-server; stopped (killed) when dropped. It can be stopped and started again on
/// the same address and folder, as a gate that goes down for a while and comes back.
pub struct RestServer {
    /// `None` while stopped.
    child: Option<Child>,
    address: SocketAddr,
    /// The program and its arguments, to start it again as it was.
    command: Vec<std::ffi::OsString>,
}

impl RestServer {
    /// Serves `data`, with `login` checked against an htpasswd file of its own (beside `data`,
    /// so that two servers on one folder each know only their login), or `--no-auth` without.
    /// Panics when rest-server is not installed: callers check the programs they need first.
    pub fn start(data: &Path, login: Option<Login>, append_only: bool) -> RestServer {
        let binary = program("rest-server").expect("rest-server on PATH or among the peers");
        std::fs::create_dir_all(data).expect("the data folder");
        let address = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut command = vec![binary.into_os_string(), "--path".into(), data.into()];
        command.extend(["--listen".into(), address.to_string().into()]);
        match login {
            Some(login) => {
                let file = htpasswd_file(data, login);
                command.extend(["--htpasswd-file".into(), file.into_os_string()]);
            }
            None => command.push("--no-auth".into()),
        }
        if append_only {
            command.push("--append-only".into());
        }
        let mut server = RestServer {
            child: None,
            address,
            command,
        };
        server.start_again();
        server
    }

    /// Kills the server: its address refuses connections until [`RestServer::start_again`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped server again, on its address and folder, and waits until it listens.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "rest-server runs already");
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rest-server starts");
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(self.address).is_err() {
            assert!(
                started.elapsed() < LISTEN_TIMEOUT,
                "rest-server listens on {}",
                self.address
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://127.0.0.1:PORT/REPOSITORY`.
    pub fn url(&self, repository: &str) -> String {
        format!("http://{}/{repository}", self.address)
    }
}

impl Drop for RestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `<data>.<user>.htpasswd` with a bcrypt hash of the password (low cost: rest-server checks it
/// on every request).
fn htpasswd_file(data: &Path, login: Login) -> PathBuf {
    let mut name = data.file_name().expect("a named folder").to_owned();
    name.push(format!(".{}.htpasswd", login.username));
    let file = data.with_file_name(name);
    let hash = bcrypt::hash(login.password, 4).expect("bcrypt a test password");
    std::fs::write(&file, format!("{}:{hash}\n", login.username)).expect("the htpasswd file");
    file
}

/// The gate as it is run for tenants who must not delete history: the tenant's login to an
/// append-only rest-server, the admin's to a full one on the same folder, one URL for both.
pub struct GatePair {
    pub tenant: RestServer,
    pub admin: RestServer,
    pub front: GateFront,
}

impl GatePair {
    pub fn start(data: &Path, tenant: Login, admin: Login) -> GatePair {
        let tenant_server = RestServer::start(data, Some(tenant), true);
        let admin_server = RestServer::start(data, Some(admin), false);
        let front = GateFront::start([
            (tenant.username, tenant_server.address()),
            (admin.username, admin_server.address()),
        ]);
        GatePair {
            tenant: tenant_server,
            admin: admin_server,
            front,
        }
    }

    /// The repository's URL at the front: `http://127.0.0.1:PORT/REPOSITORY/`.
    pub fn url(&self, repository: &str) -> String {
        format!("{}{repository}/", self.front.base_url())
    }
}
