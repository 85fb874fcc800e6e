//! What the plugin's tests share: the real API server from `KUBECONFIG` (with the committed CRDs),
//! a namespace per test, a real rest-server with HTTP authentication, and an RBAC stand-in.
//!
//! The API server of `real-apiserver.sh` authorizes its admin certificate only and has no RBAC;
//! so a user with fewer rights is played by [`RbacFront`]: an HTTP front that forwards what a
//! Role allows to the real server as the admin, and answers the rest exactly as kube-apiserver's
//! RBAC authorizer does (403, a `Forbidden` Status naming the user, verb and resource).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;

#[allow(unused_imports)]
pub use neverwiped_testkit::{api_server_or_skip, apply_crds, free_port, program, TestNamespace};

/// A rest-server with HTTP authentication on loopback, serving a fresh folder; killed on drop.
pub struct RestServer {
    child: Child,
    pub port: u16,
    pub username: String,
    pub password: String,
    _dir: tempfile::TempDir,
}

impl RestServer {
    /// Creates a plan's Secrets in `namespace`: `repo` with the repository password `password`,
    /// and `gate` with this server's login.
    pub fn create_plan_secrets(&self, namespace: &TestNamespace, password: &str) {
        namespace.create_secret("repo", "Opaque", &[("password", password)]);
        namespace.create_secret(
            "gate",
            "kubernetes.io/basic-auth",
            &[("username", &self.username), ("password", &self.password)],
        );
    }

    /// Starts rest-server, or `None` (after a recorded skip) when it is not installed and not every
    /// test must run.
    pub fn start() -> Option<RestServer> {
        let binary = neverwiped_testkit::require(
            program("rest-server"),
            "rest-server is not on PATH",
            "run ../shared/tools/install-peers.sh and put its folder on PATH, or run scripts/test.sh",
        )?;
        let dir = tempfile::tempdir().expect("a folder for the server");
        let username = "gate-user".to_owned();
        let password = format!("gate-pw-{}", std::process::id());
        let htpasswd = dir.path().join("htpasswd");
        let hash = bcrypt::hash(&password, 4).expect("bcrypt");
        std::fs::write(&htpasswd, format!("{username}:{hash}\n")).expect("htpasswd");
        let port = free_port();
        let child = Command::new(binary)
            .arg("--path")
            .arg(dir.path().join("data"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--htpasswd-file")
            .arg(&htpasswd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rest-server starts");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "rest-server listens"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(RestServer {
            child,
            port,
            username,
            password,
            _dir: dir,
        })
    }

    /// The URL of the repository `name` on this server, as a plan names it.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for RestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a Role allows: `(verb, resource)` pairs, e.g. `("get", "backupplans")`.
pub type Rules = Vec<(&'static str, &'static str)>;

/// An HTTP front for the API server that plays RBAC for the user `user` with the rules
/// `allowed`: allowed requests are forwarded to the real server as the admin of `KUBECONFIG`;
/// others are answered with kube-apiserver's 403.
pub struct RbacFront {
    pub port: u16,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for RbacFront {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl RbacFront {
    pub async fn start(user: &'static str, namespace: &str, allowed: Rules) -> RbacFront {
        let client = Arc::new(admin_client());
        let upstream = Arc::new(admin_server());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let allowed = Arc::new(allowed);
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (client, upstream, allowed) =
                    (client.clone(), upstream.clone(), allowed.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (client, upstream, allowed) =
                            (client.clone(), upstream.clone(), allowed.clone());
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                answer(request, user, &allowed, &client, &upstream).await,
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: rbac\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: {user}\n  user: {{}}\ncontexts:\n- name: {user}\n  context:\n    cluster: rbac\n    user: {user}\n    namespace: {namespace}\ncurrent-context: {user}\n"
            ),
        )
        .unwrap();
        RbacFront {
            port,
            kubeconfig,
            _dir: dir,
            server,
        }
    }
}

/// The verb and resource of an API request, as RBAC names them.
fn verb_and_resource(method: &hyper::Method, path: &str) -> (&'static str, String, Option<String>) {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // /api/v1/namespaces/NS/RESOURCE[/NAME] or /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME]
    let rest: &[&str] = match parts.as_slice() {
        ["api", _, rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => &[],
    };
    let (resource, name) = match rest {
        ["namespaces", _, resource, name, ..] => (resource.to_string(), Some(name.to_string())),
        ["namespaces", _, resource] => (resource.to_string(), None),
        [resource, name, ..] => (resource.to_string(), Some(name.to_string())),
        [resource] => (resource.to_string(), None),
        [] => (String::new(), None),
    };
    let verb = match (method.as_str(), name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", _) => "delete",
        _ => "other",
    };
    (verb, resource, name)
}

async fn answer(
    request: Request<Incoming>,
    user: &str,
    allowed: &Rules,
    client: &reqwest::Client,
    upstream: &str,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let (verb, resource, name) = verb_and_resource(request.method(), &path);
    let discovery = resource.is_empty() || !path.contains("/namespaces/");
    let permitted = discovery || allowed.iter().any(|(v, r)| *v == verb && *r == resource);
    if !permitted {
        let namespace = path
            .split("/namespaces/")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_default();
        let group = path
            .strip_prefix("/apis/")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("");
        let named = name
            .as_deref()
            .map(|n| format!("{resource} \"{n}\""))
            .unwrap_or(resource.clone());
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{named} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" in the namespace \"{namespace}\""),
            "reason": "Forbidden",
            "details": {"name": name, "group": group, "kind": resource},
            "code": 403,
        });
        return Response::builder()
            .status(403)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(status.to_string())))
            .unwrap();
    }
    let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes()).unwrap();
    let target = format!(
        "{upstream}{}",
        request
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut forwarded = client.request(method, target);
    for header in ["accept", "content-type"] {
        if let Some(value) = request.headers().get(header) {
            forwarded = forwarded.header(header, value.as_bytes());
        }
    }
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let reply = forwarded.body(body.to_vec()).send().await.unwrap();
    let status = reply.status().as_u16();
    let content_type = reply
        .headers()
        .get("content-type")
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default();
    let bytes = reply.bytes().await.unwrap();
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(bytes))
        .unwrap()
}

fn admin_kubeconfig() -> kube::config::Kubeconfig {
    kube::config::Kubeconfig::read().expect("KUBECONFIG reads")
}

fn admin_server() -> String {
    let config = admin_kubeconfig();
    let cluster = config.clusters[0].cluster.as_ref().unwrap();
    cluster.server.clone().unwrap()
}

/// A client that talks to the real server as the admin of `KUBECONFIG`.
fn admin_client() -> reqwest::Client {
    let config = admin_kubeconfig();
    let decode = |text: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .expect("base64 in the kubeconfig")
    };
    let cluster = config.clusters[0].cluster.as_ref().unwrap();
    let ca = decode(cluster.certificate_authority_data.as_deref().unwrap());
    let user = config.auth_infos[0].auth_info.as_ref().unwrap();
    let mut identity = decode(user.client_certificate_data.as_deref().unwrap());
    let key = user.client_key_data.as_ref().unwrap();
    identity.extend(decode(&secrecy_text(key)));
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .build()
        .unwrap()
}

fn secrecy_text(secret: &secrecy::SecretString) -> String {
    use secrecy::ExposeSecret;
    secret.expose_secret().to_owned()
}
