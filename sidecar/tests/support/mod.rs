//! Real restic REST servers for integration tests: rest-server (the reference) and
//! `rclone serve restic`, each started on a free loopback port in its own temporary folder and
//! killed when dropped.
//!
//! When a server's binary is missing, `start` records a skip and returns `None` so that the test
//! can return early — except where every test must run (`CI` set, or `NEVERWIPED_REQUIRE_ALL=1`),
//! where a missing binary is a broken machine and fails the test with what to install
//! (`neverwiped_testkit::missing`).

// Each test file uses part of this module; the rest would warn as dead code.
#![allow(dead_code)]

pub mod fault_proxy;
pub mod fixtures;
pub mod hooked_backend;
pub mod sidecar;

use neverwiped::backend::rest::RestConfig;
use neverwiped_testkit::GateFront;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use url::Url;

/// The user name of servers started with authentication.
pub const TEST_USERNAME: &str = "neverwiped-test";

/// The repository path that `url()` names on every server.
pub const TEST_REPO: &str = "repo";

/// How long a server may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How many free ports to try when another process takes the chosen one first.
const PORT_TRIES: usize = 3;

/// A CA and a server certificate it signed, valid for `127.0.0.1` and `localhost`.
#[derive(Clone)]
pub struct TestCertificate {
    /// The CA certificate that clients must trust.
    pub ca_pem: String,
    /// The server's certificate.
    pub cert_pem: String,
    /// The server certificate's private key.
    pub key_pem: String,
}

impl TestCertificate {
    /// A fresh CA and a server certificate for the loopback addresses.
    pub fn for_loopback() -> TestCertificate {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "neverwiped test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");

        let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        let mut server_params = CertificateParams::new(names).expect("server parameters");
        server_params
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        let server_key = KeyPair::generate().expect("server key");
        let server_cert = server_params
            .signed_by(&server_key, &ca_cert, &ca_key)
            .expect("server certificate");

        TestCertificate {
            ca_pem: ca_cert.pem(),
            cert_pem: server_cert.pem(),
            key_pem: server_key.serialize_pem(),
        }
    }
}

/// How to run a rest-server.
#[derive(Clone, Default)]
pub struct RestServerOptions {
    /// Require HTTP basic auth (`TEST_USERNAME` and a random password) from an htpasswd file.
    pub auth: bool,
    /// `--append-only`: no deletes but of locks, no overwrites.
    pub append_only: bool,
    /// The login's user name, when not `TEST_USERNAME`.
    pub username: Option<&'static str>,
    /// Serve HTTPS with this certificate.
    pub tls: Option<TestCertificate>,
}

/// The user name of the tenant's (backups') login on a [`GatePair`].
pub const TENANT_USERNAME: &str = "tenant";
/// The user name of the admin's (maintenance) login on a [`GatePair`].
pub const ADMIN_USERNAME: &str = "admin";

/// Two rest-servers on one data folder behind one URL, as a gate is run for tenants who must not
/// delete history: `tenant` append-only with the backups' login, `admin` full with the
/// maintenance login (each its own htpasswd file, user name and password), and `front`, which
/// sends each login to its server as the gate does.
pub struct GatePair {
    pub tenant: RestServer,
    pub admin: RestServer,
    pub front: GateFront,
}

impl GatePair {
    pub fn start(test: &str) -> Option<GatePair> {
        let tenant = RestServer::start(
            test,
            RestServerOptions {
                auth: true,
                append_only: true,
                username: Some(TENANT_USERNAME),
                ..Default::default()
            },
        )?;
        let admin = RestServer::start_on(
            test,
            RestServerOptions {
                auth: true,
                username: Some(ADMIN_USERNAME),
                ..Default::default()
            },
            Some(tenant.data_dir()),
        )?;
        let front = GateFront::start([
            (TENANT_USERNAME, tenant.address()),
            (ADMIN_USERNAME, admin.address()),
        ]);
        Some(GatePair {
            tenant,
            admin,
            front,
        })
    }

