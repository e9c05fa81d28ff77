//! A fault-injecting OTLP/HTTP receiver for tests: answers each request as scripted (a
//! status, `Retry-After`, a hang, a slow drip, a partial success) and keeps every request it
//! got, with its arrival time and its decoded content.

use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message as _;

/// How to answer one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 200 with an empty response message.
    Ok,
    /// This status (with `Retry-After: secs` if given).
    Status(u16, Option<u64>),
    /// Answer nothing for this long (then 200): the client times out.
    Hang(Duration),
    /// 200 whose body comes one byte per `Duration` (100 bytes).
    Drip(Duration),
    /// 200 with a partial success rejecting this many log records.
    PartialLogs(i64),
}

/// A request as received.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub(crate) at: Instant,
    pub(crate) path: String,
    pub(crate) body: Vec<u8>,
    pub(crate) status: u16,
}

impl Arrival {
    pub(crate) fn logs(&self) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest::decode(&self.body[..]).expect("a logs request")
    }
    pub(crate) fn metrics(&self) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest::decode(&self.body[..]).expect("a metrics request")
    }
    pub(crate) fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    fallback: Option<Reply>,
    arrivals: Vec<Arrival>,
}

/// See the module docs. Stops when dropped.
pub(crate) struct Receiver {
    server: Arc<tiny_http::Server>,
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    pub(crate) addr: SocketAddr,
}

impl Receiver {
    /// A receiver on a free port of 127.0.0.1 that answers `Ok` unless scripted.
    pub(crate) fn start() -> Receiver {
        Receiver::on("127.0.0.1:0")
    }

    /// A receiver on `addr`.
    pub(crate) fn on(addr: &str) -> Receiver {
        let server = Arc::new(tiny_http::Server::http(addr).expect("bind the receiver"));
        let addr = server.server_addr().to_ip().expect("an IP address");
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let (s, st) = (Arc::clone(&server), Arc::clone(&state));
        let thread = std::thread::spawn(move || {
            for mut req in s.incoming_requests() {
                let at = Instant::now();
                let mut body = Vec::new();
                let _ = req.as_reader().read_to_end(&mut body);
                let reply = {
                    let mut g = st.0.lock().expect("lock");
                    g.script
                        .pop_front()
                        .or_else(|| g.fallback.clone())
                        .unwrap_or(Reply::Ok)
                };
                let status = match &reply {
                    Reply::Status(c, _) => *c,
                    Reply::Hang(_) => 0,
                    _ => 200,
                };
                {
                    let mut g = st.0.lock().expect("lock");
                    g.arrivals.push(Arrival {
                        at,
                        path: req.url().to_owned(),
                        body,
                        status,
                    });
                    st.1.notify_all();
                }
                // Each answer on its own thread: a hang delays only its own request.
                std::thread::spawn(move || respond(req, reply));
            }
        });
        Receiver {
            server,
            state,
            thread: Some(thread),
            addr,
        }
    }

    /// The base URL.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers the next requests so, in order.
    pub(crate) fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.0.lock().expect("lock").script.extend(replies);
    }

    /// Answers every unscripted request so (`None`: 200).
    pub(crate) fn fallback(&self, reply: Option<Reply>) {
        self.state.0.lock().expect("lock").fallback = reply;
    }

    /// Every request so far.
    pub(crate) fn arrivals(&self) -> Vec<Arrival> {
        self.state.0.lock().expect("lock").arrivals.clone()
    }

    /// Waits until `pred` holds for the requests so far (panics after `timeout`).
    pub(crate) fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&[Arrival]) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        let mut g = self.state.0.lock().expect("lock");
        while !pred(&g.arrivals) {
            let now = Instant::now();
            assert!(
                now < deadline,
                "timed out waiting for {what}: {} requests",
                g.arrivals.len()
            );
            g = self
                .state
                .1
                .wait_timeout(g, deadline - now)
                .expect("lock")
                .0;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A body that yields one byte per `every`.
struct Drip {
    left: usize,
    every: Duration,
}

impl Read for Drip {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        std::thread::sleep(self.every);
        self.left -= 1;
        buf[0] = b'x';
        Ok(1)
    }
}

fn respond(req: tiny_http::Request, reply: Reply) {
    match reply {
        Reply::Ok => {
            let _ = req.respond(tiny_http::Response::from_data(Vec::new()));
        }
        Reply::Status(code, retry_after) => {
            let mut r = tiny_http::Response::from_string("injected fault").with_status_code(code);
            if let Some(s) = retry_after {
                r.add_header(
                    tiny_http::Header::from_bytes(&b"Retry-After"[..], s.to_string().as_bytes())
                        .expect("header"),
                );
            }
            let _ = req.respond(r);
        }
        Reply::Hang(d) => {
            std::thread::sleep(d);
            drop(req);
        }
        Reply::Drip(every) => {
            let r = tiny_http::Response::new(
                tiny_http::StatusCode(200),
                Vec::new(),
                Drip { left: 100, every },
                Some(100),
                None,
            );
            let _ = req.respond(r);
        }
        Reply::PartialLogs(n) => {
            let body = ExportLogsServiceResponse {
                partial_success: Some(ExportLogsPartialSuccess {
                    rejected_log_records: n,
                    error_message: "injected partial success".into(),
                }),
            }
            .encode_to_vec();
            let _ = req.respond(tiny_http::Response::from_data(body));
        }
    }
}
