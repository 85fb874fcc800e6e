//! A misbehaving gate: an HTTP/1.1 proxy on loopback between the sidecar and a real restic REST
//! server that fails a share of the requests in the ways real load balancers and gates do.
//!
//! Which request fails, and how, is decided by a hash of the seed, the request's method and path,
//! and how many times that same request was seen before: a run with the same seed and the same
//! requests meets the same faults, whatever order concurrent requests arrive in. A request that
//! was failed is not necessarily failed again on its retry, as on a real flaky link.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use url::Url;

/// One way to fail a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// Answer 503 without passing the request on.
    ErrorBeforeForwarding,
    /// Pass the request on (the server acts on it), then answer 502 instead of its answer.
    ErrorAfterForwarding,
    /// Close the connection without passing the request on.
    DropBeforeForwarding,
    /// Pass the request on (an upload reaches the server), then close without answering.
    DropAfterForwarding,
    /// Pass the request on, then send the head and part of the body of its answer, and close.
    TruncateAnswer,
    /// Pass the request on, then hold its answer back for a while before sending it.
    StallAnswer,
}

impl Fault {
    /// Every fault, in the order a hash picks from.
    pub const ALL: [Fault; 6] = [
        Fault::ErrorBeforeForwarding,
        Fault::ErrorAfterForwarding,
        Fault::DropBeforeForwarding,
        Fault::DropAfterForwarding,
        Fault::TruncateAnswer,
        Fault::StallAnswer,
    ];
}

/// How often and how the proxy fails requests.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Makes the choice of faults reproducible.
    pub seed: u64,
    /// The share of requests failed, in percent.
    pub percent: u8,
    /// The faults to choose from.
    pub faults: Vec<Fault>,
    /// How long a [`Fault::StallAnswer`] holds its answer back.
    pub stall: Duration,
    /// Only requests with this method and a path containing this text are failed.
    pub only: Option<(&'static str, &'static str)>,
    /// Only a request's first try is failed (its retries go through).
    pub first_try_only: bool,
}

impl FaultPlan {
    /// Every kind of fault, at `percent` of the requests.
    pub fn every_fault(seed: u64, percent: u8) -> FaultPlan {
        FaultPlan {
            seed,
            percent,
            faults: Fault::ALL.to_vec(),
            stall: Duration::from_millis(300),
            only: None,
            first_try_only: false,
        }
    }

    /// `faults` on every first try of `method` requests whose path contains `path_part`.
    pub fn first_tries_of(
        method: &'static str,
        path_part: &'static str,
        faults: &[Fault],
    ) -> FaultPlan {
        FaultPlan {
            faults: faults.to_vec(),
            only: Some((method, path_part)),
            first_try_only: true,
            ..FaultPlan::every_fault(0, 100)
        }
    }

    /// Never fails (a plain proxy, for example to fill up only).
    pub fn none() -> FaultPlan {
        FaultPlan::every_fault(0, 0)
    }
}

/// What the proxy did so far.
#[derive(Default)]
struct Record {
    /// How often each (method, path) was seen: the hash's third input.
    seen: Mutex<HashMap<(String, String), u64>>,
    requests: AtomicUsize,
    injected: Mutex<HashMap<Fault, usize>>,
    /// Uploads of data objects let through so far.
    data_uploads: AtomicUsize,
}

/// Shared between the proxy handle and its connections.
struct State {
    upstream: SocketAddr,
    plan: Mutex<FaultPlan>,
    record: Record,
    /// After this many data uploads, every further one is answered 507 (`None`: never full).
    full_after_data_uploads: Mutex<Option<usize>>,
    full_answers: AtomicUsize,
    stopped: AtomicBool,
}

/// A running proxy; stops listening when dropped.
pub struct FaultProxy {
    address: SocketAddr,
    state: Arc<State>,
    accept_loop: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port in front of `upstream`.
    pub async fn start(upstream: SocketAddr, plan: FaultPlan) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let state = Arc::new(State {
            upstream,
            plan: Mutex::new(plan),
            record: Record::default(),
            full_after_data_uploads: Mutex::new(None),
            full_answers: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
        });
        let accept_loop = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(serve_connection(client, state.clone()));
                }
            }
        });
        FaultProxy {
            address,
            state,
            accept_loop,
        }
    }

    /// The URL of repository `repo` through the proxy.
    pub fn repo_url(&self, repo: &str) -> Url {
        Url::parse(&format!("http://{}/{repo}/", self.address)).unwrap()
    }

    /// Replaces the fault plan (e.g. to fail every request).
    pub fn set_plan(&self, plan: FaultPlan) {
        *self.state.plan.lock().unwrap() = plan;
    }

    /// From now on, a data upload after `uploads` more is answered 507 Insufficient Storage.
    pub fn fill_up_after(&self, uploads: usize) {
        let done = self.state.record.data_uploads.load(Ordering::SeqCst);
        *self.state.full_after_data_uploads.lock().unwrap() = Some(done + uploads);
    }

    /// Space is free again: no more 507s.
    pub fn free_space(&self) {
        *self.state.full_after_data_uploads.lock().unwrap() = None;
    }

    /// How many 507 answers were sent.
    pub fn full_answers(&self) -> usize {
        self.state.full_answers.load(Ordering::SeqCst)
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.state.record.requests.load(Ordering::SeqCst)
    }

    /// How many times each fault was injected.
    pub fn injected(&self) -> HashMap<Fault, usize> {
        self.state.record.injected.lock().unwrap().clone()
    }

    /// All faults injected so far.
    pub fn injected_total(&self) -> usize {
        self.injected().values().sum()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.accept_loop.abort();
    }
}