    /// The repository's URL at the front, the one URL both logins use.
    pub fn url(&self) -> Url {
        Url::parse(&self.front.base_url())
            .and_then(|base| base.join(&format!("{TEST_REPO}/")))
            .expect("the front's repository URL")
    }

    /// A client configuration for [`GatePair::url`] with `server`'s login.
    pub fn rest_config(&self, server: &RestServer) -> RestConfig {
        let mut config = server.rest_config();
        config.url = self.url();
        config
    }

    /// The one data folder both serve.
    pub fn data_dir(&self) -> PathBuf {
        self.tenant.data_dir()
    }
}

/// How to run `rclone serve restic`.
#[derive(Clone, Copy, Default)]
pub struct RcloneServerOptions {
    /// Require HTTP basic auth (`--user` / `--pass`).
    pub auth: bool,
    /// `--append-only`: no deletes, no overwrites.
    pub append_only: bool,
}

/// A running rest-server; everything it offers is on [`TestServer`].
pub struct RestServer(TestServer);

impl RestServer {
    /// [`RestServer::start`] with a login (`auth`), the way the gate runs.
    pub fn start_with_login(test: &str) -> Option<RestServer> {
        let options = RestServerOptions {
            auth: true,
            ..Default::default()
        };
        RestServer::start(test, options)
    }

    /// Starts a rest-server serving a fresh temporary folder, or returns `None` (after printing
    /// why) when rest-server is not installed and this is not CI.
    pub fn start(test: &str, options: RestServerOptions) -> Option<RestServer> {
        RestServer::start_on(test, options, None)
    }

    /// [`RestServer::start`] serving `data` (another server's [`TestServer::data_dir`]) instead
    /// of a fresh folder.
    pub fn start_on(
        test: &str,
        options: RestServerOptions,
        data: Option<PathBuf>,
    ) -> Option<RestServer> {
        let binary = find_binary(
            test,
            "rest-server",
            "NEVERWIPED_REST_SERVER_BIN",
            Some("/opt/neverwiped-peers/bin/rest-server"),
            "set NEVERWIPED_REST_SERVER_BIN or run ../shared/tools/install-peers.sh",
        )?;
        let password = options.auth.then(random_password);
        let username = options.username.unwrap_or(TEST_USERNAME);
        let process =
            ServerProcess::start("rest-server", password, options.tls.clone(), |dir, port| {
                let mut command = Command::new(&binary);
                command
                    .arg("--path")
                    .arg(data.clone().unwrap_or_else(|| dir.data()))
                    .arg("--listen")
                    .arg(format!("127.0.0.1:{port}"));
                match &dir.password {
                    Some(password) => {
                        let htpasswd = dir.file("htpasswd");
                        write_htpasswd(&htpasswd, username, password);
                        command.arg("--htpasswd-file").arg(htpasswd);
                    }
                    None => {
                        command.arg("--no-auth");
                    }
                }
                if options.append_only {
                    command.arg("--append-only");
                }
                if let Some((cert, key)) = dir.write_tls_files() {
                    command
                        .arg("--tls")
                        .arg("--tls-cert")
                        .arg(cert)
                        .arg("--tls-key")
                        .arg(key);
                }
                command
            });
        Some(RestServer(TestServer { process, username }))
    }
}

/// A running `rclone serve restic`; everything it offers is on [`TestServer`].
pub struct RcloneServer(TestServer);

