//! The plotter's HTTP server (`tiny_http`, one thread per request, 127.0.0.1 only). Every
//! request needs the server's random token (in the query, or in the cookie the page gets when
//! it is opened with it): other users of the machine can reach 127.0.0.1 too.
//!
//! - `GET /`, `/app.css` and `/app.js` (the page's modules in `web/`, joined: [`bundle`]): the
//!   page (embedded).
//! - `GET /api/series`: series, image series and counters.
//! - `GET /api/data?ids=1,2&x=time|step&from=F&to=T&width=W`: the min/max envelope per column.
//! - `GET /api/frame?id=N`: the latest frame of an image series.
//! - `GET /api/stream?ids=1,2&x=time|step&span=S&width=W`: server-sent events, one message
//!   about every [`STREAM_EVERY`]: counters, the envelope of the last `S` seconds (or, on the
//!   step axis, each series' own last `S` samples) and the latest frame numbers.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value as Json, json};
use tiny_http::{Header, Method, Request, Response};

use super::now_secs;
use super::store::{Store, XAxis};

/// Period of the stream's messages.
pub const STREAM_EVERY: Duration = Duration::from_millis(250);
/// Columns per series at most.
const MAX_WIDTH: usize = 4000;
/// Open streams at most (further ones get 503).
const MAX_STREAMS: usize = 64;

const INDEX_HTML: &str = include_str!("web/index.html");

/// The page's ES modules, in an order where each one's top-level names are declared before a
/// later module's top level uses them (`app.js`, which starts the page, last).
const MODULES: &[&str] = &[
    include_str!("web/state.js"),
    include_str!("web/format.js"),
    include_str!("web/series.js"),
    include_str!("web/sidebar.js"),
    include_str!("web/plots.js"),
    include_str!("web/stream.js"),
    include_str!("web/draw.js"),
    include_str!("web/images.js"),
    include_str!("web/app.js"),
];

/// The page's script, `/app.js`: its modules joined into one, their `import` statements dropped
/// and their `export`s made plain declarations (they share one scope, as they did before the
/// page was split into files to read). One script, not nine: `tiny_http` 0.12 can leave a
/// connection's requests queued behind a browser's idle keep-alive connections when the
/// browser opens several at once (its task pool queues work that no thread takes), and the
/// page then never finishes loading.
fn bundle() -> &'static str {
    static BUNDLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUNDLE.get_or_init(|| {
        let mut out = String::new();
        for module in MODULES {
            let mut in_import = false;
            for line in module.lines() {
                if in_import || line.starts_with("import ") {
                    // `import { a, b } from './x.js';`, or the same over several lines.
                    in_import = !line.trim_end().ends_with(';');
                    continue;
                }
                out.push_str(line.strip_prefix("export ").unwrap_or(line));
                out.push('\n');
            }
        }
        out
    })
}

/// Serves `path` if it is one of the page's files other than `/`.
fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/app.css" => Some(("text/css; charset=utf-8", include_str!("web/app.css"))),
        "/app.js" => Some(("text/javascript; charset=utf-8", bundle())),
        _ => None,
    }
}

/// A running server (its threads live as long as the process): its `url()` is
/// `http://127.0.0.1:PORT/?token=…`, the page, for whoever has this URL; the token may also
/// come in the cookie the page gets.
pub use crate::token::LocalServer as Server;

/// The cookie that carries the token after the first page load.
const COOKIE: &str = "snapbus_plotter";

/// Binds 127.0.0.1:`port` (0: a free port) and serves `store` from a thread; returns once
/// the socket is listening.
pub fn serve(store: Arc<Mutex<Store>>, port: u16) -> std::io::Result<Server> {
    let server = tiny_http::Server::http(("127.0.0.1", port))
        .map_err(|e| std::io::Error::other(format!("binding 127.0.0.1:{port}: {e}")))?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| std::io::Error::other("the server has no IP address"))?;
    let token = crate::token::new_token()?;
    let streams = Arc::new(AtomicUsize::new(0));
    let secret: Arc<str> = token.clone().into();
    std::thread::Builder::new()
        .name("plotter-http".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let store = Arc::clone(&store);
                let streams = Arc::clone(&streams);
                let secret = Arc::clone(&secret);
                let _ = std::thread::Builder::new()
                    .name("plotter-request".into())
                    .spawn(move || handle(request, &store, &streams, &secret));
            }
        })?;
    Ok(Server::new("http", addr, token))
}

fn header(name: &'static str, value: &'static str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII constants")
}

fn respond(request: Request, status: u16, content_type: &'static str, body: String) {
    let response = Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", content_type))
        .with_header(header("Cache-Control", "no-store"));
    let _ = request.respond(response);
}

fn json_response(request: Request, status: u16, body: &Json) {
    respond(request, status, "application/json", body.to_string());
}

fn bad(request: Request, message: &str) {
    json_response(request, 400, &json!({ "error": message }));
}

/// The query's parameters (`a=1&b=2`); values are numbers, commas and words: no decoding.
fn params(query: &str) -> Vec<(&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect()
}

/// What `/api/data` and `/api/stream` share.
struct Query {
    ids: Vec<usize>,
    axis: XAxis,
    width: usize,
    from: Option<f64>,
    to: Option<f64>,
    span: f64,
}

