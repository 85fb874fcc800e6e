//! A stand-in for the gate's front in tests: one URL on loopback that sends each request to the
//! restic REST server of its Basic-auth user name (the tenant's logins to an `--append-only`
//! rest-server, the admin's to a full one on the same data folder) and answers `401` to any
//! other. It forwards requests and answers unchanged and streams their bodies; the rest-servers
//! check the passwords themselves, so the front decides nothing but where a login goes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type Answer = Response<BoxBody<Bytes, hyper::Error>>;

/// Which upstream server each user name goes to.
type Routes = HashMap<String, SocketAddr>;

/// The running front; stopped on drop.
pub struct GateFront {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GateFront {
    /// Listens on an ephemeral loopback port and routes each `(user name, server)` pair's logins
    /// to that server.
    pub fn start<'a>(routes: impl IntoIterator<Item = (&'a str, SocketAddr)>) -> GateFront {
        let routes: Routes = routes
            .into_iter()
            .map(|(user, server)| (user.to_owned(), server))
            .collect();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the gate front");
        listener
            .set_nonblocking(true)
            .expect("set the gate front's socket non-blocking");
        let address = listener.local_addr().expect("the gate front's address");
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::spawn(move || serve(listener, Arc::new(routes), stopped));
        GateFront {
            address,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The address the front listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://127.0.0.1:PORT/`, the gate's one URL.
    pub fn base_url(&self) -> String {
        format!("http://{}/", self.address)
    }
}

impl Drop for GateFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The front's own runtime on its own thread, so that synchronous tests can use it too.
fn serve(listener: std::net::TcpListener, routes: Arc<Routes>, mut stopped: oneshot::Receiver<()>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the gate front's runtime");
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener).expect("the gate front's listener");
        loop {
            let accepted = tokio::select! {
                _ = &mut stopped => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((client, _)) = accepted else { continue };
            let routes = routes.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| route(request, routes.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(client), service)
                    .await;
            });
        }
    });
}

/// Forwards `request` to its login's server, or answers `401` to a login the front does not know.
async fn route(request: Request<Incoming>, routes: Arc<Routes>) -> Result<Answer, hyper::Error> {
    let upstream = basic_auth_user(&request).and_then(|user| routes.get(&user).copied());
    match upstream {
        Some(server) => forward(request, server).await,
        None => Ok(unauthorized()),
    }
}

/// The user name of a `Basic` `Authorization` header, if there is one.
fn basic_auth_user(request: &Request<Incoming>) -> Option<String> {
    let header = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let encoded = header.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let login = String::from_utf8(decoded).ok()?;
    Some(login.split_once(':')?.0.to_owned())
}

/// Sends `request` as it came (method, path, headers, streamed body) over a new connection to
/// `server` and streams its answer back.
async fn forward(request: Request<Incoming>, server: SocketAddr) -> Result<Answer, hyper::Error> {
    let Ok(stream) = TcpStream::connect(server).await else {
        return Ok(bare(StatusCode::BAD_GATEWAY));
    };
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let answer = sender.send_request(request).await?;
    Ok(answer.map(BodyExt::boxed))
}

/// Sends one request as `username`/`password` to `url` (`http://HOST:PORT/PATH`) and returns the
/// answer's status: what any holder of a login can do at the gate with raw HTTP.
pub async fn request_as(
    method: &str,
    url: &str,
    (username, password): (&str, &str),
    body: Vec<u8>,
) -> u16 {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let stream = TcpStream::connect(authority)
        .await
        .unwrap_or_else(|e| panic!("connect to {authority}: {e}"));
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("an HTTP connection");
    tokio::spawn(connection);
    let login = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    let request = Request::builder()
        .method(method)
        .uri(if path.is_empty() { "/" } else { path })
        .header(hyper::header::HOST, authority)
        .header(AUTHORIZATION, format!("Basic {login}"))
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    let answer = sender.send_request(request).await.expect("an answer");
    answer.status().as_u16()
}

fn unauthorized() -> Answer {
    let mut answer = bare(StatusCode::UNAUTHORIZED);
    answer.headers_mut().insert(
        WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Basic realm=\"gate\""),
    );
    answer
}

fn bare(status: StatusCode) -> Answer {
    let mut answer = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *answer.status_mut() = status;
    answer
}