impl RcloneServer {
    /// Starts `rclone serve restic` on a fresh temporary folder, or returns `None` (after printing
    /// why) when rclone is not installed and this is not CI.
    pub fn start(test: &str, options: RcloneServerOptions) -> Option<RcloneServer> {
        let binary = find_binary(
            test,
            "rclone",
            "NEVERWIPED_RCLONE_BIN",
            None,
            "set NEVERWIPED_RCLONE_BIN or run `apt-get install rclone`",
        )?;
        let password = options.auth.then(random_password);
        let process = ServerProcess::start("rclone", password, None, |dir, port| {
            let mut command = Command::new(&binary);
            command
                .arg("serve")
                .arg("restic")
                .arg(dir.data())
                .arg("--addr")
                .arg(format!("127.0.0.1:{port}"))
                // A configuration file of its own, so that the user's rclone.conf plays no part.
                .env("RCLONE_CONFIG", dir.file("rclone.conf"));
            if let Some(password) = &dir.password {
                command
                    .arg("--user")
                    .arg(TEST_USERNAME)
                    .arg("--pass")
                    .arg(password);
            }
            if options.append_only {
                command.arg("--append-only");
            }
            command
        });
        Some(RcloneServer(TestServer {
            process,
            username: TEST_USERNAME,
        }))
    }
}

/// A restic REST server running on loopback, stopped (and its folder removed) on drop.
pub struct TestServer {
    process: ServerProcess,
    username: &'static str,
}

impl TestServer {
    /// The URL of the repository `repo/` on this server.
    pub fn url(&self) -> Url {
        self.repo_url(TEST_REPO)
    }

    /// The URL of another repository on this server.
    pub fn repo_url(&self, repo: &str) -> Url {
        self.process.repo_url(repo)
    }

    /// The user name the server requires, if it requires one.
    pub fn username(&self) -> Option<&str> {
        self.process.dir.password.as_ref().map(|_| self.username)
    }

    /// The password the server requires, if it requires one.
    pub fn password(&self) -> Option<&str> {
        self.process.dir.password.as_deref()
    }

    /// The folder the server stores repositories in (`repo/` is below it).
    pub fn data_dir(&self) -> PathBuf {
        self.process.dir.data()
    }