fn query(q: &str) -> Result<Query, String> {
    let mut out = Query {
        ids: Vec::new(),
        axis: XAxis::Time,
        width: 600,
        from: None,
        to: None,
        span: 30.0,
    };
    let num = |k: &str, v: &str| -> Result<f64, String> {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| format!("{k}={v:?} is not a number"))
    };
    for (k, v) in params(q) {
        match k {
            "ids" => {
                out.ids = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().map_err(|_| format!("ids: {s:?} is not an id")))
                    .collect::<Result<_, _>>()?;
            }
            "x" => out.axis = XAxis::parse(v).ok_or(format!("x={v:?}: time or step"))?,
            "width" => {
                out.width = v
                    .parse::<usize>()
                    .ok()
                    .filter(|w| (1..=MAX_WIDTH).contains(w))
                    .ok_or(format!("width={v:?}: 1..={MAX_WIDTH}"))?;
            }
            "from" => out.from = Some(num(k, v)?),
            "to" => out.to = Some(num(k, v)?),
            "span" => {
                out.span = num(k, v)?;
                if out.span <= 0.0 {
                    return Err(format!("span={v:?} must be > 0"));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Whether the request carries the token (in the query or the cookie).
fn authorized(request: &Request, query: &str, token: &str) -> bool {
    let in_query = params(query)
        .iter()
        .any(|(k, v)| *k == "token" && *v == token);
    let in_cookie = request.headers().iter().any(|h| {
        h.field.equiv("Cookie")
            && h.value.as_str().split(';').any(|c| {
                c.trim()
                    .strip_prefix(COOKIE)
                    .and_then(|r| r.strip_prefix('='))
                    == Some(token)
            })
    });
    in_query || in_cookie
}

fn handle(request: Request, store: &Mutex<Store>, streams: &AtomicUsize, token: &str) {
    if *request.method() != Method::Get {
        respond(request, 405, "text/plain", "GET only\n".into());
        return;
    }
    let url = request.url().to_owned();
    let (path, q) = url.split_once('?').unwrap_or((&url, ""));
    if path == "/favicon.ico" {
        respond(request, 204, "text/plain", String::new());
        return;
    }
    if !authorized(&request, q, token) {
        respond(
            request,
            403,
            "text/plain; charset=utf-8",
            "Open the URL the plotter printed (it carries the page's token).\n".into(),
        );
        return;
    }
    match path {
        "/" | "/index.html" => {
            // The page's own requests carry the token as a cookie from here on.
            let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
            let response = Response::from_string(INDEX_HTML)
                .with_status_code(200)
                .with_header(header("Content-Type", "text/html; charset=utf-8"))
                .with_header(header("Cache-Control", "no-store"))
                .with_header(
                    Header::from_bytes(&b"Set-Cookie"[..], cookie.as_bytes())
                        .expect("an ASCII cookie"),
                );
            let _ = request.respond(response);
        }
        "/api/series" => {
            let body = with_store(store, |s| s.series_json(now_secs()));
            json_response(request, 200, &body);
        }
        "/api/data" => match query(q) {
            Ok(qr) => {
                let body = with_store(store, |s| {
                    s.data_json(&qr.ids, qr.axis, qr.from, qr.to, qr.width)
                });
                json_response(request, 200, &body);
            }
            Err(e) => bad(request, &e),
        },
        "/api/frame" => {
            let id = params(q)
                .into_iter()
                .find(|(k, _)| *k == "id")
                .and_then(|(_, v)| v.parse::<usize>().ok());
            match id.and_then(|id| with_store(store, |s| s.frame_json(id))) {
                Some(body) => json_response(request, 200, &body),
                None => json_response(request, 404, &json!({"error": "no such frame"})),
            }
        }
        "/api/stream" => match query(q) {
            Ok(qr) => {
                if streams.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
                    streams.fetch_sub(1, Ordering::SeqCst);
                    respond(request, 503, "text/plain", "too many streams\n".into());
                    return;
                }
                stream(request, store, &qr);
                streams.fetch_sub(1, Ordering::SeqCst);
            }
            Err(e) => bad(request, &e),
        },
        _ => match asset(path) {
            Some((content_type, body)) => respond(request, 200, content_type, body.into()),
            None => respond(request, 404, "text/plain", "not found\n".into()),
        },
    }
}

fn with_store<T>(store: &Mutex<Store>, f: impl FnOnce(&Store) -> T) -> T {
    // A poisoned store still holds data worth showing.
    let guard = store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&guard)
}

/// Writes server-sent events until the client goes away.
fn stream(request: Request, store: &Mutex<Store>, q: &Query) {
    let mut w = request.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
                Connection: close\r\nX-Accel-Buffering: no\r\n\r\nretry: 1000\n\n";
    if w.write_all(head.as_bytes())
        .and_then(|()| w.flush())
        .is_err()
    {
        return;
    }
    loop {
        let msg = with_store(store, |s| {
            let now = now_secs();
            json!({
                "stats": s.stats_json(now),
                "data": s.recent_json(&q.ids, q.axis, q.span, q.width),
                "frames": s.frames_json(),
            })
        });
        let event = format!("data: {msg}\n\n");
        if w.write_all(event.as_bytes())
            .and_then(|()| w.flush())
            .is_err()
        {
            return;
        }
        std::thread::sleep(STREAM_EVERY);
    }
}