/// A request as received: method, path, its head lines (without `Connection`) and its body.
struct Request {
    method: String,
    path: String,
    head_lines: Vec<String>,
    body: Vec<u8>,
}

async fn read_request(client: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut head_lines = Vec::new();
    let mut content_length = 0;
    loop {
        let mut line = String::new();
        if client.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            break;
        }
        let lowercase = line.to_ascii_lowercase();
        if let Some(value) = lowercase.strip_prefix("content-length:") {
            content_length = value.trim().parse().ok()?;
        }
        if !lowercase.starts_with("connection:") {
            head_lines.push(line);
        }
    }
    let mut request_line = head_lines.first()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let mut body = vec![0; content_length];
    client.read_exact(&mut body).await.ok()?;
    Some(Request {
        method,
        path,
        head_lines,
        body,
    })
}

/// Serves one request; every answer closes its connection, so each request arrives on a
/// connection of its own and a fault on one never touches another.
async fn serve_connection(client: TcpStream, state: Arc<State>) {
    let mut client = BufReader::new(client);
    let Some(request) = read_request(&mut client).await else {
        return;
    };
    if state.stopped.load(Ordering::SeqCst) {
        return;
    }
    state.record.requests.fetch_add(1, Ordering::SeqCst);
    let client = client.get_mut();
    if answer_full(&state, &request) {
        state.full_answers.fetch_add(1, Ordering::SeqCst);
        write_status(client, 507, "quota of this repository exceeded").await;
    } else {
        let fault = choose_fault(&state, &request);
        if let Some(fault) = fault {
            *state
                .record
                .injected
                .lock()
                .unwrap()
                .entry(fault)
                .or_default() += 1;
        }
        answer(client, &state, &request, fault).await;
    }
    let _ = client.shutdown().await;
}

/// Whether this request is a data upload the full repository refuses.
fn answer_full(state: &State, request: &Request) -> bool {
    if request.method != "POST" || !request.path.contains("/data/") {
        return false;
    }
    let full_after = *state.full_after_data_uploads.lock().unwrap();
    match full_after {
        Some(limit) if state.record.data_uploads.load(Ordering::SeqCst) >= limit => true,
        _ => {
            state.record.data_uploads.fetch_add(1, Ordering::SeqCst);
            false
        }
    }
}

fn choose_fault(state: &State, request: &Request) -> Option<Fault> {
    let plan = state.plan.lock().unwrap().clone();
    if plan.percent == 0 || plan.faults.is_empty() {
        return None;
    }
    if let Some((method, path_part)) = plan.only {
        if request.method != method || !request.path.contains(path_part) {
            return None;
        }
    }
    let nth = {
        let mut seen = state.record.seen.lock().unwrap();
        let count = seen
            .entry((request.method.clone(), request.path.clone()))
            .or_default();
        *count += 1;
        *count
    };
    if plan.first_try_only && nth > 1 {
        return None;
    }
    let digest = Sha256::new()
        .chain_update(plan.seed.to_le_bytes())
        .chain_update(request.method.as_bytes())
        .chain_update(request.path.as_bytes())
        .chain_update(nth.to_le_bytes())
        .finalize();
    let roll = u64::from_le_bytes(digest[..8].try_into().unwrap());
    if roll % 100 >= u64::from(plan.percent) {
        return None;
    }
    let pick = u64::from_le_bytes(digest[8..16].try_into().unwrap());
    Some(plan.faults[(pick % plan.faults.len() as u64) as usize])
}

/// Answers one request, with `fault` if any.
async fn answer(client: &mut TcpStream, state: &State, request: &Request, fault: Option<Fault>) {
    match fault {
        Some(Fault::ErrorBeforeForwarding) => write_status(client, 503, "gate overloaded").await,
        Some(Fault::DropBeforeForwarding) => {}
        _ => {
            let Some(answer) = forward(request, state.upstream).await else {
                return;
            };
            match fault {
                Some(Fault::ErrorAfterForwarding) => {
                    write_status(client, 502, "upstream timed out").await
                }
                Some(Fault::DropAfterForwarding) => {}
                Some(Fault::TruncateAnswer) => {
                    let head_end = find_head_end(&answer).unwrap_or(answer.len());
                    let cut = head_end + (answer.len() - head_end) / 2;
                    write_all(client, &answer[..cut]).await;
                }
                Some(Fault::StallAnswer) => {
                    let stall = state.plan.lock().unwrap().stall;
                    tokio::time::sleep(stall).await;
                    write_all(client, &answer).await;
                }
                _ => write_all(client, &answer).await,
            }
        }
    }
}

/// The index just past the blank line ending an answer's head.
fn find_head_end(answer: &[u8]) -> Option<usize> {
    answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| at + 4)
}

async fn write_status(client: &mut TcpStream, code: u16, body: &str) {
    let head = format!(
        "HTTP/1.1 {code} Fault\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    write_all(client, &[head.as_bytes(), body.as_bytes()].concat()).await;
}

/// Writes to a client that may have gone away (which is not the proxy's problem).
async fn write_all(client: &mut TcpStream, bytes: &[u8]) {
    let _ = client.write_all(bytes).await;
    let _ = client.flush().await;
}

/// Sends the request to the real server with `Connection: close` and returns its whole answer
/// (head and body, as the server sent them), or `None` when the server cannot be reached.
async fn forward(request: &Request, upstream: SocketAddr) -> Option<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await.ok()?;
    let mut head = request.head_lines.join("\r\n");
    head.push_str("\r\nConnection: close\r\n\r\n");
    server.write_all(head.as_bytes()).await.ok()?;
    server.write_all(&request.body).await.ok()?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.ok()?;
    Some(answer)
}