    /// The CA certificate (PEM) that a client needs to trust an HTTPS server.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.process
            .dir
            .tls
            .as_ref()
            .map(|tls| tls.ca_pem.as_bytes())
    }

    /// The address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.process.address()
    }

    /// A client configuration for `url()` with the right credentials and CA.
    pub fn rest_config(&self) -> RestConfig {
        let mut config = RestConfig::new(self.url());
        config.username = self.username().map(str::to_owned);
        config.password = self.password().map(str::to_owned);
        config.ca_certificate_pem = self.ca_pem().map(<[u8]>::to_vec);
        config
    }

    /// What the server printed so far (for assertions about its behaviour).
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl std::ops::Deref for RestServer {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl std::ops::Deref for RcloneServer {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

/// A server's temporary folder: `data/` served, plus its htpasswd, certificates and log.
struct ServerDir {
    root: TempDir,
    password: Option<String>,
    tls: Option<TestCertificate>,
}

impl ServerDir {
    /// A new temporary folder with an empty `data/`.
    fn create(name: &str, password: Option<String>, tls: Option<TestCertificate>) -> ServerDir {
        let root = tempfile::Builder::new()
            .prefix(&format!("neverwiped-{name}-"))
            .tempdir()
            .expect("create a temporary folder for the server");
        let dir = ServerDir {
            root,
            password,
            tls,
        };
        fs::create_dir_all(dir.data()).expect("create the server's data folder");
        dir
    }

    fn file(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    fn data(&self) -> PathBuf {
        self.file("data")
    }

    fn log_path(&self) -> PathBuf {
        self.file("server.log")
    }

    /// Writes the certificate and key for the server; returns their paths.
    fn write_tls_files(&self) -> Option<(PathBuf, PathBuf)> {
        let tls = self.tls.as_ref()?;
        let cert = self.file("cert.pem");
        let key = self.file("key.pem");
        fs::write(&cert, &tls.cert_pem).expect("write the test certificate");
        fs::write(&key, &tls.key_pem).expect("write the test key");
        Some((cert, key))
    }
}

/// A server process, killed (and its folder removed) on drop.
struct ServerProcess {
    name: &'static str,
    child: Child,
    port: u16,
    dir: ServerDir,
}

impl ServerProcess {
    /// Picks a free port, runs the command that `build` makes for it and waits until the port
    /// answers. Another process may grab the port between our probe and the server's bind: then
    /// the server exits at once, and another port (in a fresh folder) is tried.
    fn start(
        name: &'static str,
        password: Option<String>,
        tls: Option<TestCertificate>,
        build: impl Fn(&ServerDir, u16) -> Command,
    ) -> ServerProcess {
        let mut last_log = String::new();
        for _ in 0..PORT_TRIES {
            let dir = ServerDir::create(name, password.clone(), tls.clone());
            let port = free_loopback_port();
            let log = fs::File::create(dir.log_path()).expect("create the server log");
            let child = build(&dir, port)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("clone the log handle"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
            let mut process = ServerProcess {
                name,
                child,
                port,
                dir,
            };
            match process.wait_until_listening() {
                Ok(()) => return process,
                Err(log) => last_log = log,
            }
        }
        panic!("{name} exited before listening, {PORT_TRIES} times; its last output:\n{last_log}");
    }

    /// Waits until the port accepts connections. `Err` with the log when the server exited;
    /// a panic with the log when it neither listens nor exits in time.
    fn wait_until_listening(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("({status})\n{}", self.log()));
            }
            if TcpStream::connect_timeout(&self.address(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                panic!(
                    "{} did not listen on {} within {START_TIMEOUT:?}; its output:\n{}",
                    self.name,
                    self.address(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn repo_url(&self, repo: &str) -> Url {
        let scheme = if self.dir.tls.is_some() {
            "https"
        } else {
            "http"
        };
        Url::parse(&format!("{scheme}://{}/{repo}/", self.address())).expect("a valid test URL")
    }

    fn log(&self) -> String {
        read_log(&self.dir.log_path())
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("--- {} output ---\n{}", self.name, self.log());
        }
    }
}

fn read_log(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(path) {
        // The last 8 KiB say what went wrong; the start is startup chatter.
        let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(length.saturating_sub(8192)));
        let _ = file.read_to_string(&mut text);
    }
    text
}

/// A port that was free a moment ago.
fn free_loopback_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("the bound address").port()
}

fn random_password() -> String {
    format!("pw-{:032x}", rand::random::<u128>())
}

/// An htpasswd line with a bcrypt hash (low cost: it is checked on every request).
fn write_htpasswd(path: &Path, username: &str, password: &str) {
    let hash = bcrypt::hash(password, 4).expect("bcrypt a test password");
    fs::write(path, format!("{username}:{hash}\n")).expect("write the htpasswd file");
}

/// restic itself, for tests that compare with it: `NEVERWIPED_RESTIC_BIN`, else from `PATH`.
pub fn restic_binary(test: &str) -> Option<PathBuf> {
    find_binary(
        test,
        "restic",
        "NEVERWIPED_RESTIC_BIN",
        None,
        "set NEVERWIPED_RESTIC_BIN or put restic 0.19 on PATH",
    )
}

/// The binary: from `env_var` when it is set (and only from there, so that a wrong setting is not
/// hidden by another copy), else from `PATH`, else `fallback`. When there is none: a failure where
/// every test must run, elsewhere `None` after a recorded skip (`neverwiped_testkit::missing`).
fn find_binary(
    test: &str,
    name: &str,
    env_var: &str,
    fallback: Option<&str>,
    install_hint: &str,
) -> Option<PathBuf> {
    let found = match std::env::var_os(env_var) {
        Some(path) => Some(PathBuf::from(path)).filter(|path| path.is_file()),
        None => {
            search_path(name).or_else(|| fallback.map(PathBuf::from).filter(|path| path.is_file()))
        }
    };
    if found.is_some() {
        return found;
    }
    let missing = match std::env::var_os(env_var) {
        Some(path) => format!(
            "{name} not found at {env_var}={}",
            Path::new(&path).display()
        ),
        None => format!("{name} not found"),
    };
    neverwiped_testkit::missing(format_args!("{missing} (for {test})"), install_hint);
    None
}

fn search_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}
